"""The batch journal: one durable record per input row, for resume and exactly-once recording.

Every input row gets a record when the batch starts (``ingest``), keyed by its row number
(stable, since the input file's SHA-256 is pinned) with its id unique among valid rows. A
row moves ``pending -> running -> done | failed | not_run``; invalid rows are ``invalid``
from the start. A row's result and its ``done`` mark are one UPDATE, hence one transaction:
a crash leaves either both or neither, never an output without its mark or the reverse.

Resume (:meth:`BatchJournal.prepare_resume`): rows left ``running`` by a crash become
``failed`` (``interrupted``, retryable; the attempt counts), ``not_run`` rows become
``pending`` again, ``done`` rows are never selected again, and failed rows are retried while
``attempts < max_attempts``. Money and tokens already recorded are returned by
:meth:`BatchJournal.spent` so the caller counts them against the batch caps.

One interface, two implementations (:func:`runner.batch.journal_open.open_batch_journal` picks one):

* :class:`~runner.batch.journal_sqlite.SqliteJournal`, the default: a file of its own,
  locked by an exclusive ``flock`` (one process at a time, dropped by the kernel when the
  process dies, even by ``kill -9``).
* :class:`~runner.batch.journal_postgres.PostgresJournal`, with a ``postgresql://`` URL
  (``$RUNNER_STORE_URL``): the journal's rows in shared tables under its name, so a retry on
  another worker resumes it; one process at a time by a session-level advisory lock, which
  PostgreSQL drops when that session ends (its process died, or its host went silent).

Both run the same transitions, written once in :mod:`runner.batch.journal_sql` over the
run store's :class:`~runner.store.database.Database`: each one statement (``UPDATE ...
RETURNING``, a conditional ``UPDATE ... WHERE status = 'running'``) or one transaction, safe
to send again after a dropped PostgreSQL connection.
"""



from __future__ import annotations

import datetime as dt
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from runner.batch.inputs import Row
from runner.core.budget_warnings import BudgetWarning
from runner.core.degradation import Degradation
from runner.core.usage import Usage
from runner.errors import StoreDamaged, UsageError

RowStatus = Literal["pending", "running", "done", "failed", "invalid", "not_run"]
"""A journal row's status: ``pending -> running -> done | failed | not_run``; ``invalid`` from the start."""
STATUSES: tuple[RowStatus, ...] = get_args(RowStatus)
SCHEMA_VERSION = "2"
INTERRUPTED = "interrupted"
TODO = "(status = 'pending' OR (status = 'failed' AND retryable = 1 AND attempts < ?))"
"""The rows a batch runs: pending, or failed-retryable with attempts left (``?`` = max_attempts)."""
UNFINISHED = "status <> 'done'"
COLUMNS = (
    "row_number, id, status, attempts, retryable, inputs, output, error, error_kind, run_id,"
    " input_tokens, output_tokens, cached_input_tokens, cost_usd, model_calls, tool_calls, reasoning_tokens,"
    " cache_write_tokens, duration_seconds, started_at, finished_at, warnings, fingerprint, budget_warnings, degraded"
)
"""A row's columns in the order :func:`journal_row` reads them (the same in both implementations)."""
USAGE_COLUMNS = (
    "input_tokens", "output_tokens", "cached_input_tokens", "cost_usd", "model_calls", "tool_calls", "reasoning_tokens",
    "cache_write_tokens",
)  # fmt: skip
"""A row's :class:`Usage` columns, in :func:`usage_values` order (the order of ``Usage``'s fields)."""


@dataclass(frozen=True)
class JournalRow:
    """A row as the journal holds it. ``usage`` is its run's total over every attempt."""

    number: int
    id: str | None
    status: RowStatus
    attempts: int
    retryable: bool
    inputs: dict[str, Any] | None
    output: Any
    error: str | None
    error_kind: str | None
    run_id: str | None
    usage: Usage
    duration_seconds: float | None
    started_at: str | None
    finished_at: str | None
    warnings: tuple[str, ...] = ()  # e.g. spend counted at its worst case after a crash
    fingerprint: str | None = None  # the configuration an answer kept by --keep-answers was made under; None: the journal's
    budget_warnings: tuple[BudgetWarning, ...] = ()  # warn_at shares its run's calls took a budget window past
    degraded: tuple[Degradation, ...] = ()  # where its run's calls went to a fallback model (on_exceed: degrade)


@dataclass(frozen=True)
class RowOutcome:
    """How one attempt ended, to be recorded in one transaction.

    ``usage`` is the run's total so far, all attempts included (what ``execute_task``
    reports for a resumed run id); ``None`` keeps the recorded values (an interrupted
    attempt reports nothing).
    """

    status: RowStatus  # done | failed | not_run
    output: Any = None
    error: str | None = None
    error_kind: str | None = None
    retryable: bool = True
    usage: Usage | None = None
    duration_seconds: float | None = None
    warnings: tuple[str, ...] = ()
    degraded: tuple[Degradation, ...] = ()
    counts_attempt: bool = True  # False: the row only waited (a provider batch still out), so its attempt is given back
    budget_warnings: tuple[BudgetWarning, ...] = ()  # every attempt's, as the run store holds them

    def values(self) -> tuple[Any, ...]:
        """``status, output, error, error_kind, retryable, <the usage values (:data:`USAGE_COLUMNS`) or NULLs>, duration``."""
        if self.status not in ("done", "failed", "not_run"):
            raise ValueError(f"cannot record status {self.status!r}")
        output = None if self.output is None else json.dumps(self.output, ensure_ascii=False, default=str)
        spend = usage_values(self.usage) if self.usage is not None else (None,) * len(USAGE_COLUMNS)
        return (self.status, output, clean(self.error), self.error_kind, int(self.retryable), *spend, self.duration_seconds)

    def warnings_json(self) -> str | None:
        """The ``warnings`` column: a JSON list, or NULL when there are none."""
        return json.dumps([clean(w) for w in self.warnings], ensure_ascii=False) if self.warnings else None

    def budget_warnings_json(self) -> str | None:
        """The ``budget_warnings`` column: a JSON list of :meth:`BudgetWarning.as_dict`, or NULL."""
        found = [w.as_dict() for w in self.budget_warnings]
        return json.dumps(found, ensure_ascii=False) if found else None

    def degraded_json(self) -> str | None:
        """The ``degraded`` column: a JSON list of :class:`Degradation`, or NULL when the run called no fallback model."""
        return json.dumps([d.as_dict() for d in self.degraded], ensure_ascii=False) if self.degraded else None


@dataclass(frozen=True)
class ResumeState:
    """What :meth:`BatchJournal.prepare_resume` found."""

    interrupted: int  # rows left running by a dead process, now failed (retryable)
    requeued: int  # rows not run last time, now pending again
    interrupted_runs: tuple[tuple[int, str], ...] = ()  # (row number, run id) of the interrupted rows


class BatchJournal(ABC):
    """The journal of one batch. Open with :meth:`open`; close it (or use ``with``).

    ``path`` is the journal's file (SQLite), or its name (PostgreSQL: the path it would have
    as a file, so the same command finds the same journal on any worker).
    """

    path: Path
    meta: dict[str, str]

    # --- metadata --------------------------------------------------------------------

    @property
    def batch_id(self) -> str:
        """Random at creation, kept across resumes (``--restart`` makes a new one)."""
        return self.meta["batch_id"]

    @property
    def ingested(self) -> bool:
        return self.meta.get("ingested") == "1"

    def provider_state(self) -> dict[str, Any]:
        """What ``--via batch-api`` keeps between processes (:mod:`runner.batch.provider_state`):
        the provider batches out, the ones about to be created, the round counter."""
        state = json.loads(self.meta.get("provider_state") or "{}")
        return state if isinstance(state, dict) else {}

    def save_provider_state(self, state: Mapping[str, Any]) -> None:
        """Replace the provider state in one transaction (before anything waits on it)."""
        text = json.dumps(dict(state), sort_keys=True)
        self._set_meta({"provider_state": text})
        self.meta["provider_state"] = text

    @property
    def discarded(self) -> list[dict[str, str]]:
        """The ``batch_id`` and ``provider_state`` of each journal ``--restart`` discarded here whose
        provider batches are not dealt with yet (:mod:`runner.batch.provider_cancel`). Written with
        the restart itself, so a process killed before it cancelled them leaves them to the next."""
        found = json.loads(self.meta.get(DISCARDED) or "[]")
        return [entry for entry in found if isinstance(entry, dict)] if isinstance(found, list) else []

    def discarded_settled(self) -> None:
        """The discarded journals' provider batches are dealt with (cancelled, or named to the user)."""
        self._set_meta({DISCARDED: "[]"})
        self.meta[DISCARDED] = "[]"

    def age_seconds(self) -> float:
        """Seconds since this batch was created (its first attempt started)."""
        created = dt.datetime.fromisoformat(self.meta["created_at"])
        return (dt.datetime.now(dt.UTC) - created).total_seconds()

    def __enter__(self) -> BatchJournal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abstractmethod
    def close(self) -> None:
        """Close the connection and release the journal lock."""

    # --- writes ----------------------------------------------------------------------

    def ingest(self, rows: Iterable[Row], *, chunk_rows: int = 1000) -> int:
        """Record every row as ``pending`` or ``invalid``; idempotent, committed in chunks."""
        now, count, chunk = now_iso(), 0, []
        for row in rows:
            chunk.append(ingest_values(row, now))
            count += 1
            if len(chunk) >= chunk_rows:
                self._insert(chunk)
                chunk = []
        self._insert(chunk)
        self._set_meta({"ingested": "1", "row_count": str(count)})
        self.meta.update(ingested="1", row_count=str(count))
        return count

    @abstractmethod
    def prepare_resume(self) -> ResumeState:
        """Turn rows a dead process left ``running`` into retryable failures; requeue ``not_run``."""

    @abstractmethod
    def correct_usage(self, number: int, usage: Usage) -> None:
        """Replace row ``number``'s usage by its run's ledger (after a crash the journal missed
        what the interrupted attempt spent)."""

    @abstractmethod
    def mark_running(self, number: int, run_id: str) -> int:
        """Start an attempt at row ``number``; returns its attempt number (1-based)."""

    @abstractmethod
    def record(self, number: int, outcome: RowOutcome) -> bool:
        """Record an attempt's result and status in one transaction; ``False`` if not running."""

    @property
    def fingerprint(self) -> str | None:
        """The fingerprint (:mod:`runner.batch.fingerprint`) the journal's rows run under; ``None`` for a
        journal from before fingerprints."""
        return self.meta.get("fingerprint")

    def fingerprint_parts(self) -> dict[str, str]:
        """The parts of :attr:`fingerprint` (what each file and field hashed to), to name what changed."""
        found = json.loads(self.meta.get("fingerprint_parts") or "{}")
        return found if isinstance(found, dict) else {}

    def adopt_fingerprint(self, digest: str, parts_json: str, *, earlier: str | None) -> int:
        """Run the rows still to run under ``digest`` from now on; the answers already made keep
        ``earlier`` (the fingerprint they were made under) as their own. Returns how many kept it."""
        kept = self._stamp_done(earlier) if earlier is not None else 0
        self._set_meta({"fingerprint": digest, "fingerprint_parts": parts_json})
        self.meta.update(fingerprint=digest, fingerprint_parts=parts_json)
        return kept

    @abstractmethod
    def _stamp_done(self, fingerprint: str) -> int:
        """Give every ``done`` row without a fingerprint of its own ``fingerprint``; returns how many."""

    @abstractmethod
    def mark_not_run(self, reason: str, kind: str) -> int:
        """Mark every ``pending`` row ``not_run`` with ``reason``; returns how many."""

    # --- reads -----------------------------------------------------------------------

    def todo(self, max_attempts: int, *, page_rows: int = 256) -> Iterator[JournalRow]:
        """Rows to run, in input order: pending, or failed-retryable with attempts left.

        Read a page at a time (keyset pagination), so memory stays flat at any size.
        """
        yield from self._pages(TODO, (max_attempts,), page_rows)

    def records(self, *, unfinished_only: bool = False, page_rows: int = 1000) -> Iterator[JournalRow]:
        """Every row, in input order; with ``unfinished_only``, every row not ``done`` (a batch
        that finished reads none of them)."""
        yield from self._pages(UNFINISHED if unfinished_only else "1 = 1", (), page_rows)

    @abstractmethod
    def counts(self) -> dict[str, int]:
        """Rows by status (every status present, zero if none)."""

    @abstractmethod
    def spent(self) -> Usage:
        """What every row has used so far, over all attempts."""

    @abstractmethod
    def row(self, number: int) -> JournalRow | None:
        """Row ``number`` as recorded, or ``None``."""

    # --- what an implementation provides ---------------------------------------------

    @abstractmethod
    def _insert(self, values: list[tuple[Any, ...]]) -> None:
        """Insert rows (:func:`ingest_values`) in one transaction, ignoring rows already there."""

    @abstractmethod
    def _set_meta(self, values: Mapping[str, str]) -> None:
        """Insert or replace metadata entries in one transaction."""

    @abstractmethod
    def _page(self, where: str, params: tuple[Any, ...], after: int, limit: int) -> list[tuple[Any, ...]]:
        """Up to ``limit`` rows (:data:`COLUMNS`) numbered above ``after`` matching ``where``, in order."""

    def _pages(self, where: str, params: tuple[Any, ...], page_rows: int) -> Iterator[JournalRow]:
        last = 0
        while True:
            page = self._page(where, params, last, page_rows)
            for found in page:
                yield journal_row(found)
            if len(page) < page_rows:
                return
            last = page[-1][0]


def default_journal_path(root: Path, task: str, input_path: Path) -> Path:
    """``<state dir>/batches/<task>-<hash of the input path>.sqlite3`` (:func:`runner.local_state.state_dir`,
    by default ``<root>/.runner``): same command, same journal."""
    import hashlib

    key = hashlib.sha256(str(input_path.resolve()).encode()).hexdigest()[:12]
    from runner.local_state import state_path

    return state_path(root, "batches", f"{task}-{key}.sqlite3", holds="batch journals", sqlite=True)


# --- what both implementations share ---------------------------------------------------


DISCARDED = "discarded"
"""The metadata key of :attr:`BatchJournal.discarded`."""


def carried_over(discarded: Mapping[str, str]) -> dict[str, str]:
    """What a journal restarted over the metadata ``discarded`` keeps of it: the provider
    batches of it (and of the journals it had discarded itself) still to be dealt with."""
    try:
        earlier = json.loads(discarded.get(DISCARDED) or "[]")
    except ValueError:
        earlier = []
    entries = [entry for entry in earlier if isinstance(entry, dict)] if isinstance(earlier, list) else []
    if discarded.get("provider_state"):
        entries.append({"batch_id": discarded.get("batch_id", ""), "provider_state": discarded["provider_state"]})
    return {DISCARDED: json.dumps(entries, sort_keys=True)} if entries else {}


def new_meta(wanted: Mapping[str, str]) -> dict[str, str]:
    """The metadata of a new journal: what it is for, a fresh batch id, the schema version, when."""
    import uuid

    return {**wanted, "batch_id": uuid.uuid4().hex[:12], "schema_version": SCHEMA_VERSION, "created_at": now_iso()}


def check_meta(meta: Mapping[str, str], wanted: Mapping[str, str], where: str) -> None:
    """Refuse a journal made for another task, input content, options or schema (``where`` names it)."""
    found = str(meta.get("schema_version", ""))
    if found.isdigit() and int(found) > int(SCHEMA_VERSION):  # not another batch: a newer runner's journal
        raise StoreDamaged(
            f"{where}: this journal was written by a newer runner (journal schema {found}; this runner writes "
            f"{SCHEMA_VERSION}); finish the batch with that runner, or pass --restart to discard it, or --journal PATH to keep both"
        )
    different = [key for key in ("task", "input_sha256", "options") if meta.get(key) != wanted[key]]
    if meta.get("schema_version") != SCHEMA_VERSION:
        different.append("schema_version")
    if different:
        raise UsageError(
            f"{where}: this journal belongs to another batch ({', '.join(different)} differ): it was started for "
            f"task '{meta.get('task')}' over {meta.get('input_path')} (sha256 {meta.get('input_sha256', '')[:12]}, "
            f"options {meta.get('options')}); this command is task '{wanted['task']}' over {wanted['input_path']} "
            f"(sha256 {wanted['input_sha256'][:12]}, options {wanted['options']}). "
            "Pass --restart to discard it and start over, or --journal PATH to keep both."
        )


def ingest_values(row: Row, now: str) -> tuple[Any, ...]:
    """``row_number, id, status, retryable, inputs, error, error_kind, created_at`` of a new row."""
    status = "pending" if row.valid else "invalid"
    inputs = json.dumps(row.inputs, ensure_ascii=False) if row.inputs is not None else None
    kind = None if row.valid else "input"
    return (row.number, clean(row.id), status, int(row.valid), inputs, clean(row.error), kind, now)


def usage_values(usage: Usage) -> tuple[Any, ...]:
    """``usage``'s figures in :data:`USAGE_COLUMNS` order."""
    return tuple(getattr(usage, column) for column in USAGE_COLUMNS)


def usage_from(values: tuple[Any, ...]) -> Usage:
    """A :class:`Usage` from figures in :data:`USAGE_COLUMNS` order (PostgreSQL sums are decimals)."""
    figures = dict(zip(USAGE_COLUMNS, values, strict=True))
    counts = {name: int(value) for name, value in figures.items() if name != "cost_usd"}
    return Usage(**counts, cost_usd=float(figures["cost_usd"]))


def journal_row(found: tuple[Any, ...]) -> JournalRow:
    """A row read as :data:`COLUMNS`."""
    number, row_id, status, attempts, retryable, inputs, output, error, kind, run_id = found[:10]
    spent = found[10 : 10 + len(USAGE_COLUMNS)]
    took, started, finished, warnings, fingerprint, budget_warnings, degraded = found[10 + len(USAGE_COLUMNS) :]
    return JournalRow(
        number=int(number),
        id=row_id,
        status=status,
        attempts=int(attempts),
        retryable=bool(retryable),
        inputs=json.loads(inputs) if inputs is not None else None,
        output=json.loads(output) if output is not None else None,
        error=error,
        error_kind=kind,
        run_id=run_id,
        usage=usage_from(spent),
        duration_seconds=took,
        started_at=started,
        finished_at=finished,
        warnings=tuple(json.loads(warnings)) if warnings else (),
        fingerprint=fingerprint,
        budget_warnings=tuple(BudgetWarning.from_dict(w) for w in json.loads(budget_warnings)) if budget_warnings else (),
        degraded=tuple(Degradation.from_dict(d) for d in json.loads(degraded)) if degraded else (),
    )


SPENT = ", ".join(f"COALESCE(SUM({column}), 0) AS {column}" for column in USAGE_COLUMNS)
"""What :meth:`BatchJournal.spent` sums, in :data:`USAGE_COLUMNS` order (read by :func:`usage_from`)."""
RESUME_ERROR = "interrupted: the batch process ended while this row was running"


def all_statuses(found: Iterable[tuple[str, int]]) -> dict[str, int]:
    counted = {str(status): int(count) for status, count in found}
    return {status: counted.get(status, 0) for status in STATUSES}


def clean(text: str | None) -> str | None:
    """Text SQLite can store: lone surrogates (from invalid UTF-8) become escapes."""
    return None if text is None else text.encode("utf-8", "backslashreplace").decode("utf-8")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
