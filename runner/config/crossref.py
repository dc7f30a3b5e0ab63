"""Cross-reference checks, run after schema validation, reported in the same shape.

Unknown agents, tools, steps and models (with "did you mean"), dependency cycles,
undefined template variables, invalid output schemas, input defaults of the wrong type,
and money caps on models without a known price.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from runner.config.documents import Document, escape_pointer_token
from runner.config.graph import ancestors, find_cycle
from runner.config.prices import find_price, unpriced_message
from runner.config.profile_checks import check_model_settings, check_tier_price
from runner.config.profiles import find_profile
from runner.config.project_files import workspace_file_problem
from runner.config.report_options import DELIVERY_TEMPLATE_ROOTS
from runner.config.schema import check_schema, validate_part
from runner.config.specs import AgentSpec, StepSpec, TaskSpec, ToolRef
from runner.config.template_budget import render_affordable, shared_pool
from runner.config.template_check import (
    SAMPLES,
    SampleUnknown,
    render_problem,
    sample_context,
    sample_inputs,
    static_problems,
)
from runner.config.template_engine import environment, references
from runner.config.template_types import Reference, TemplateError
from runner.core.providers import Provider
from runner.errors import Problem, did_you_mean

if TYPE_CHECKING:
    from runner.config.project import Project


def builtin_tool_names() -> list[str]:
    """The built-in tools' names (no tool is built to read them)."""
    from runner.tools.builtins import builtin_names

    return builtin_names()


def tool_settings_schemas(project: Project) -> dict[str, Mapping[str, Any]]:
    """Every tool a configuration may name (built-in or from tools.d), with the JSON Schema
    of the settings it takes; no tool is built to read them."""
    from runner.tools.builtins import BUILTINS
    from runner.tools.settings import custom_settings_schema

    schemas: dict[str, Mapping[str, Any]] = {entry.name: entry.settings_schema for entry in BUILTINS}
    schemas.update({name: custom_settings_schema(spec.data) for name, spec in project.tools.items()})
    return schemas


def check_references(project: Project) -> list[Problem]:
    with shared_pool():  # the template checks of the whole project spend from one pool
        return _check_references(project)


def _check_references(project: Project) -> list[Problem]:
    tools = tool_settings_schemas(project)
    problems: list[Problem] = []
    for agent in project.agents.values():
        doc = project.document("Agent", agent.name)
        problems += _check_tool_refs(doc, agent.tools, tools)
        problems += _check_schema_field(doc, "/output_schema", agent.output_schema)
        problems += _check_networks(doc, agent.allow_private_networks)
        problems += _check_models(project, doc, agent)
        if agent.caps.max_cost_usd is not None:
            problems += _check_price(project, doc, agent, "/caps/max_cost_usd")
        problems += _check_knowledge_refs(project, doc, agent.knowledge)
        if agent.judge is not None and agent.judge.agent not in project.agents:
            name = agent.judge.agent
            problems.append(doc.problem("/checks/judge/agent", f"unknown agent '{name}'{did_you_mean(name, project.agents)}"))
    for task in project.tasks.values():
        problems += TaskChecker(project, task, tools).check()
    problems += _check_knowledge_sources(project)
    from runner.config.data_checks import source_document_problems

    problems += source_document_problems(project)
    return problems


def _check_models(project: Project, doc: Document, agent: AgentSpec) -> list[Problem]:
    """The agent's ``model:`` and ``fallback_model:``, each against its profile (settings it
    refuses, keys written in YAML, a priority tier without its rates)."""
    problems: list[Problem] = []
    for at, spec in (("/model", agent.model), ("/fallback_model", agent.fallback_model)):
        if spec is None:
            continue
        profile = find_profile(project.profiles, spec.id, spec.profile)
        problems += _check_profile_name(project, doc, spec.profile, at)
        problems += check_model_settings(doc, spec, profile, at=at)
        problems += check_tier_price(doc, agent, profile, project.prices, at=at)
    return problems


def _check_profile_name(project: Project, doc: Document, name: str | None, at: str) -> list[Problem]:
    """``model.profile`` (or ``fallback_model.profile``) names a profile the project knows."""
    if name is None or name in project.profiles:
        return []
    hint = did_you_mean(name, project.profiles) or f"; known: {', '.join(project.profiles)} (or add it in a kind: ModelProfiles document)"
    return [doc.problem(f"{at}/profile", f"unknown model profile '{name}'{hint}")]


def _check_knowledge_refs(project: Project, doc: Document, names: Iterable[str]) -> list[Problem]:
    """Each knowledge base named under ``knowledge:`` is declared."""
    problems: list[Problem] = []
    for i, (name, item) in enumerate(zip(names, doc.data.get("knowledge") or (), strict=True)):
        if isinstance(item, str) and name not in project.knowledge:
            hint = did_you_mean(name, project.knowledge) or "; declare it in knowledge.d/ (kind: Knowledge)"
            problems.append(doc.problem(f"/knowledge/{i}", f"unknown knowledge base '{name}'{hint}"))
    return problems


def _check_knowledge_sources(project: Project) -> list[Problem]:
    """Every knowledge base's sources stay in the project (whether they match files is a
    question for the run and ``runner index``: the data may be deployed apart from the YAML)."""
    from runner.knowledge.source_files import source_problem

    problems: list[Problem] = []
    for (kind, _), doc in project.documents.items():
        declared = [("", doc.data)] if kind == "Knowledge" else [
            (f"/knowledge/{i}", item) for i, item in enumerate(doc.data.get("knowledge") or ()) if isinstance(item, dict)
        ] if kind in ("Agent", "Task") else []  # fmt: skip
        for pointer, data in declared:
            refused = [(i, p) for i, s in enumerate(data["sources"]) if (p := source_problem(s))]
            problems += [doc.problem(f"{pointer}/sources/{i}", problem) for i, problem in refused]
    return problems


def _check_tool_refs(doc: Document, refs: Iterable[ToolRef], tools: Mapping[str, Mapping[str, Any]]) -> list[Problem]:
    """Each named tool exists and its settings have the types the tool declares."""
    problems: list[Problem] = []
    for ref in refs:
        if ref.name in tools:
            problems += _check_settings(doc, ref, tools[ref.name])
        elif "__" not in ref.name:  # MCP tools are known only at run time
            problems.append(doc.problem(ref.pointer, f"unknown tool '{ref.name}'{did_you_mean(ref.name, tools)}"))
    return problems


def _check_settings(doc: Document, ref: ToolRef, schema: Mapping[str, Any]) -> list[Problem]:
    pointer = ref.pointer.removesuffix("/name") + "/settings"
    if not ref.settings:
        required = list(schema.get("required", ()))
        if required:
            return [doc.problem(ref.pointer, f"tool '{ref.name}' needs settings ({', '.join(required)}); "
                                "write it as {name: " + ref.name + ", settings: {...}}")]
        return []
    allowed = list(schema.get("properties", {}))
    if not allowed:
        return [doc.problem(pointer, f"tool '{ref.name}' takes no settings; remove them", key=True)]
    return validate_part(doc, pointer, ref.settings, schema)


def _check_networks(doc: Document, networks: Iterable[str]) -> list[Problem]:
    """Each exempted range is a CIDR narrower than the whole address space."""
    problems: list[Problem] = []
    for i, text in enumerate(networks):
        pointer = f"/network/allow_private_networks/{i}"
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError as exc:
            problems.append(doc.problem(pointer, f"not a CIDR range ({exc}); write e.g. 10.0.5.0/24 or 127.0.0.1/32"))
            continue
        if network.prefixlen == 0:
            problems.append(doc.problem(pointer, f"{text} exempts every address; list the private ranges you need"))
    return problems


def _check_schema_field(doc: Document, pointer: str, value: dict[str, Any] | None) -> list[Problem]:
    if value is None:
        return []
    reason = check_schema(value)
    return [doc.problem(pointer, f"not a valid JSON Schema: {reason}")] if reason else []


def _check_price(project: Project, doc: Document, agent: AgentSpec, pointer: str) -> list[Problem]:
    """A money cap over ``agent``'s calls needs the price of its model and of its fallback model."""
    return [
        doc.problem(pointer, unpriced_message(spec.id, agent.name))
        for spec in (agent.model, agent.fallback_model)
        if spec is not None and spec.provider is not Provider.LOCAL and not find_price(project.prices, spec.id)
    ]


class TaskChecker:
    """Checks one task against the rest of the project."""

    def __init__(self, project: Project, task: TaskSpec, tools: Mapping[str, Mapping[str, Any]]):
        self.project, self.task, self.tools = project, task, tools
        self.doc = project.document("Task", task.name)
        self.problems: list[Problem] = []
        self._sample_inputs = [sample_inputs(task.inputs, variant) for variant in range(len(SAMPLES))]
        self._unknown = SampleUnknown()

    def check(self) -> list[Problem]:
        task, data = self.task, self.doc.data
        if task.agent is None and task.pipeline is None:
            self._add("", "a task needs either 'agent' and 'goal', or 'pipeline'; add one")
        if task.agent is not None and task.pipeline is not None:
            self._add("/pipeline", "a task has either 'agent' and 'goal', or 'pipeline', not both; remove one", key=True)
        self._check_inputs()
        names: dict[str, int] = {}
        for i, rel in enumerate(task.workspace_files):
            refused = workspace_file_problem(rel, self.project.root)
            if refused:
                self._add(f"/workspace/files/{i}", refused)
            base = rel.replace("\\", "/").rsplit("/", 1)[-1]
            if base in names:
                self._add(f"/workspace/files/{i}", f"'{rel}' has the same file name as workspace file {names[base]}; "
                          "files are copied into the workspace by name, so rename one")
            names.setdefault(base, i)
        self.problems += _check_knowledge_refs(self.project, self.doc, task.knowledge)
        self._check_knowledge_tools()
        if task.agent is not None:
            self._agent_ref("/agent", task.agent)
            self._template("/goal", task.goal or "", steps_visible=set())
        if task.pipeline is not None:
            self._check_pipeline()
        for pointer, schema in (("/output_schema", task.output_schema),):
            self.problems += _check_schema_field(self.doc, pointer, schema)
        if task.caps.max_cost_usd is not None:
            for name in self.task.agents_used():
                if name in self.project.agents:
                    self.problems += _check_price(self.project, self.doc, self.project.agents[name], "/caps/max_cost_usd")
        if task.report.title:
            self._template("/report/title", task.report.title, steps_visible=self._step_ids())
        step_ids = self._step_ids()
        for i, step_id in enumerate(task.report.tables):
            if step_id not in step_ids:
                self._add(f"/report/tables/{i}", f"unknown step '{step_id}'{did_you_mean(step_id, step_ids)}")
        if task.report.narrative_step and task.report.narrative_step not in step_ids:
            name = task.report.narrative_step
            self._add("/report/narrative_step", f"unknown step '{name}'{did_you_mean(name, step_ids)}")
        self._check_data(step_ids)
        self._check_mode()
        del data
        return self.problems

    def _check_mode(self) -> None:
        """``mode: batch_api`` needs every agent the task runs (and their judges) on an endpoint
        with a Batch API: the embedded local model has none."""
        if self.task.mode != "batch_api":
            return
        names = list(self.task.agents_used())
        names += [judge.agent for n in list(names) if n in self.project.agents and (judge := self.project.agents[n].judge)]
        local = [n for n in dict.fromkeys(names) if n in self.project.agents and self.project.agents[n].model.provider is Provider.LOCAL]
        if local:
            agents = ", ".join(f"'{n}'" for n in local)
            self._add("/mode", f"mode batch_api sends the model calls through the endpoint's Batch API, but agent(s) {agents} "
                      "use the embedded local model (model.provider: local), which has none; use mode: live, or give "
                      "the agent an OpenAI-compatible model")  # fmt: skip

    def _check_knowledge_tools(self) -> None:
        """search_knowledge is only useful with a knowledge base to search."""
        task = self.task
        for name in task.agents_used():
            agent = self.project.agents.get(name)
            if agent and any(r.name == "search_knowledge" for r in agent.tools) and not (agent.knowledge or task.knowledge):
                self._add("/agent" if task.agent == name else "", f"agent '{name}' has the search_knowledge tool but neither "
                          "it nor this task names a knowledge base; add knowledge: [NAME] to one of them")  # fmt: skip
        for i, step in enumerate(task.pipeline.steps if task.pipeline else ()):
            if step.tool == "search_knowledge" and not task.knowledge:
                self._add(f"/pipeline/steps/{i}/tool", "a search_knowledge step needs the task to name a knowledge base; "
                          "add knowledge: [NAME] to the task")  # fmt: skip
    def _check_data(self, step_ids: set[str]) -> None:
        """Sources, SQL steps and deliveries (see :mod:`runner.config.data_checks`); delivery
        templates see every step."""
        from runner.config.data_checks import task_data_problems

        self.problems += task_data_problems(self.project, self.task, self.doc)
        for i, target in enumerate(self.task.report.deliver):
            for key in ("subject", "link", "to"):
                value = target.settings.get(key)
                if isinstance(value, str):
                    self._template(f"/report/deliver/{i}/{target.kind}/{key}", value, steps_visible=step_ids, delivery=True)

    def _add(self, pointer: str, message: str, *, key: bool = False) -> None:
        self.problems.append(self.doc.problem(pointer, message, key=key))

    def _step_ids(self) -> set[str]:
        return {s.id for s in self.task.pipeline.steps} if self.task.pipeline else set()

    def _agent_ref(self, pointer: str, name: str) -> None:
        if name not in self.project.agents:
            self._add(pointer, f"unknown agent '{name}'{did_you_mean(name, self.project.agents)}")

    def _check_inputs(self) -> None:
        for spec in self.task.inputs:
            if not spec.has_default:
                continue
            pointer = f"/inputs/{spec.name}/default"
            try:
                coerce_default(spec.type, spec.default)
            except ValueError as exc:
                self._add(pointer, str(exc))
                continue
            if spec.enum is not None and spec.default not in spec.enum:
                self._add(pointer, f"default {spec.default!r} is not one of the enum values {list(spec.enum)}")

    def _check_pipeline(self) -> None:
        pipeline = self.task.pipeline
        assert pipeline is not None
        if not pipeline.steps and pipeline.planner is None:
            self._add("/pipeline", "a pipeline needs 'steps', a 'planner', or both")
        ids: dict[str, int] = {}
        for i, step in enumerate(pipeline.steps):
            base = f"/pipeline/steps/{i}"
            if step.id in ids:
                self._add(f"{base}/id", f"duplicate step id '{step.id}' (also step {ids[step.id]})")
            ids.setdefault(step.id, i)
            self._check_step(base, step)
        for i, step in enumerate(pipeline.steps):
            for j, dep in enumerate(step.depends_on):
                if dep not in ids:
                    self._add(f"/pipeline/steps/{i}/depends_on/{j}", f"unknown step '{dep}'{did_you_mean(dep, ids)}")
                elif dep == step.id:
                    self._add(f"/pipeline/steps/{i}/depends_on/{j}", f"step '{step.id}' depends on itself")
        cycle = find_cycle({s.id: [d for d in s.depends_on if d in ids] for s in pipeline.steps})
        if cycle:
            first = ids[cycle[0]]
            self._add(f"/pipeline/steps/{first}/depends_on", f"dependency cycle: {' -> '.join(cycle)}")
        upstream = {s.id: ancestors(s.id, pipeline.steps) for s in pipeline.steps} if not cycle else {}
        for i, step in enumerate(pipeline.steps):
            if step.goal:
                self._template(f"/pipeline/steps/{i}/goal", step.goal, upstream.get(step.id, set()))
            for pointer, value in _strings(step.args, f"/pipeline/steps/{i}/args"):
                self._template(pointer, value, upstream.get(step.id, set()))
        if pipeline.planner:
            self._agent_ref("/pipeline/planner/agent", pipeline.planner.agent)
            for j, name in enumerate(pipeline.planner.executors):
                self._agent_ref(f"/pipeline/planner/executors/{j}", name)
            self._template("/pipeline/planner/goal", pipeline.planner.goal, set(ids))
        if pipeline.synthesis:
            self._agent_ref("/pipeline/synthesis/agent", pipeline.synthesis.agent)
            self._template("/pipeline/synthesis/goal", pipeline.synthesis.goal, set(ids), any_step=pipeline.planner is not None)

    def _check_step(self, base: str, step: StepSpec) -> None:
        if step.agent is None and step.tool is None:
            self._add(base, f"step '{step.id}' needs either 'agent' and 'goal', or 'tool' (with 'args')")
        if step.agent is not None and step.tool is not None:
            self._add(f"{base}/tool", f"step '{step.id}' has both 'agent' and 'tool'; keep one", key=True)
        if step.agent is not None:
            self._agent_ref(f"{base}/agent", step.agent)
        if step.tool is not None and step.tool not in self.tools:
            self._add(f"{base}/tool", f"unknown tool '{step.tool}'{did_you_mean(step.tool, self.tools)}")
        elif step.tool is not None:
            self._check_tool_args(base, step.tool, step.args)
        if step.tools is not None:
            self.problems += _check_tool_refs(self.doc, step.tools, self.tools)
        self.problems += _check_schema_field(self.doc, f"{base}/output_schema", step.output_schema)

    def _check_tool_args(self, base: str, name: str, args: Mapping[str, Any]) -> None:
        """The step's declared arguments against the tool's argument schema (see
        :mod:`runner.config.tool_step_args`)."""
        from runner.config.tool_step_args import argument_problems, tool_for_step

        tool = tool_for_step(self.project, name)
        if tool is None:
            return
        for pointer, message in argument_problems(tool, args):
            self._add(f"{base}/args{pointer}", message)

    def _template(
        self, pointer: str, template: str, steps_visible: set[str], *, any_step: bool = False, delivery: bool = False
    ) -> None:
        """Check one template: its variables, then what would fail when a run renders it. A
        delivery's templates also read the run's ``status`` and ``exit_code``."""
        try:
            refs = references(template)
        except TemplateError as exc:
            self._add(pointer, str(exc))
            return
        before = len(self.problems)
        for ref in refs:
            if not (delivery and ref.root in DELIVERY_TEMPLATE_ROOTS):
                self._check_reference(pointer, ref, steps_visible, any_step)
        if len(self.problems) > before:
            return  # a sample render would only repeat the undefined variable
        static = static_problems(template)
        for problem in static:
            self._add(pointer, problem)
        if not static and render_affordable():  # else: checked when a run renders it
            message = self._render_problem(template, self._step_ids() if any_step else steps_visible, refs, delivery)
            if message:
                self._add(pointer, message)

    def _render_problem(self, template: str, visible: set[str], refs: list[Reference], delivery: bool = False) -> str | None:
        """Why a run would fail to render ``template`` (sample values), else ``None``."""
        contexts = [sample_context(inputs, visible, self._unknown, self.task.previous_run) for inputs in self._sample_inputs]
        if delivery:
            contexts = [context | {"status": status, "exit_code": code} for context in contexts
                        for status, code in (("completed", 0), ("failed", 1))]  # fmt: skip
        message = render_problem(template, contexts, self._unknown)
        if message is None and any(ref.root == "previous" for ref in refs):
            for context in contexts:
                context["previous"] = None  # what the first run sees
            first = render_problem(template, contexts, self._unknown)
            message = first and f"{first} (the first run has no previous run: guard it with {{% if previous %}})"
        return message

    def _check_reference(self, pointer: str, ref: Reference, steps_visible: set[str], any_step: bool) -> None:
        inputs = {i.name for i in self.task.inputs}
        if ref.root == "inputs":
            if ref.path and ref.path[0] not in inputs:
                name = ref.path[0]
                hint = did_you_mean(name, inputs) or ". Declare it under inputs"
                self._add(pointer, f"template uses undefined input 'inputs.{name}'{hint}")
        elif ref.root == "steps":
            if ref.path and ref.path[0] not in steps_visible and not any_step:
                name = ref.path[0]
                hint = "; add it to depends_on" if name in self._step_ids() else did_you_mean(name, steps_visible)
                self._add(pointer, f"template uses 'steps.{name}', which is not a step this one depends on{hint}")
            if len(ref.path) > 1 and ref.path[1] not in ("output", "data", "status", "artifacts"):
                self._add(pointer, f"'steps.{ref.path[0]}.{ref.path[1]}': a step has output, data, status and artifacts")
        elif ref.root == "previous":
            if not self.task.previous_run:
                self._add(pointer, "template uses 'previous' but the task does not set memory.previous_run: true")
        elif ref.root not in ("today", "run_id", "loop", "true", "false", "none") and ref.root not in environment().globals:
            self._add(pointer, f"template uses undefined variable '{ref.root}'; available: inputs, steps, previous, today, run_id")


def _strings(value: Any, pointer: str) -> list[tuple[str, str]]:
    """Every string in a tool step's arguments (each one is a template), with its pointer."""
    if isinstance(value, str):
        return [(pointer, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, f"{pointer}/{escape_pointer_token(k)}")]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{pointer}/{i}")]
    return []


def coerce_default(kind: str, value: Any) -> Any:
    """Check (and normalise) an input default; raises ValueError naming the expected type."""
    if kind == "date":
        if value in ("today", "yesterday"):
            return value
        try:
            return dt.date.fromisoformat(str(value)).isoformat()
        except ValueError:
            raise ValueError(f"default {value!r} is not a date; use YYYY-MM-DD, 'today' or 'yesterday'") from None
    expected = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}[kind]
    if (isinstance(value, bool) and kind != "boolean") or not isinstance(value, expected):
        raise ValueError(f"default {value!r} is not of type {kind}")
    return value
