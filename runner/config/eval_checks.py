"""Cross-reference checks of ``kind: Eval`` documents, in the shape of the others: the task,
agents and dataset columns they name exist, each assertion has exactly one kind and options
that fit it, regular expressions compile and JSON Schemas are valid."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.config.documents import Document
from runner.config.evals import ASSERTION_KINDS, VALUE_KINDS, EvalSpec, assertion_kinds, path_problem
from runner.config.project_files import dataset_problem
from runner.config.schema import check_schema
from runner.errors import Problem, did_you_mean
from runner.untrusted_regex import compile_problem

if TYPE_CHECKING:
    from runner.config.project import Project

MAX_HEADER_CHARS = 1 << 20
OPTIONS_OF = {"tolerance": ("approx",), "rel_tolerance": ("approx",), "ignore_case": ("equals", "contains", "regex")}


def check_evals(project: Project) -> list[Problem]:
    problems: list[Problem] = []
    for spec in project.evals.values():
        doc = project.document("Eval", spec.name)
        problems += check_assertions(doc, doc.data.get("assert") or [], "/assert")
        task_known = spec.task in project.tasks
        if not task_known:
            hint = did_you_mean(spec.task, project.tasks) or f" (tasks: {', '.join(sorted(project.tasks)) or 'none'})"
            problems.append(doc.problem("/task", f"unknown task '{spec.task}'{hint}"))
        problems += _check_variants(project, doc, spec, task_known)
        problems += _check_dataset(project, doc, spec)
    return problems


def check_assertions(doc: Document | None, items: Iterable[Any], pointer: str) -> list[Problem]:
    """Problems of a list of assertions (``doc`` None: plain messages, for a dataset cell)."""
    problems: list[Problem] = []
    for i, item in enumerate(items):
        for where, message in assertion_problems(item):
            problems.append(_problem(doc, f"{pointer}/{i}{where}", message))
    return problems


def assertion_problems(item: dict[str, Any]) -> list[tuple[str, str]]:
    """``(pointer suffix, message)`` for what the schema cannot say about one assertion."""
    kinds = assertion_kinds(item)
    if len(kinds) != 1:
        has = f"it has {', '.join(kinds)}" if kinds else "it has none"
        return [("", f"an assertion needs exactly one of {', '.join(ASSERTION_KINDS)}; {has}")]
    kind = kinds[0]
    found: list[tuple[str, str]] = []
    for option, fits in OPTIONS_OF.items():
        if option in item and kind not in fits:
            found.append((f"/{option}", f"{option} applies to {' and '.join(fits)}, not to {kind}"))
    if "path" in item and kind not in VALUE_KINDS:
        found.append(("/path", f"{kind} is about the run, not a value in its output: remove path"))
    elif isinstance(item.get("path"), str) and (reason := path_problem(item["path"])) is not None:
        found.append(("/path", reason))
    if kind == "regex" and isinstance(item["regex"], str) and (reason := compile_problem(item["regex"])) is not None:
        found.append(("/regex", f"invalid regular expression: {reason}"))
    if kind == "json_schema" and (reason := check_schema(item["json_schema"])) is not None:
        found.append(("/json_schema", f"not a valid JSON Schema: {reason}"))
    return found


def _check_variants(project: Project, doc: Document, spec: EvalSpec, task_known: bool) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    task = project.tasks.get(spec.task)
    used = task.agents_used() if task else []
    for i, variant in enumerate(doc.data.get("variants") or []):
        if variant["name"] in seen:
            problems.append(doc.problem(f"/variants/{i}/name", f"duplicate variant name '{variant['name']}'"))
        seen.add(variant["name"])
        for old, new in (variant.get("agents") or {}).items():
            if task_known and old not in used:
                hint = did_you_mean(old, used) or f" (it uses: {', '.join(used) or 'none'})"
                problems.append(doc.problem(f"/variants/{i}/agents/{old}", f"task '{spec.task}' uses no agent '{old}'{hint}", key=True))
            if new not in project.agents:
                hint = did_you_mean(new, project.agents) or f" (agents: {', '.join(sorted(project.agents))})"
                problems.append(doc.problem(f"/variants/{i}/agents/{old}", f"unknown agent '{new}'{hint}"))
        if "system_prompt" in variant and task is not None and task.agent is None:
            problems.append(doc.problem(
                f"/variants/{i}/system_prompt",
                f"task '{spec.task}' is a pipeline: a system prompt applies to single-agent tasks; swap agents with agents: instead",
            ))
    return problems


def _check_dataset(project: Project, doc: Document, spec: EvalSpec) -> list[Problem]:
    path = spec.dataset.path
    problems = []
    if spec.baseline is not None and (why := dataset_problem(doc.data["baseline"], project.root, what="baselines", must_exist=False)):
        problems.append(doc.problem("/baseline", why))
    if (why := dataset_problem(doc.data["dataset"]["path"], project.root)) is not None:
        return [*problems, doc.problem("/dataset/path", why)]
    columns = _csv_columns(path) if (spec.dataset.format or path.suffix.lower().lstrip(".")) == "csv" else None
    if columns is None:
        return problems  # JSONL has no header and Parquet is read when the eval runs: both are checked then
    listed = f" (columns: {', '.join(columns)})"
    return problems + [doc.problem(pointer, f"no column '{name}' in {path.name}{did_you_mean(name, columns) or listed}")
                       for pointer, name in _columns_named(project, doc, spec) if name not in columns]


def _columns_named(project: Project, doc: Document, spec: EvalSpec) -> list[tuple[str, str]]:
    """(pointer, column) for every column the eval reads."""
    named = [("/dataset/id_column", spec.dataset.id_column), ("/dataset/checks_column", spec.dataset.checks_column)]
    named += [(f"/dataset/map/{k}", v) for k, v in spec.dataset.mapping.items()]
    for i, item in enumerate(doc.data.get("assert") or []):
        for kind in assertion_kinds(item):
            if isinstance(item[kind], dict) and set(item[kind]) == {"column"} and kind != "json_schema":
                named.append((f"/assert/{i}/{kind}/column", item[kind]["column"]))
    task = project.tasks.get(spec.task)
    for spec_input in task.inputs if task else ():
        if spec_input.required and not spec_input.has_default and spec_input.name not in spec.dataset.mapping:
            named.append(("/dataset/path", spec_input.name))
    return [(pointer, name) for pointer, name in named if name]


def _csv_columns(path: Path) -> list[str] | None:
    """The header row's names (the first line only, read up to :data:`MAX_HEADER_CHARS`)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            first = handle.readline(MAX_HEADER_CHARS)
    except (OSError, UnicodeDecodeError):
        return None  # the eval's batch reports an unreadable file with its own message
    if len(first) >= MAX_HEADER_CHARS or "\0" in first:
        return None
    try:
        return next(csv.reader([first]), [])
    except csv.Error:
        return None


def _problem(doc: Document | None, pointer: str, message: str) -> Problem:
    if doc is None:
        return Problem("", 0, 0, pointer, message)
    return doc.problem(pointer, message)
