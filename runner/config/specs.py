"""Typed, validated configuration: what the rest of the runner reads.

Specs are built only from documents that passed schema validation, so builders read
keys without re-checking them; defaults live here, allowed keys live in the schemas.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from runner.config.documents import Document, escape_pointer_token
from runner.config.project_files import FileRefused, boundary_for, read_prompt_file
from runner.config.report_options import ColumnFormat, Delivery, build_columns, build_deliveries
from runner.config.sql_sources import task_sources
from runner.config.template_types import LocatedTemplate, Origin
from runner.core.providers import Provider, declared_provider
from runner.core.report_formats import DEFAULT_FORMATS
from runner.core.steps import StepKind
from runner.core.usage import Usage
from runner.errors import Problem
from runner.knowledge.spec import KnowledgeSpec
from runner.tools.sql.source import SqlSource

CAP_NAMES = (
    "max_steps",
    "max_tool_calls",
    "max_input_tokens",
    "max_output_tokens",
    "max_tokens",
    "max_cost_usd",
    "max_wall_seconds",
)
SUMMED_CAPS = tuple(name for name in CAP_NAMES if name != "max_wall_seconds")
"""Caps on amounts that add up over a batch (what a scope shared by many workers holds)."""
CAP_FIGURES = {
    "max_steps": "model_calls", "max_tool_calls": "tool_calls", "max_input_tokens": "input_tokens",
    "max_output_tokens": "output_tokens", "max_tokens": "total_tokens", "max_cost_usd": "cost_usd",
}  # fmt: skip
"""The :class:`~runner.core.usage.Usage` figure (also its ``as_dict`` key) each summed cap limits."""


def cap_figure(cap: str, usage: Usage) -> float:
    """What ``usage`` counts toward the summed cap ``cap``."""
    figure: float = getattr(usage, CAP_FIGURES[cap])
    return figure


@dataclass(frozen=True)
class Caps:
    """Limits on a run; ``None`` means no limit. See ``common.schema.json#/$defs/caps``."""

    max_steps: int | None = None
    max_tool_calls: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_wall_seconds: float | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Caps:
        return cls(**(data or {}))

    def tighten(self, other: Caps) -> Caps:
        """The stricter of each limit of ``self`` and ``other``."""
        values = {}
        for name in CAP_NAMES:
            mine, theirs = getattr(self, name), getattr(other, name)
            values[name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        return Caps(**values)

    def as_dict(self) -> dict[str, float]:
        return {n: getattr(self, n) for n in CAP_NAMES if getattr(self, n) is not None}


@dataclass(frozen=True)
class ModelSpec:
    """Which model to call and how to reach it."""

    id: str
    provider: Provider | None = None  # None: auto (openai when an endpoint is configured, else local)
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int = 1024
    timeout_seconds: float = 60.0
    retries: int = 3
    context_window: int = 32768
    prompt_cache_key: str | bool | None = None  # None: derived, sent to OpenAI's API only (runner.model.prompt_cache)
    deployment: str | None = None  # provider azure: the deployment name (default: id)
    api_version: str | None = None  # provider azure: the api-version (default: $OPENAI_API_VERSION, else 2024-10-21)
    profile: str | None = None  # a model profile by name (runner.config.profiles); None: matched by id
    reasoning_effort: str | None = None
    service_tier: str | None = None  # auto | default | flex | priority, billed as the profile says
    seed: int | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    structured_output: Literal["auto", "off"] = "auto"  # auto: strict response_format when the profile supports it
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # merged into the request body (never over runner's fields)
    extra_headers: Mapping[str, str] = field(default_factory=dict)  # sent with every call (never a key: profile_checks)
    source: str = field(default="", compare=False, repr=False)  # the agent file, for messages


@dataclass(frozen=True)
class ToolRef:
    """A tool named by an agent or step, with per-tool settings."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict)
    pointer: str = ""


@dataclass(frozen=True)
class ContextPolicy:
    """How large tool outputs and history may grow before truncation or compaction."""

    max_tool_output_chars: int = 8000
    max_history_tokens: int | None = None
    keep_last_messages: int = 12
    summarize: bool = False  # over budget: the model summarises the older history (a call counted against the caps)


@dataclass(frozen=True)
class EvidencePolicy:
    """``checks.evidence``: numbers and names in an answer must appear in the run's tool
    results (and the goal, when ``from_goal``); ``ignore`` lists names the agent may always use."""

    from_goal: bool = True
    ignore: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, value: Any) -> EvidencePolicy | None:
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        return cls(bool(value.get("from_goal", True)), tuple(value.get("ignore", ())))


@dataclass(frozen=True)
class JudgePolicy:
    """``checks.judge``: the agent that reviews answers, and what it checks them against."""

    agent: str
    criteria: tuple[str, ...]


@dataclass(frozen=True)
class MemoryPolicy:
    """``memory:`` on an agent: whose notes ``remember``/``recall`` share, and for how long."""

    scope: str = "agent"  # agent | task | project
    max_entries: int = 200
    max_age_days: float | None = None


TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class CachePolicy:
    """``cache: {ttl: ...}`` on an agent or a task: the result cache is on, entries served for ``ttl_seconds``."""

    ttl_seconds: float

    @classmethod
    def from_config(cls, data: dict[str, Any] | None) -> CachePolicy | None:
        """The policy a validated ``cache:`` mapping declares (``None`` when absent); a TTL
        is seconds, or a number with a unit (``30m``, ``12h``, ``7d``)."""
        if not data:
            return None
        ttl = data["ttl"]
        seconds = ttl if isinstance(ttl, int) else int(ttl[:-1]) * TTL_UNITS[ttl[-1]]
        return cls(float(min(seconds, 365 * 86400)))


@dataclass(frozen=True)
class AgentSpec:
    """An agent from ``agents.d/``."""

    name: str
    model: ModelSpec
    description: str = ""
    fallback_model: ModelSpec | None = None  # what its calls go to while a budget with on_exceed: degrade is past its threshold
    system_prompt: str = ""
    next_step_prompt: str = ""
    tools: tuple[ToolRef, ...] = ()
    tool_choice: str = "auto"
    sandbox: dict[str, Any] = field(default_factory=dict)  # overrides of runner.tools.sandbox.SandboxPolicy (limits, tmp_mb, disk_mb)
    allow_hosts: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ()
    allow_private_networks: tuple[str, ...] = ()  # CIDRs the URL tools may reach although not public
    caps: Caps = field(default_factory=Caps)
    context: ContextPolicy = field(default_factory=ContextPolicy)
    max_repeats: int = 3
    max_invalid_calls: int = 3
    output_schema: dict[str, Any] | None = None
    examples: tuple[tuple[str, str], ...] = ()
    numbers_from_prompt: bool = False
    figures_in_order: bool = False
    evidence: EvidencePolicy | None = None
    judge: JudgePolicy | None = None
    knowledge: tuple[str, ...] = ()  # knowledge bases its search_knowledge tool may search
    memory: MemoryPolicy = field(default_factory=MemoryPolicy)
    checks_fallback: str = "fail"
    checks_repair: str = "feedback"
    max_repairs: int = 1
    prompts: dict[str, str] = field(default_factory=dict)  # overrides of runner/prompts/*.yaml by name
    cache: CachePolicy | None = None  # the result cache (runner.agent.call_cache); else the task's
    tags: tuple[str, ...] = ()  # labels a Budget's scope may select
    source: str = ""

    @property
    def sandbox_mode(self) -> str:
        """``bwrap`` unless the agent chose ``none`` explicitly."""
        return str(self.sandbox.get("mode", "bwrap"))

    def with_tools(self, tools: tuple[ToolRef, ...]) -> AgentSpec:
        return replace(self, tools=tools)

    def on_fallback(self) -> AgentSpec:
        """This agent with its ``fallback_model`` as its model (how its degraded calls are sent, priced and keyed)."""
        assert self.fallback_model is not None
        return replace(self, model=self.fallback_model, fallback_model=None)


@dataclass(frozen=True)
class InputSpec:
    """A typed task input."""

    name: str
    type: str
    default: Any = None
    has_default: bool = False
    required: bool = True
    enum: tuple[Any, ...] | None = None
    description: str = ""


@dataclass(frozen=True)
class StepSpec:
    """One declared pipeline step: an agent step (agent + goal) or a tool step (tool + args)."""

    id: str
    agent: str | None = None
    goal: str | None = None
    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    tools: tuple[ToolRef, ...] | None = None
    caps: Caps = field(default_factory=Caps)
    output_schema: dict[str, Any] | None = None
    description: str = ""

    @property
    def kind(self) -> StepKind:
        return "tool" if self.tool else "agent"


@dataclass(frozen=True)
class PlannerSpec:
    """An LLM planner whose plan must validate against ``plan.schema.json``."""

    agent: str
    goal: str
    executors: tuple[str, ...]
    max_replans: int = 1
    max_plan_steps: int = 8


@dataclass(frozen=True)
class SynthesisSpec:
    agent: str
    goal: str


@dataclass(frozen=True)
class PipelineSpec:
    steps: tuple[StepSpec, ...] = ()
    planner: PlannerSpec | None = None
    synthesis: SynthesisSpec | None = None
    max_parallel: int = 4


@dataclass(frozen=True)
class ReportSpec:
    title: str | None = None
    formats: tuple[str, ...] = DEFAULT_FORMATS
    narrative_step: str | None = None
    tables: tuple[str, ...] = ()
    columns: dict[str, ColumnFormat] = field(default_factory=dict)  # labels and number formats by column name
    deliver: tuple[Delivery, ...] = ()  # where the written report goes


@dataclass(frozen=True)
class BatchApiLimits:
    """What one provider batch may hold (a task's ``batch_api:`` block): a round with more
    requests, or a larger input file, is split over several batches. ``None``: the provider's
    own limit (:mod:`runner.batch.batch_flavours`; OpenAI 50,000 requests and 200 MB, Anthropic
    100,000 and 256 MB); a value may only lower it."""

    max_requests: int | None = None
    max_file_bytes: int | None = None

    @classmethod
    def from_config(cls, data: dict[str, Any] | None) -> BatchApiLimits:
        return cls(**(data or {}))


TaskMode = Literal["live", "batch_api"]
"""How ``runner batch`` sends a task's model calls: one by one, or in provider batch rounds."""


@dataclass(frozen=True)
class TaskSpec:
    """A task from ``tasks.d/``."""

    name: str
    description: str = ""
    inputs: tuple[InputSpec, ...] = ()
    agent: str | None = None
    goal: str | None = None
    pipeline: PipelineSpec | None = None
    caps: Caps = field(default_factory=Caps)
    output_schema: dict[str, Any] | None = None
    workspace_files: tuple[str, ...] = ()
    previous_run: bool = False
    knowledge: tuple[str, ...] = ()  # knowledge bases every agent and tool step of the task may search
    report: ReportSpec = field(default_factory=ReportSpec)
    cache: CachePolicy | None = None  # the result cache for every agent of the task that sets none
    sources: dict[str, SqlSource] = field(default_factory=dict)  # declared on the task (they win over Source documents)
    mode: TaskMode = "live"  # batch_api: runner batch sends the model calls through the provider's Batch API
    batch_api: BatchApiLimits = field(default_factory=BatchApiLimits)
    tags: tuple[str, ...] = ()  # labels a Budget's scope may select
    source: str = ""
    root: Path = field(default_factory=Path)

    def agents_used(self) -> list[str]:
        """Every agent the task may run (its own, its steps', the planner's, executors', synthesis'), once each."""
        names = [self.agent] if self.agent else []
        if self.pipeline:
            names += [s.agent for s in self.pipeline.steps if s.agent]
            if self.pipeline.planner:
                names += [self.pipeline.planner.agent, *self.pipeline.planner.executors]
            if self.pipeline.synthesis:
                names.append(self.pipeline.synthesis.agent)
        return list(dict.fromkeys(names))


@dataclass(frozen=True)
class ToolSpec:
    """A custom tool from ``tools.d/``, handed to the tools layer as its raw dict."""

    name: str
    type: str
    data: dict[str, Any]
    source: str


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None
    batch_input_per_mtok: float | None = None  # through the provider's Batch API; default half the live price
    batch_output_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None  # prompt tokens written to the provider's cache; default the input price
    priority_input_per_mtok: float | None = None  # service_tier: priority (a profile's tier billing "priority")
    priority_output_per_mtok: float | None = None
    priority_cached_input_per_mtok: float | None = None


@dataclass(frozen=True)
class TelemetrySpec:
    """Where traces go (``kind: Telemetry``); the OTEL_* variables take precedence."""

    endpoint: str | None = None
    service_name: str | None = None
    enabled: bool = True


# --- builders ---------------------------------------------------------------------


PROMPT_KEYS = ("system_prompt", "next_step_prompt")


def read_prompts(doc: Document, root: Path) -> tuple[dict[str, str], list[Problem]]:
    """The agent's prompts, inline or from ``{file: PATH}``, and a located problem for each
    refused file (its prompt is then empty, so the rest of the project can still be checked)."""
    boundary = boundary_for(doc.path, root)
    texts: dict[str, str] = {}
    problems: list[Problem] = []
    for key in PROMPT_KEYS:
        value = doc.data.get(key)
        texts[key] = value if isinstance(value, str) else ""
        if isinstance(value, dict):
            try:
                texts[key] = read_prompt_file(value["file"], doc.path, boundary)
            except FileRefused as exc:
                problems.append(doc.problem(f"/{key}/file", str(exc)))
    return texts, problems


def tool_refs(items: list[Any] | None, pointer: str) -> tuple[ToolRef, ...]:
    refs = []
    for i, item in enumerate(items or []):
        if isinstance(item, str):
            refs.append(ToolRef(item, {}, f"{pointer}/{i}"))
        else:
            refs.append(ToolRef(item["name"], dict(item.get("settings", {})), f"{pointer}/{i}/name"))
    return tuple(refs)


def build_agent(doc: Document, prompts: dict[str, str]) -> AgentSpec:
    """The agent a validated document declares; ``prompts`` from :func:`read_prompts`."""
    d = doc.data
    stuck = d.get("stuck", {})
    network = d.get("network", {})
    return AgentSpec(
        name=d["name"],
        tags=tuple(d.get("tags", ())),
        model=build_model(d["model"], doc.source.file),
        fallback_model=build_model(d["fallback_model"], doc.source.file) if "fallback_model" in d else None,
        description=d.get("description", ""),
        system_prompt=prompts["system_prompt"],
        next_step_prompt=prompts["next_step_prompt"],
        tools=tool_refs(d.get("tools"), "/tools"),
        tool_choice=d.get("tool_choice", "auto"),
        sandbox=dict(d.get("sandbox", {})),
        allow_hosts=tuple(network.get("allow_hosts", ())),
        deny_hosts=tuple(network.get("deny_hosts", ())),
        allow_private_networks=tuple(network.get("allow_private_networks", ())),
        caps=Caps.from_dict(d.get("caps")),
        context=ContextPolicy(**d.get("context", {})),
        max_repeats=stuck.get("max_repeats", 3),
        max_invalid_calls=stuck.get("max_invalid_calls", 3),
        output_schema=d.get("output_schema"),
        examples=tuple((e["input"], e["output"]) for e in d.get("examples", ())),
        numbers_from_prompt=bool(d.get("checks", {}).get("numbers_from_prompt", False)),
        figures_in_order=bool(d.get("checks", {}).get("figures_in_order", False)),
        evidence=EvidencePolicy.from_config(d.get("checks", {}).get("evidence")),
        judge=_judge(d.get("checks", {}).get("judge")),
        knowledge=knowledge_names(d.get("knowledge")),
        memory=MemoryPolicy(**d.get("memory", {})),
        checks_fallback=d.get("checks", {}).get("fallback", "fail"),
        checks_repair=d.get("checks", {}).get("repair", "feedback"),
        max_repairs=d.get("checks", {}).get("max_repairs", 1),
        prompts=dict(d.get("prompts", {})),
        cache=CachePolicy.from_config(d.get("cache")),
        source=doc.source.file,
    )


def located(doc: Document, pointer: str, value: Any) -> Any:
    """``value`` with every string in it a :class:`LocatedTemplate` (a template that can name
    where it was written when it fails at run time)."""
    if isinstance(value, str):
        pos = doc.source.locate(pointer)
        return LocatedTemplate(value, Origin(doc.source.file, pos.line, pos.column, pointer))
    if isinstance(value, dict):
        return {k: located(doc, f"{pointer}/{escape_pointer_token(k)}", v) for k, v in value.items()}
    if isinstance(value, list):
        return [located(doc, f"{pointer}/{i}", v) for i, v in enumerate(value)]
    return value


def _with_located_templates(doc: Document) -> dict[str, Any]:
    """The task's data with each template field (goals, tool step args, report title) located."""
    d = copy.deepcopy(doc.data)

    def locate(container: dict[str, Any], key: str, pointer: str) -> None:
        if key in container:
            container[key] = located(doc, f"{pointer}/{key}", container[key])

    locate(d, "goal", "")
    locate(d.get("report", {}), "title", "/report")
    for i, target in enumerate(d.get("report", {}).get("deliver", ())):
        for kind, keys in (("email", ("subject",)), ("webhook", ("link",)), ("copy", ("to",))):
            for key in keys:
                locate(target.get(kind) or {}, key, f"/report/deliver/{i}/{kind}")
    pipeline = d.get("pipeline", {})
    for part in ("planner", "synthesis"):
        locate(pipeline.get(part) or {}, "goal", f"/pipeline/{part}")
    for i, step in enumerate(pipeline.get("steps", ())):
        locate(step, "goal", f"/pipeline/steps/{i}")
        locate(step, "args", f"/pipeline/steps/{i}")
    return d


def build_task(doc: Document, root: Path) -> TaskSpec:
    d = _with_located_templates(doc)
    inputs = tuple(
        InputSpec(
            name=name,
            type=spec["type"],
            default=spec.get("default"),
            has_default="default" in spec,
            required=spec.get("required", "default" not in spec),
            enum=tuple(spec["enum"]) if "enum" in spec else None,
            description=spec.get("description", ""),
        )
        for name, spec in (d.get("inputs") or {}).items()
    )
    report = d.get("report", {})
    return TaskSpec(
        name=d["name"],
        tags=tuple(d.get("tags", ())),
        description=d.get("description", ""),
        inputs=inputs,
        agent=d.get("agent"),
        goal=d.get("goal"),
        pipeline=_build_pipeline(d["pipeline"]) if "pipeline" in d else None,
        caps=Caps.from_dict(d.get("caps")),
        output_schema=d.get("output_schema"),
        workspace_files=tuple(d.get("workspace", {}).get("files", ())),
        previous_run=bool(d.get("memory", {}).get("previous_run", False)),
        knowledge=knowledge_names(doc.data.get("knowledge")),
        report=ReportSpec(
            title=report.get("title"),
            formats=tuple(report.get("formats", DEFAULT_FORMATS)),
            narrative_step=report.get("narrative_step"),
            tables=tuple(report.get("tables", ())),
            columns=build_columns(report.get("columns")),
            deliver=build_deliveries(report.get("deliver")),
        ),
        cache=CachePolicy.from_config(doc.data.get("cache")),
        sources=task_sources(doc, root),
        mode=d.get("mode", "live"),
        batch_api=BatchApiLimits.from_config(d.get("batch_api")),
        source=doc.source.file,
        root=root,
    )


def _build_pipeline(p: dict[str, Any]) -> PipelineSpec:
    steps = tuple(
        StepSpec(
            id=s["id"],
            agent=s.get("agent"),
            goal=s.get("goal"),
            tool=s.get("tool"),
            args=dict(s.get("args", {})),
            depends_on=tuple(s.get("depends_on", ())),
            tools=tool_refs(s["tools"], f"/pipeline/steps/{i}/tools") if "tools" in s else None,
            caps=Caps.from_dict(s.get("caps")),
            output_schema=s.get("output_schema"),
            description=s.get("description", ""),
        )
        for i, s in enumerate(p.get("steps", ()))
    )
    planner = p.get("planner")
    synthesis = p.get("synthesis")
    return PipelineSpec(
        steps=steps,
        planner=PlannerSpec(
            agent=planner["agent"],
            goal=planner["goal"],
            executors=tuple(planner["executors"]),
            max_replans=planner.get("max_replans", 1),
            max_plan_steps=planner.get("max_plan_steps", 8),
        )
        if planner
        else None,
        synthesis=SynthesisSpec(synthesis["agent"], synthesis["goal"]) if synthesis else None,
        max_parallel=p.get("max_parallel", 4),
    )


def _judge(value: dict[str, Any] | None) -> JudgePolicy | None:
    if value is None:
        return None
    criteria = value["criteria"]
    return JudgePolicy(value["agent"], (criteria,) if isinstance(criteria, str) else tuple(criteria))


def knowledge_names(items: list[Any] | None) -> tuple[str, ...]:
    """The names under ``knowledge:`` (an inline base by its ``name``)."""
    return tuple(item if isinstance(item, str) else item["name"] for item in items or ())


def inline_knowledge(doc: Document) -> list[KnowledgeSpec]:
    """The knowledge bases an agent or task declares in place under ``knowledge:``."""
    return [
        KnowledgeSpec.from_config(item, doc.source.file, f"/knowledge/{i}")
        for i, item in enumerate(doc.data.get("knowledge") or ())
        if isinstance(item, dict)
    ]


def build_knowledge(doc: Document) -> KnowledgeSpec:
    return KnowledgeSpec.from_config(doc.data, doc.source.file, "")


def build_tool(doc: Document) -> ToolSpec:
    d = doc.data
    line = doc.source.locate("").line
    return ToolSpec(name=d["name"], type=d["type"], data=d, source=f"{doc.source.file}:{line}")


def build_model(data: Mapping[str, Any], source: str) -> ModelSpec:
    """An agent's ``model:`` block (schema-checked) as a :class:`ModelSpec`."""
    d = dict(data)
    stop = d.pop("stop", ())
    provider = declared_provider(d.pop("provider", None))
    return ModelSpec(**d, provider=provider, stop=(stop,) if isinstance(stop, str) else tuple(stop), source=source)


def build_prices(doc: Document) -> dict[str, Price]:
    return {model: Price(**p) for model, p in doc.data["models"].items()}


def build_telemetry(doc: Document) -> TelemetrySpec:
    traces = doc.data["traces"]
    return TelemetrySpec(traces.get("endpoint"), traces.get("service_name"), bool(traces.get("enabled", True)))
