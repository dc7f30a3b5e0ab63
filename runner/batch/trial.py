"""Trial runs: ``--limit N`` (the first N valid rows) and ``--sample N --seed S`` (N valid rows at random).

The whole file is in the journal either way, and a trial's identity is the batch's own (a row
limit is not part of it): the rows a trial runs stay done, so the full run that follows, under
the same configuration, runs only the others and pays for the trial's rows once. The output of a
trial holds its rows only (:class:`SelectedRows`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runner.batch.journal import BatchJournal, JournalRow

if TYPE_CHECKING:
    from runner.batch.request import BatchRequest


def trial_rows(journal: BatchJournal, request: BatchRequest) -> frozenset[int] | None:
    """The row numbers a trial runs, or ``None`` for the whole file."""
    if request.limit is None and request.sample is None:
        return None
    valid = [row.number for row in journal.records() if row.status != "invalid"]
    if request.limit is not None:
        return frozenset(valid[: request.limit])
    assert request.sample is not None
    return pick(valid, request.sample, request.seed)


def pick(numbers: list[int], count: int, seed: int) -> frozenset[int]:
    """``count`` of ``numbers`` at random: the same ones for the same file and seed."""
    return frozenset(random.Random(seed).sample(numbers, min(count, len(numbers))))


@dataclass(frozen=True)
class SelectedRows:
    """A journal's records restricted to ``numbers`` (a trial's output)."""

    journal: BatchJournal
    numbers: frozenset[int]

    @property
    def batch_id(self) -> str:
        return self.journal.batch_id

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.journal.meta

    def records(self) -> Iterator[JournalRow]:
        return (row for row in self.journal.records() if row.number in self.numbers)
