"""What reports and output files read from a batch: its rows in input order, its id, its metadata.

:class:`~runner.batch.journal.BatchJournal` is one such source; the Airflow fan-out's merge
reads several shard journals as one (``runner.airflow.merge.MergedJournals``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runner.batch.journal import JournalRow


class BatchRecords(Protocol):
    """Read access to a batch's recorded rows."""

    @property
    def batch_id(self) -> str: ...

    @property
    def meta(self) -> Mapping[str, Any]:
        """``task``, ``input_path``, ``input_sha256``, ... as the journal recorded them."""
        ...

    def records(self) -> Iterator[JournalRow]:
        """Every row, in input order."""
        ...
