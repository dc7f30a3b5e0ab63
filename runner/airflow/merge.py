"""The fan-out's merge: every shard's journal read as one batch, one output, one batch report.

The shard journals are the record (not the shard output files), so the merged output is
written by :func:`runner.batch.output.write_output` and the report by
:func:`runner.batch.summary.batch_report` exactly as ``runner batch`` writes them: one
record per input row, in input order, with the input's row numbers and ids. Each shard's
journal is the one of the generation its result names (a shard computed again after a success
writes a new one: :mod:`runner.airflow.plan`), so merging again, after only the merge was
cleared, merges what the shards last made and computes nothing.

The merge refuses to write a merged output that would lie: a shard that returned no
result, a missing shard journal or output file, or a journal whose rows are not exactly its
shard's range raises :class:`ShardOutputMissing` before the output is in place.
No Airflow imports here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from runner.airflow.failures import RowsLeft, rows_left
from runner.airflow.plan import FanoutPlan, ShardSpec
from runner.batch.journal import STATUSES, BatchJournal, JournalRow
from runner.batch.journal_open import batch_journal_exists
from runner.batch.summary import BatchSummary
from runner.core.usage import Usage
from runner.errors import RunnerError
from runner.locations import Location

if TYPE_CHECKING:
    from runner.config.project import Project
    from runner.config.specs import TaskSpec


class ShardOutputMissing(RunnerError):
    """A shard's result, journal, output or rows are missing: the merged output would be incomplete."""


class MergedJournals:
    """Shard journals read as one batch (a :class:`~runner.batch.records.BatchRecords`), in shard order.

    :meth:`records` checks, while it reads, that each journal holds exactly its shard's rows.
    """

    def __init__(self, batch_id: str, parts: Sequence[tuple[ShardSpec, BatchJournal]], meta: Mapping[str, Any]) -> None:
        self._batch_id = batch_id
        self.parts = list(parts)
        self._meta = dict(meta)

    @property
    def batch_id(self) -> str:
        return self._batch_id

    @property
    def meta(self) -> Mapping[str, Any]:
        return self._meta

    def records(self) -> Iterator[JournalRow]:
        for shard, journal in self.parts:
            expected = shard.first_row
            for record in journal.records():
                if record.number != expected:
                    raise ShardOutputMissing(
                        f"{shard.describe()}: its journal has row {record.number} where row {expected} belongs"
                    )
                yield record if record.fingerprint else replace(record, fingerprint=journal.fingerprint)  # the shard's own
                expected += 1
            if expected != shard.last_row + 1:
                missing = shard.last_row + 1 - expected
                raise ShardOutputMissing(
                    f"{shard.describe()}: {missing} row(s) from row {expected} on are not in its journal {journal.path}"
                )

    def spent(self) -> Usage:
        """What every shard recorded, every try included."""
        return sum((journal.spent() for _, journal in self.parts), Usage())

    def counts(self) -> dict[str, int]:
        totals: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for _, journal in self.parts:
            for status, count in journal.counts().items():
                totals[status] = totals.get(status, 0) + count
        return totals


def check_shard_results(
    shards: Sequence[ShardSpec], results: Mapping[int, Mapping[str, Any]], plan: FanoutPlan
) -> None:
    """Every shard returned a result and left its journal and output file; else :class:`ShardOutputMissing`."""
    problems = []
    for shard in shards:
        if shard.index not in results:
            problems.append(f"{shard.describe()}: the shard task returned no result")
        journal = shard_plan(plan, results.get(shard.index)).journal_path(shard)
        if not batch_journal_exists(journal, database_url=plan.store_url):
            problems.append(f"{shard.describe()}: its journal {journal} is missing")
        if not plan.output_path(shard).is_file():
            problems.append(f"{shard.describe()}: its output {plan.output_path(shard)} is missing")
    if problems:
        raise ShardOutputMissing("cannot merge, shard output missing:\n" + "\n".join(problems))


def shard_plan(plan: FanoutPlan, result: Mapping[str, Any] | None) -> FanoutPlan:
    """``plan`` for the generation a shard's ``result`` says it computed (1 for a result that names none)."""
    generation = (result or {}).get("generation", 1)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 1:
        raise ShardOutputMissing(f"a shard result names no generation a shard makes: {generation!r}")
    return plan.for_generation(generation)


def merge_fanout(
    project: Project,
    task: TaskSpec,
    plan: FanoutPlan,
    shards: Sequence[ShardSpec],
    results: Mapping[int, Mapping[str, Any]],
    *,
    batch_id: str,
    output_path: Location,
    report_dir: Location,
) -> tuple[dict[str, Any], RowsLeft, dict[str, Any]]:
    """Write the merged output and batch report; return ``(manifest, rows left, report)``."""
    from runner.batch.file_batch import open_journal
    from runner.batch.output import write_output
    from runner.batch.summary import batch_report, write_reports

    check_shard_results(shards, results, plan)
    plan.check_merged_output(output_path)
    with contextlib.ExitStack() as stack:
        hold = stack.enter_context(_output_lock(task, plan, output_path))
        requests = [shard_plan(plan, results[s.index]).request(s) for s in shards]
        parts = [(s, stack.enter_context(open_journal(project, task, r)[0])) for s, r in zip(shards, requests, strict=True)]
        merged = MergedJournals(batch_id, parts, _meta(task, plan, shards))
        hold.check()  # still this merge's output, right before it is written
        records = write_output(merged, output_path, format=plan.options["output_format"], kept=plan.kept_columns())
        left = rows_left(merged)
        report = batch_report(merged, merged_summary(merged, results))
        report["shards"] = [_shard_entry(s, results[s.index], plan) for s in shards]
        ledger = shared_ledger_figures(plan, shards[0].split_generation if shards else 1)
        if ledger is not None:
            report["ledger"] = ledger
        markdown, data = write_reports(report, report_dir)
    manifest = {
        "batch_id": batch_id,
        "shards": len(shards),
        "total": left.rows,
        "done": left.done,
        "failed": left.failed,
        "invalid": left.invalid,
        "skipped": left.not_run,
        "cost_usd": report["cost_usd"],
        "records": records,
        "output_path": str(output_path),
        "report_path": str(markdown),
        "report_json": str(data),
    }
    return manifest, left, report


def shared_ledger_figures(plan: FanoutPlan, split_generation: int = 1) -> dict[str, Any] | None:
    """The shared cap scope of the split's ``split_generation`` as the ledger holds it (caps, spent, held), or ``None``."""
    from runner.store.cap_ledger import open_cap_ledger

    scope = plan.shared_scope(split_generation)
    if scope is None:
        return None
    target = plan.store_url or scope.sqlite_path
    assert target is not None
    ledger = open_cap_ledger(target)
    try:
        return ledger.scope(scope.key).as_dict()
    except KeyError:  # no shard opened it (every shard's rows were invalid, or none started)
        return None
    finally:
        ledger.db.close()


def _output_lock(task: TaskSpec, plan: FanoutPlan, output_path: Location) -> contextlib.AbstractContextManager[Any]:
    """The merged output's lock: a local file's, or a URL's (in the PostgreSQL store when there is one)."""
    from runner.batch.output import exclusive_output

    holder = {"task": task.name, "input": str(plan.input_path), "journal": plan.run_key}
    return exclusive_output(output_path, holder, store_url=plan.store_url)


def _meta(task: TaskSpec, plan: FanoutPlan, shards: Sequence[ShardSpec]) -> dict[str, str]:
    """What the report says about the batch: the task, the input (as each shard journal pins it)."""
    from runner.batch.inputs import file_sha256

    sha256 = shards[0].input_sha256 if shards else file_sha256(plan.input_path)
    return {"task": task.name, "input_path": str(plan.input_path.resolve()), "input_sha256": sha256,
            "shards": str(len(shards))}  # fmt: skip


def merged_summary(merged: MergedJournals, results: Mapping[int, Mapping[str, Any]]) -> BatchSummary:
    """The fan-out as one :class:`BatchSummary`: counts and spend from the journals, time and stops from the shards."""
    stops = [r for r in results.values() if r.get("stop_reason")]
    return BatchSummary(
        batch_id=merged.batch_id,
        counts=merged.counts(),
        usage=merged.spent(),
        elapsed_seconds=max((float(r.get("elapsed_seconds") or 0) for r in results.values()), default=0.0),
        stop_reason=stops[0]["stop_reason"] if stops else None,
        stop_kind=stops[0].get("stop_kind") if stops else None,
    )


def _shard_entry(shard: ShardSpec, result: Mapping[str, Any], plan: FanoutPlan) -> dict[str, Any]:
    return {
        "shard": shard.name,
        "rows": [shard.first_row, shard.last_row],
        "counts": result.get("counts"),
        "cost_usd": result.get("cost_usd"),
        "try_number": result.get("try_number"),
        "generation": result.get("generation", 1),
        "output_path": str(plan.output_path(shard)),
        "report_path": result.get("report_path"),
    }
