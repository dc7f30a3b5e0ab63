"""A try of ``RunnerBatchOperator`` after a success computes the batch again: its generations.

A retry after a failed try resumes the batch's journal: rows already done are kept and nothing
is paid for twice. A try after a *successful* one (the task cleared after it succeeded) is a
request to run again, not a retry: it starts the batch's next *generation*, a new journal
(``...-g2``, ``-g3``, ...) in which every row runs again, and rewrites the output and the report
where the last generation wrote them. As for the run operator (:mod:`runner.airflow.execution`),
the decision is a record, never the try number: the successful try leaves
``<work>/succeeded-g<n>.json`` (its try number and batch id) before it returns, in the work
directory every worker shares. A try whose record could not be written fails, and its retry,
finding every row done, writes it.

A generation's tries are counted from its first (``max_attempts`` is per Airflow try). No
Airflow imports here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from runner.errors import StoreDamaged
from runner.locations import Location, read_text, write_text

MAX_GENERATIONS = 10_000


@dataclass(frozen=True)
class Generation:
    """The ``number``-th computation of one batch task, whose first try came after try ``tries_before``."""

    number: int = 1
    tries_before: int = 0

    def try_here(self, try_number: int) -> int:
        """``try_number`` counted within this generation (1 for its first try)."""
        return max(1, try_number - self.tries_before)


def current_generation(work: Location) -> Generation:
    """The first generation of the batch in ``work`` whose success is not recorded."""
    tries_before = 0
    for number in range(1, MAX_GENERATIONS + 1):
        path = _record(work, number)
        try:
            tries_before = int(json.loads(read_text(path))["try_number"])
        except FileNotFoundError:
            return Generation(number, tries_before)
        except (ValueError, TypeError, KeyError) as error:  # truncated, hand-edited, or not this file at all
            raise StoreDamaged(
                f"{path}: not a record of a successful try ({error.__class__.__name__}: {error}); it says which "
                "computation of this batch task comes next. Delete it to compute that generation again"
            ) from None
    raise RuntimeError(f"{MAX_GENERATIONS} successful computations of one batch task")  # pragma: no cover


def record_success(work: Location, generation: Generation, try_number: int, manifest: dict[str, Any]) -> None:
    """Record that ``generation`` succeeded on ``try_number``: the next try computes the batch again."""
    record = {"generation": generation.number, "try_number": try_number, "batch_id": manifest.get("batch_id"),
              "output_path": manifest.get("output_path")}  # fmt: skip
    write_text(_record(work, generation.number), json.dumps(record, indent=2) + "\n")


def _record(work: Location, number: int) -> Location:
    return work / f"succeeded-g{number}.json"
