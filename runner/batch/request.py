"""What ``runner batch`` takes, as data: :class:`BatchRequest` (built by the CLI, the API and
the Airflow operators), and what follows from a request alone (its journal's database, its
progress display). Kept apart from the orchestrator (:mod:`runner.batch.file_batch`) so the
modules it calls (the provider batch path, the local directories, cancellation) can take a
request without importing the module that calls them.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from runner.batch.progress import NoProgress, make_progress
from runner.config.specs import BatchApiLimits, Caps, TaskSpec
from runner.errors import UsageError
from runner.locations import Location
from runner.store.database import resolve_store

if TYPE_CHECKING:
    from runner.batch.provider_cancel import ProviderWatch

DEFAULT_CONCURRENCY = 8
"""Rows in flight at once when the request names no number (live model calls)."""
SHARED_SCOPE = "fan-out"
"""The scope name a shared batch cap reports (``fan-out cap max_cost_usd=5 reached ...``)."""


@dataclass(frozen=True)
class SharedScope:
    """Caps held across every process of one batch (a fan-out's shards), in a shared ledger.

    ``key`` names the scope; ``caps`` are the whole batch's (its summed caps are shared;
    see :mod:`runner.caps.shared`). The ledger lives in the request's PostgreSQL store
    (``store_url``) when it has one, else in the SQLite file ``sqlite_path`` (which the
    processes must all reach).
    """

    key: str
    caps: Caps
    sqlite_path: Path | None = None


@dataclass
class BatchRequest:
    """Everything ``runner batch`` takes, as data."""

    input_path: Path
    output_path: Location  # a local path or a URL (runner.locations)
    format: str | None = None  # input format (default: from the suffix)
    output_format: str | None = None  # jsonl | csv | parquet (default: from the suffix)
    mapping: tuple[str, ...] = ()
    id_column: str | None = None
    journal_path: Path | None = None
    report_dir: Location | None = None
    restart: bool = False
    durable: bool = False
    concurrency: int | None = None  # rows in flight; None: DEFAULT_CONCURRENCY live, every row with --via batch-api
    max_attempts: int = 2
    stop_after_failures: int | None = None
    batch_caps: Caps = field(default_factory=Caps)
    run_caps: Caps = field(default_factory=Caps)
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    model_override: str | None = None
    base_url_override: str | None = None
    api_key: str | None = None
    store_path: Path | None = None
    store_url: str | None = None  # postgresql://...: the run store and the journal (named journal_path) live there
    progress: str = "auto"  # auto | bar | log | none
    use_cache: bool = True  # False (--no-cache): the result cache is neither read nor written
    dedupe: bool = False  # --dedupe: rows with identical inputs run once (runner.batch.dedupe)
    log_interval: float = 30.0
    rows: tuple[int, int] | None = None  # only input rows FIRST..LAST (1-based, inclusive): one shard of a fan-out
    shared_scope: SharedScope | None = None  # caps held with other processes (a fan-out's batch caps)
    via: str | None = None  # live | batch-api (model calls in provider batch rounds: runner.batch.rounds); None: the task's mode
    batch_fallback: str | None = None  # "live": a call its provider batch did not answer is sent live
    batch_poll_seconds: float = 30.0  # first wait between provider batch retrieves (grows up to 10 minutes)
    batch_limits: BatchApiLimits | None = None  # requests and bytes per provider batch (default: the task's batch_api block)
    provider_wait: bool = True  # False: return once a provider batch is out (summary "provider_pending"); run again to collect
    watch: ProviderWatch | None = None  # told which provider batches are out, for a kill handler to cancel them
    keep_answers: bool = False  # --keep-answers: a changed configuration keeps the answers made so far (runner.batch.fingerprint)
    limit: int | None = None  # --limit N: a trial of the first N valid rows (the rest stay pending in the journal)
    sample: int | None = None  # --sample N: a trial of N valid rows at random (``seed``)
    seed: int = 0  # --seed: which rows --sample picks
    retry_failed: bool = False  # --retry-failed: failed rows run once more (attempts used up, or a final failure)
    keep_columns: str | None = None  # --keep-columns a,b | all: input columns copied into each output record

    def mode(self, task: TaskSpec) -> str:
        """``live`` or ``batch-api``: the request's ``via``, else the task's ``mode``."""
        return self.via or ("batch-api" if task.mode == "batch_api" else "live")

    def check(self) -> None:
        """Refuse options that contradict each other (applied or refused, never ignored)."""
        if self.restart and self.keep_answers:
            raise UsageError("--keep-answers keeps the journal's answers and --restart discards them: give one")
        if self.limit is not None and self.sample is not None:
            raise UsageError("--limit and --sample both choose a trial's rows: give one")


def _progress(kind: str, stream: IO[str], interval: float) -> Any:
    from runner.batch.progress import BarProgress, LogProgress

    if kind == "none":
        return NoProgress()
    if kind == "bar":
        return BarProgress(stream)
    if kind == "log":
        return LogProgress(stream, interval)
    return make_progress(stream, interval=interval)


def journal_database(request: BatchRequest) -> str | None:
    """The PostgreSQL URL the journal lives in, or ``None`` for an SQLite file: the request's
    ``store_url``, else (when no ``--journal`` path was given) ``$RUNNER_STORE_URL``."""
    target = resolve_store(url=request.store_url, path=request.journal_path, default=Path())
    return target if isinstance(target, str) else None


def progress_for(request: BatchRequest) -> Any:
    """The progress display ``request`` asks for, on stderr."""
    return _progress(request.progress, sys.stderr, request.log_interval)
