"""``kind: Eval``: the typed spec of a regression test (``evals.d/*.yaml``).

Built only from documents that passed ``eval.schema.json``; what the schema cannot say
(exactly one kind per assertion, a task and agents that exist, dataset columns that exist)
is checked by :mod:`runner.config.eval_checks`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from runner.config.documents import Document
from runner.config.project_files import FileRefused, boundary_for, read_prompt_file
from runner.config.specs import Caps
from runner.errors import Problem

AssertionKind = Literal["equals", "contains", "regex", "json_schema", "approx", "status", "max_cost_usd", "max_latency_seconds"]
ASSERTION_KINDS: tuple[AssertionKind, ...] = (
    "equals", "contains", "regex", "json_schema", "approx", "status", "max_cost_usd", "max_latency_seconds",
)
VALUE_KINDS = frozenset({"equals", "contains", "regex", "json_schema", "approx"})
LIST_INDEX = re.compile(r"-?[0-9]{1,9}", re.ASCII)
"""A path part that indexes a list: ASCII digits (``str.isdigit`` also takes ``²`` and ``٣``,
which ``int`` refuses), at most nine of them (``int`` refuses more than 4,300)."""


def path_problem(path: str) -> str | None:
    """Why a dotted check ``path`` (``items.0.name``) cannot be followed, or ``None``."""
    shown = repr(path) if len(path) <= 60 else repr(path[:60]) + f"... ({len(path)} characters)"
    for part in path.split("."):
        if not part:
            return f"path {shown} has an empty part; write parts separated by single dots (items.0.name)"
        digits = part.lstrip("-")
        if digits and any(ch.isdigit() for ch in digits) and all(ch.isdigit() for ch in digits) and not LIST_INDEX.fullmatch(part):
            return f"path {shown}: {part[:20]!r} is not a list index; write an index with at most 9 ASCII digits 0-9 (items.0)"
    return None
"""Kinds that look at the output (the others look at how the run went)."""
DEFAULT_VARIANT = "baseline"


@dataclass(frozen=True)
class Expected:
    """A literal, or the case's value in ``column``."""

    value: Any = None
    column: str | None = None


@dataclass(frozen=True)
class Assertion:
    """One check on a case's result."""

    kind: AssertionKind
    expected: Expected
    path: str | None = None
    name: str = ""
    tolerance: float = 0.0
    rel_tolerance: float = 0.0
    ignore_case: bool = False

    @property
    def label(self) -> str:
        return self.name or (f"{self.kind} {self.path}" if self.path else self.kind)


@dataclass(frozen=True)
class Variant:
    """What one variant changes: the model id, temperature, system prompt, or agents."""

    name: str
    model: str | None = None
    temperature: float | None = None
    system_prompt: str | None = None
    agents: dict[str, str] = field(default_factory=dict)
    threshold: float | None = None
    description: str = ""


@dataclass(frozen=True)
class DatasetSpec:
    """The labelled cases: ``path`` is the project root joined with ``reference`` (as written)."""

    path: Path
    format: str | None = None
    id_column: str | None = None
    mapping: dict[str, str] = field(default_factory=dict)
    checks_column: str | None = None
    reference: str = ""


@dataclass(frozen=True)
class EvalSpec:
    """An eval from ``evals.d/``."""

    name: str
    task: str
    dataset: DatasetSpec
    assertions: tuple[Assertion, ...]
    variants: tuple[Variant, ...]
    threshold: float | None = None
    baseline: Path | None = None
    caps: Caps = field(default_factory=Caps)
    concurrency: int = 8
    description: str = ""
    source: str = ""

    def threshold_of(self, variant: Variant) -> float | None:
        return variant.threshold if variant.threshold is not None else self.threshold


def assertion_kinds(data: dict[str, Any]) -> list[AssertionKind]:
    """The kind keys present in one assertion mapping (exactly one is valid)."""
    return [k for k in ASSERTION_KINDS if k in data]


def parse_assertion(data: dict[str, Any]) -> Assertion:
    """An assertion from its mapping (already schema-valid, with exactly one kind)."""
    (kind,) = assertion_kinds(data)
    raw = data[kind]
    expected = Expected(column=raw["column"]) if isinstance(raw, dict) and set(raw) == {"column"} and kind != "json_schema" else Expected(raw)
    return Assertion(
        kind=kind, expected=expected, path=data.get("path"), name=data.get("name", ""),
        tolerance=float(data.get("tolerance", 0.0)), rel_tolerance=float(data.get("rel_tolerance", 0.0)),
        ignore_case=bool(data.get("ignore_case", False)),
    )


def build_eval(doc: Document, root: Path) -> tuple[EvalSpec, list[Problem]]:
    """The eval a validated document declares, and a problem per refused prompt file."""
    d = doc.data
    variants, problems = [], []
    for i, raw in enumerate(d.get("variants") or [{"name": DEFAULT_VARIANT}]):
        prompt, refused = _prompt(doc, root, raw.get("system_prompt"), f"/variants/{i}/system_prompt/file")
        problems += refused
        variants.append(Variant(
            name=raw["name"], model=raw.get("model"), temperature=raw.get("temperature"), system_prompt=prompt,
            agents=dict(raw.get("agents", {})), threshold=raw.get("threshold"), description=raw.get("description", ""),
        ))
    dataset = d["dataset"]
    spec = EvalSpec(
        name=d["name"], task=d["task"], description=d.get("description", ""),
        dataset=DatasetSpec(
            path=root / dataset["path"], format=dataset.get("format"), id_column=dataset.get("id_column"),
            mapping=dict(dataset.get("map", {})), checks_column=dataset.get("checks_column"), reference=dataset["path"],
        ),
        assertions=tuple(parse_assertion(a) for a in d["assert"] if len(assertion_kinds(a)) == 1),
        variants=tuple(variants), threshold=d.get("threshold"),
        baseline=root / d["baseline"] if d.get("baseline") else None,
        caps=Caps.from_dict(d.get("caps")), concurrency=d.get("concurrency", 8), source=doc.source.file,
    )
    return spec, problems


def _prompt(doc: Document, root: Path, value: Any, pointer: str) -> tuple[str | None, list[Problem]]:
    if not isinstance(value, dict):
        return value, []
    try:
        return read_prompt_file(value["file"], doc.path, boundary_for(doc.path, root)), []
    except FileRefused as exc:
        return None, [doc.problem(pointer, str(exc))]
