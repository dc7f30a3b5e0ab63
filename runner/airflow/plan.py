"""One fan-out's plan: the shards (row ranges of the input) and where each one's files go.

The split, every shard and the merge build the same :class:`FanoutPlan` from the same
operator arguments, so they agree on every path without passing them around:

* a shard is a contiguous range of input rows (:class:`ShardSpec`), not a copy of them:
  each shard runs the batch over the whole input file restricted to its rows
  (``BatchRequest.rows``), so row numbers, ids and duplicate-id checks are exactly those
  of ``runner batch`` over the whole file;
* a shard's journal is the same for every try of one *generation*, so a retry resumes it and
  pays for no finished row again: with a PostgreSQL store (``store_url``) it lives there,
  named ``<run key>/<shard>``, so a retry on any worker finds it; else it is the file
  ``<work>/journals/<shard>.sqlite3``. A try after a successful one (the shard cleared) starts
  the shard's next generation, a new journal ``<shard>-g2``, ``-g3``, ...: the split and each
  shard record their successes in ``<work>/split/`` and ``<work>/shards/<shard>/``
  (:mod:`runner.airflow.generations`), and a shard's result names the generation it made,
  which the merge merges;
* the fan-out's batch caps (``max_cost_usd``, ``max_tokens``, every summed cap) are one
  shared scope, ``fanout:<run key>`` (``.../g<n>`` for the split's generation *n* > 1), held
  across every shard in the cap ledger (in the PostgreSQL store, else ``<work>/caps.sqlite3``):
  see :mod:`runner.caps.shared`;
* ``<work>/outputs/<shard>.jsonl`` and ``<work>/reports/<shard>/`` are a shard's own output
  and batch report; the merge writes ``<work>/output.<format>`` and ``<work>/batch_report.*``
  unless told otherwise.

``<work>`` is ``<work dir>/<dag_id>/<16 hex of the dag run id>/<fan-out id>`` in a location
every worker shares: a shared path, or a URL (``s3://bucket/runner``, see
:mod:`runner.locations`; SQLite journals cannot live at a URL, so that needs the PostgreSQL
store). The run key is ``<dag_id>/<16 hex>/<fan-out id>``. No Airflow imports here.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.batch.options import MERGE, OPTIONS, BatchOptions
from runner.errors import UsageError
from runner.local_state import DEFAULT_FANOUT_WORK_DIR, FANOUT_WORK_DIR_ENV
from runner.locations import Location, is_remote, is_url, location

if TYPE_CHECKING:
    from runner.batch.output import KeptColumns
    from runner.batch.request import BatchRequest, SharedScope
    from runner.config.project import Project
    from runner.config.specs import TaskSpec

WORK_DIR_ENV = FANOUT_WORK_DIR_ENV
DEFAULT_WORK_DIR = DEFAULT_FANOUT_WORK_DIR
DEFAULT_SHARDS = 4
PROGRESS_LOG_SECONDS = 60.0


@dataclass(frozen=True)
class ShardSpec:
    """Rows ``first_row..last_row`` (1-based, inclusive) of the input: shard ``index`` of ``count``,
    planned by the split's generation ``split_generation`` (which names the fan-out's shared cap scope)."""

    index: int
    count: int
    first_row: int
    last_row: int
    input_sha256: str
    split_generation: int = 1

    @property
    def name(self) -> str:
        return f"shard-{self.index:05d}-of-{self.count:05d}"

    @property
    def rows(self) -> int:
        return self.last_row - self.first_row + 1

    def describe(self) -> str:
        """``shard-00001-of-00004 (rows 11-20)``."""
        return f"{self.name} (rows {self.first_row}-{self.last_row})"

    def as_xcom(self) -> dict[str, Any]:
        """A small JSON value (the split's XCom, one per mapped shard; ``gen``: the split's generation)."""
        return {
            "index": self.index,
            "count": self.count,
            "first_row": self.first_row,
            "last_row": self.last_row,
            "input_sha256": self.input_sha256,
            "gen": self.split_generation,  # a short key: 10,000 of these are one XCom value
        }

    @classmethod
    def from_xcom(cls, value: Any) -> ShardSpec:
        """The inverse of :meth:`as_xcom`; anything else is refused."""
        try:
            shard = cls(**{k: value[k] for k in ("index", "count", "first_row", "last_row", "input_sha256")},
                        split_generation=value.get("gen", 1))  # fmt: skip
        except (KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"not a shard from the split task: {value!r} ({exc})") from None
        numbers = (shard.index, shard.count, shard.first_row, shard.last_row, shard.split_generation)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers) or min(shard.rows, numbers[-1]) < 1:
            raise UsageError(f"not a shard from the split task: {value!r}")
        return shard


def plan_shards(
    total_rows: int, input_sha256: str, *, num_shards: int | None, shard_size: int | None
) -> list[ShardSpec]:
    """Contiguous row ranges covering rows 1..``total_rows``; sizes differ by at most 1.

    Give ``num_shards`` (at most that many, never an empty one) or ``shard_size`` (rows a
    shard); with neither, :data:`DEFAULT_SHARDS`. No rows, no shards.
    """
    if num_shards is not None and shard_size is not None:
        raise UsageError("give num_shards or shard_size, not both")
    if total_rows <= 0:
        return []
    if shard_size is not None:
        count = -(-total_rows // shard_size)
    else:
        count = min(num_shards or DEFAULT_SHARDS, total_rows)
    base, extra = divmod(total_rows, count)
    shards, first = [], 1
    for index in range(count):
        size = base + (1 if index < extra else 0)
        shards.append(ShardSpec(index, count, first, first + size - 1, input_sha256))
        first += size
    return shards


def run_work_dir(work_dir: str | os.PathLike[str] | None, dag_id: str, dag_run_id: str, fanout_id: str) -> Location:
    """``<work dir>/<dag_id>/<16 hex of the dag run id>/<fanout_id>``; work dir default ``$RUNNER_AIRFLOW_WORK_DIR``
    (a path or a URL)."""
    base = work_dir if work_dir not in (None, "") else os.environ.get(WORK_DIR_ENV, DEFAULT_WORK_DIR)
    assert base is not None
    return location(base) / run_key(dag_id, dag_run_id, fanout_id)


def run_key(dag_id: str, dag_run_id: str, fanout_id: str) -> str:
    """``<dag_id>/<16 hex of the dag run id>/<fanout_id>``: one fan-out of one dag run, on every worker."""
    return f"{dag_id}/{hashlib.sha256(dag_run_id.encode()).hexdigest()[:16]}/{fanout_id}"


@dataclass(frozen=True)
class FanoutPlan:
    """A fan-out's task, input, options and work directory; the paths and batch request of each shard.

    Relative paths given by the user (input, output, report directory) are taken relative to
    the project root (``$RUNNER_ROOT``), the one directory every worker agrees on; URLs are
    taken as they are. ``store_url`` is the PostgreSQL store (``None``: SQLite files in the
    work directory); ``key`` names this fan-out in it (default: the work directory).
    """

    task: str
    root: Path
    input_path: Path
    work: Location
    options: BatchOptions
    key: str = ""
    store_url: str | None = None
    generation: int = 1  # the n-th computation of a batch (RunnerBatchOperator's, a shard's): names its journal

    @property
    def run_key(self) -> str:
        return self.key or str(self.work)

    def load(self) -> tuple[Project, TaskSpec]:
        """The runner project and the task (a :class:`~runner.errors.ConfigError` when invalid)."""
        from runner.config.project import load_project_or_raise

        project = load_project_or_raise(self.root)
        return project, project.task_for(self.task)

    def for_generation(self, generation: int) -> FanoutPlan:
        """This plan for the ``generation``-th computation of a batch (a shard's, whose journal it names)."""
        return replace(self, generation=generation)

    def successes(self, shard: ShardSpec | None = None) -> Location:
        """Where the split's (or ``shard``'s) successful tries are recorded (:mod:`runner.airflow.generations`)."""
        return self.work / "split" if shard is None else self.work / "shards" / shard.name

    def journal_path(self, shard: ShardSpec) -> Path:
        """The shard's journal: its name in the PostgreSQL store, or its file in the work directory
        (a new one for each generation after the first)."""
        name = shard.name if self.generation <= 1 else f"{shard.name}-g{self.generation}"
        if self.store_url:
            return Path(self.run_key) / name
        return self._local("journals") / f"{name}.sqlite3"

    def output_path(self, shard: ShardSpec) -> Location:
        return self.work / "outputs" / f"{shard.name}.jsonl"

    def report_dir(self, shard: ShardSpec) -> Location:
        return self.work / "reports" / shard.name

    def shared_scope(self, split_generation: int = 1) -> SharedScope | None:
        """The fan-out's batch caps as one scope every shard of the split's ``split_generation``
        reserves in (``None`` without summed caps): a fan-out computed again gets fresh caps."""
        from runner.batch.request import SharedScope
        from runner.caps.shared import shared_caps

        if not shared_caps(self.options.batch_caps).as_dict():
            return None
        ledger = None if self.store_url else self._local("caps.sqlite3")
        key = f"fanout:{self.run_key}" + (f"/g{split_generation}" if split_generation > 1 else "")
        return SharedScope(key, self.options.batch_caps, ledger)

    def merged_output_path(self, explicit: str | None) -> Location:
        """``explicit`` (a URL, or a path relative to the project root), or ``<work>/output.<output_format or jsonl>``."""
        return self._user(explicit) if explicit else self.work / f"output.{self.options['output_format'] or 'jsonl'}"

    def check_merged_output(self, path: Location) -> None:
        """Refuse a merged output that is the input, a journal (any SQLite file) or not a regular file."""
        from runner.batch.output import check_output_target, output_format

        output_format(path, self.options["output_format"])
        if isinstance(path, Path):
            check_output_target(path, input_path=self.input_path, journal_path=_as_path(self.work) / "journals")

    def kept_columns(self) -> KeptColumns | None:
        """The input columns the merged output keeps (``keep_columns``), checked against the input's
        header (a :class:`~runner.errors.UsageError` naming a missing one)."""
        from runner.batch.output import KeptColumns
        from runner.batch.readers import detect_format

        text = self.options["keep_columns"]
        if text is None:
            return None
        return KeptColumns.parse(text, self.input_path, detect_format(self.input_path, self.options["input_format"]))

    def merged_report_dir(self, explicit: str | None) -> Location:
        """``explicit`` (a URL, or a path relative to the project root), or ``<work>``."""
        return self._user(explicit) if explicit else self.work

    def _user(self, given: str) -> Location:
        return location(given) if is_url(given) else self.root / given

    def _local(self, name: str) -> Path:
        """``<work>/<name>`` for an SQLite file, which must be on a disk (not at a URL)."""
        if is_remote(self.work):
            raise UsageError(
                f"the work directory {self.work} is not a local or shared path, so the shard journals and the cap "
                "ledger cannot be SQLite files there: give the runner a PostgreSQL store (RUNNER_STORE_URL, or "
                "RUNNER_STORE_CONN_ID / store_conn_id naming a postgres connection)"
            )
        return _as_path(self.work) / name
    def request(
        self,
        shard: ShardSpec | None = None,
        *,
        try_number: int = 1,
        model_base_url: str | None = None,
        api_key: str | None = None,
        store_path: Path | None = None,
    ) -> BatchRequest:
        """The batch request of ``shard`` on try ``try_number`` (of the whole input without a shard).

        Rows get ``try_number * max_attempts`` attempts in all, so every Airflow try gives a
        row whose attempts are used up ``max_attempts`` more. A shard writes JSONL and leaves
        the options applied at the merge (``output_format``, ``keep_columns``) to it.
        """
        from runner.batch.request import BatchRequest
        from runner.caps.shared import local_caps

        options = self.options.shard_share(shard.count) if shard else self.options
        if shard:
            options = options.but(**{name: None for name, option in OPTIONS.items() if option.fanout == MERGE})
        shared = self.shared_scope(shard.split_generation) if shard else None
        where = shard or ShardSpec(0, 1, 1, 1, "")
        fields = options.request_fields()
        fields.update(
            max_attempts=options["max_attempts"] * max(1, try_number),
            batch_caps=local_caps(options.batch_caps) if shared else options.batch_caps,
        )
        return BatchRequest(
            input_path=self.input_path, output_path=self.output_path(where), journal_path=self.journal_path(where),
            report_dir=self.report_dir(where), base_url_override=model_base_url, api_key=api_key, store_path=store_path,
            store_url=self.store_url, progress="log", log_interval=PROGRESS_LOG_SECONDS,
            rows=(shard.first_row, shard.last_row) if shard else None, shared_scope=shared, **fields,
        )  # fmt: skip


def _as_path(work: Location) -> Path:
    assert isinstance(work, Path)
    return work


def count_input_rows(project: Project, task: TaskSpec, plan: FanoutPlan) -> tuple[int, str]:
    """``(rows, sha256)`` of the input, read the way a batch reads it (so bad flags fail here)."""
    from runner.batch.inputs import InputSource, file_sha256, parse_mapping, read_rows

    request = plan.request()
    source = InputSource.open(
        request.input_path,
        format=request.format,
        mapping=parse_mapping(request.mapping, task.inputs),
        id_column=request.id_column,
    )
    plan.kept_columns()  # a column the input lacks fails the split, before any shard runs
    last = 0
    for row in read_rows(source, task.inputs):
        last = row.number
    return last, file_sha256(source.path)
