"""Running an eval: each variant through the batch engine, then every case checked.

Each variant has its own batch under ``<out>/<variant>/``: output records, batch report and
a journal named after a fingerprint of the variant, the configuration and the dataset, so
rerunning the same eval resumes (rows already done are not paid for again) while a changed
prompt, agent, task or dataset starts afresh. ``restart`` discards the journals. The dataset
is read from a copy made once per eval (:mod:`runner.evals.dataset`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runner import untrusted_json
from runner.batch.file_batch import open_journal, run_batch_file
from runner.batch.journal import JournalRow
from runner.batch.request import BatchRequest
from runner.config.evals import EvalSpec, Variant
from runner.config.project import Project
from runner.config.specs import CAP_NAMES, Caps, TaskSpec
from runner.errors import UsageError, did_you_mean
from runner.evals.assertions import CaseRun, CheckResult, check_case
from runner.evals.cases import CaseExpectations, read_expectations
from runner.evals.dataset import baseline_bytes, snapshot_dataset
from runner.evals.results import CaseResult, EvalResult, VariantResult, compare
from runner.evals.variants import variant_fingerprint, variant_project


@dataclass
class EvalRequest:
    """How to run an eval (the flags of ``runner eval``)."""

    out_dir: Path
    variants: tuple[str, ...] = ()  # only these (default: all)
    restart: bool = False
    concurrency: int | None = None  # default: the eval's
    caps: Caps = field(default_factory=Caps)  # tighten the eval's batch caps
    max_attempts: int = 2
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    base_url_override: str | None = None
    api_key: str | None = None
    store_path: Path | None = None
    progress: str = "none"
    baseline_path: Path | None = None  # default: the eval's baseline
    use_cache: bool = True  # False (--no-cache): the result cache is neither read nor written


async def run_eval(project: Project, spec: EvalSpec, request: EvalRequest) -> EvalResult:
    """Run every (selected) variant of ``spec`` and check every case."""
    task = project.tasks[spec.task]
    variants = select_variants(spec, request.variants)
    shown = _shown(spec.dataset.path, project.root)
    spec, dataset_digest = snapshot_dataset(spec, project.root, request.out_dir)
    expectations = read_expectations(spec)
    results = [await _run_variant(project, task, spec, variant, request, expectations, dataset_digest) for variant in variants]
    baseline_path = request.baseline_path or spec.baseline
    baseline = load_baseline(baseline_path) if baseline_path else None
    return EvalResult(
        eval=spec.name, task=spec.task, dataset=shown,
        variants=tuple(results), comparisons=compare(tuple(results), baseline) if baseline else (),
        baseline_path=_shown(baseline_path, project.root) if baseline_path else None,
        baseline_missing=baseline_path is not None and baseline is None,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def select_variants(spec: EvalSpec, names: tuple[str, ...]) -> list[Variant]:
    known = {v.name: v for v in spec.variants}
    listed = f" (it has: {', '.join(known)})"
    for name in names:
        if name not in known:
            raise UsageError(f"--variant {name}: eval '{spec.name}' has no such variant{did_you_mean(name, known) or listed}")
    return [v for v in spec.variants if not names or v.name in names]


def load_baseline(path: Path) -> dict[str, Any] | None:
    """A stored result, or ``None`` when there is none yet; unreadable JSON is a usage error."""
    raw = baseline_bytes(path)
    if raw is None:
        return None
    try:
        data = untrusted_json.loads(raw)
    except (OSError, ValueError) as exc:
        raise UsageError(f"baseline {path}: not a readable eval result ({exc}); write it again with --save-baseline") from None
    if not isinstance(data, dict) or not isinstance(data.get("variants"), list):
        raise UsageError(f"baseline {path}: not an eval result (no 'variants' list); write it again with --save-baseline")
    return data


async def _run_variant(
    project: Project, task: TaskSpec, spec: EvalSpec, variant: Variant, request: EvalRequest,
    expectations: dict[int, CaseExpectations], dataset_digest: str,
) -> VariantResult:
    changed = variant_project(project, task, variant)
    folder = request.out_dir / variant.name
    fingerprint = variant_fingerprint(changed, task, variant, dataset_digest)
    batch = BatchRequest(
        input_path=spec.dataset.path, output_path=folder / "output.jsonl", format=spec.dataset.format,
        mapping=tuple(f"{k}={v}" for k, v in spec.dataset.mapping.items()), id_column=spec.dataset.id_column,
        journal_path=folder / f"journal-{fingerprint}.sqlite3", report_dir=folder,
        restart=request.restart, concurrency=request.concurrency or spec.concurrency, max_attempts=request.max_attempts,
        batch_caps=spec.caps.tighten(request.caps), requests_per_minute=request.requests_per_minute,
        tokens_per_minute=request.tokens_per_minute, model_override=variant.model,
        base_url_override=request.base_url_override, api_key=request.api_key, store_path=request.store_path,
        progress=request.progress, use_cache=request.use_cache,
    )
    summary = await run_batch_file(changed, task, batch)
    journal, _ = open_journal(changed, task, replace(batch, restart=False))
    with journal:
        cases = _unique_keys(tuple(_case(row, spec, expectations) for row in journal.records()))
    return VariantResult(
        name=variant.name, cases=cases, threshold=spec.threshold_of(variant), description=variant.description,
        changes=_changes(variant), stop_reason=summary["stop_reason"], stop_kind=summary["stop_kind"],
        output_path=str(batch.output_path), batch_report=summary["report_path"],
    )


def _case(row: JournalRow, spec: EvalSpec, expectations: dict[int, CaseExpectations]) -> CaseResult:
    expect = expectations.get(row.number, CaseExpectations())
    run = CaseRun(_run_status(row), row.output, row.usage.cost_usd, row.duration_seconds, row.error)
    checks = check_case([*spec.assertions, *expect.assertions], run, expect.values)
    if expect.error is not None:
        checks.append(CheckResult("case checks", False, expect.error))
    return CaseResult(
        row=row.number, id=row.id, status=run.status, passed=all(c.passed is not False for c in checks),
        checks=tuple(checks), output=row.output, cost_usd=row.usage.cost_usd,
        latency_seconds=row.duration_seconds, run_id=row.run_id, error=row.error,
    )


def _unique_keys(cases: tuple[CaseResult, ...]) -> tuple[CaseResult, ...]:
    """Cases match across variants and baselines by id: a row that repeats an earlier row's
    id (the batch refuses it) is named by its id and row, so it neither hides nor replaces it."""
    seen: set[str] = set()
    unique = []
    for case in cases:
        if case.id is not None and case.id in seen:
            case = replace(case, id=f"{case.id} (row {case.row})")
        seen.add(case.key)
        unique.append(case)
    return tuple(unique)


def _run_status(row: JournalRow) -> str:
    """The run's status as far as the journal tells it (a capped run is a failed row whose
    error kind is the cap)."""
    if row.status == "done":
        return "completed"
    if row.status != "failed":
        return row.status  # not_run, invalid, pending
    if row.error_kind in CAP_NAMES:
        return "capped"
    return "stuck" if row.error_kind == "stuck" else "failed"


def _changes(variant: Variant) -> dict[str, Any]:
    skip = {"name", "threshold", "description"}
    return {f.name: getattr(variant, f.name) for f in dataclasses.fields(variant)
            if f.name not in skip and getattr(variant, f.name) not in (None, {}, "")}


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
