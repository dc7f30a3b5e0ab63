"""One fan-out's plan: the shards (row ranges of the input) and where each one's files go.

The split, every shard and the merge build the same :class:`FanoutPlan` from the same
operator arguments, so they agree on every path without passing them around:

* a shard is a contiguous range of input rows (:class:`ShardSpec`), not a copy of them:
  each shard runs the batch over the whole input file restricted to its rows
  (``BatchRequest.rows``), so row numbers, ids and duplicate-id checks are exactly those
  of ``runner batch`` over the whole file;
* ``<work>/journals/<shard>.sqlite3`` is a shard's journal: the same for every try, so a
  retry resumes it and pays for no finished row again;
* ``<work>/outputs/<shard>.jsonl`` and ``<work>/reports/<shard>/`` are a shard's own output
  and batch report; the merge writes ``<work>/output.<format>`` and ``<work>/batch_report.*``
  unless told otherwise.

``<work>`` is ``<work dir>/<dag_id>/<16 hex of the dag run id>/<fan-out id>`` on a path every
worker shares. No Airflow imports here.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.airflow.options import FanoutOptions
from runner.errors import UsageError

if TYPE_CHECKING:
    from runner.batch.file_batch import BatchRequest
    from runner.config.project import Project
    from runner.config.specs import TaskSpec

WORK_DIR_ENV = "RUNNER_AIRFLOW_WORK_DIR"
DEFAULT_WORK_DIR = "/tmp/runner-airflow"
DEFAULT_SHARDS = 4
PROGRESS_LOG_SECONDS = 60.0


@dataclass(frozen=True)
class ShardSpec:
    """Rows ``first_row..last_row`` (1-based, inclusive) of the input: shard ``index`` of ``count``."""

    index: int
    count: int
    first_row: int
    last_row: int
    input_sha256: str

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
        """A small JSON value (the split's XCom, one per mapped shard)."""
        return {
            "index": self.index,
            "count": self.count,
            "first_row": self.first_row,
            "last_row": self.last_row,
            "input_sha256": self.input_sha256,
        }

    @classmethod
    def from_xcom(cls, value: Any) -> ShardSpec:
        """The inverse of :meth:`as_xcom`; anything else is refused."""
        try:
            shard = cls(**{k: value[k] for k in ("index", "count", "first_row", "last_row", "input_sha256")})
        except (KeyError, TypeError) as exc:
            raise UsageError(f"not a shard from the split task: {value!r} ({exc})") from None
        numbers = (shard.index, shard.count, shard.first_row, shard.last_row)
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers) or shard.rows < 1:
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


def run_work_dir(work_dir: str | os.PathLike[str] | None, dag_id: str, dag_run_id: str, fanout_id: str) -> Path:
    """``<work dir>/<dag_id>/<16 hex of the dag run id>/<fanout_id>``; work dir default ``$RUNNER_AIRFLOW_WORK_DIR``."""
    base = str(work_dir) if work_dir not in (None, "") else os.environ.get(WORK_DIR_ENV, DEFAULT_WORK_DIR)
    return Path(base) / dag_id / hashlib.sha256(dag_run_id.encode()).hexdigest()[:16] / fanout_id


@dataclass(frozen=True)
class FanoutPlan:
    """A fan-out's task, input, options and work directory; the paths and batch request of each shard.

    Relative paths given by the user (input, output, report directory) are taken relative to
    the project root (``$RUNNER_ROOT``), the one directory every worker agrees on.
    """

    task: str
    root: Path
    input_path: Path
    work: Path
    options: FanoutOptions

    def load(self) -> tuple[Project, TaskSpec]:
        """The runner project and the task (a :class:`~runner.errors.ConfigError` when invalid)."""
        from runner.config.project import load_project_or_raise

        project = load_project_or_raise(self.root)
        return project, project.task_for(self.task)

    def journal_path(self, shard: ShardSpec) -> Path:
        return self.work / "journals" / f"{shard.name}.sqlite3"

    def output_path(self, shard: ShardSpec) -> Path:
        return self.work / "outputs" / f"{shard.name}.jsonl"

    def report_dir(self, shard: ShardSpec) -> Path:
        return self.work / "reports" / shard.name

    def merged_output_path(self, explicit: str | None) -> Path:
        """``explicit`` (relative to the project root), or ``<work>/output.<output_format or jsonl>``."""
        return self.root / explicit if explicit else self.work / f"output.{self.options.output_format or 'jsonl'}"

    def check_merged_output(self, path: Path) -> None:
        """Refuse a merged output that is the input, a journal (any SQLite file) or not a regular file."""
        from runner.batch.output import check_output_target, output_format

        output_format(path, self.options.output_format)
        check_output_target(path, input_path=self.input_path, journal_path=self.work / "journals")

    def merged_report_dir(self, explicit: str | None) -> Path:
        """``explicit`` (relative to the project root), or ``<work>``."""
        return self.root / explicit if explicit else self.work

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
        row whose attempts are used up ``max_attempts`` more.
        """
        from runner.batch.file_batch import BatchRequest

        options = self.options.shard_share(shard.count) if shard else self.options
        where = shard or ShardSpec(0, 1, 1, 1, "")
        return BatchRequest(
            input_path=self.input_path, output_path=self.output_path(where), format=options.input_format,
            output_format="jsonl", mapping=options.mapping, id_column=options.id_column,
            journal_path=self.journal_path(where), report_dir=self.report_dir(where), durable=options.durable,
            concurrency=options.concurrency, max_attempts=options.max_attempts * max(1, try_number),
            stop_after_failures=options.stop_after_failures, batch_caps=options.batch_caps, run_caps=options.row_caps,
            requests_per_minute=options.requests_per_minute, tokens_per_minute=options.tokens_per_minute,
            model_override=options.model, base_url_override=model_base_url, api_key=api_key, store_path=store_path,
            progress="log", log_interval=PROGRESS_LOG_SECONDS,
            rows=(shard.first_row, shard.last_row) if shard else None,
        )  # fmt: skip


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
    last = 0
    for row in read_rows(source, task.inputs):
        last = row.number
    return last, file_sha256(source.path)
