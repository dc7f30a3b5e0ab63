"""The provider batches of one ``runner batch --via batch-api``, as its journal keeps them.

Every change is written to the journal before anything waits on it, so a process killed at
any point leaves enough behind for the next one to carry on without submitting a round twice:

- ``rounds``: the last round number handed out (round numbers are never reused);
- ``intents``: a batch about to be created, written *before* its input file is uploaded. A
  resume finds the batch it may have become by its metadata (``runner_batch_id``,
  ``runner_round``, ``runner_part``); when none exists it was never created and the intent
  is dropped (its calls are sent again with their rows);
- ``out``: batches created and not yet collected; a resume re-attaches to each.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from runner.batch.journal import BatchJournal


@dataclass(frozen=True)
class BatchPart:
    """One provider batch of a round: ``part`` of round ``round``, for one model at one endpoint."""

    round: int
    part: int
    model: str
    endpoint: str  # the endpoint's base URL without credentials (runner.endpoints.safe_url)
    at: float = 0.0  # when it was intended (seconds since the epoch): a resume looks no further back

    @property
    def key(self) -> str:
        return f"{self.round}.{self.part}"

    def metadata(self, batch_id: str) -> dict[str, str]:
        """The provider batch's metadata: how a resume finds it when its id was never recorded."""
        return {"runner_batch_id": batch_id, "runner_round": str(self.round), "runner_part": str(self.part)}


@dataclass(frozen=True)
class OutBatch:
    """A provider batch created and not yet collected."""

    id: str
    part: BatchPart


class ProviderState:
    """Read and change the provider state of ``journal`` (each change is one journal write)."""

    def __init__(self, journal: BatchJournal):
        self.journal = journal
        state = journal.provider_state()
        self.rounds = int(state.get("rounds", 0))
        self.intents = [_part(found) for found in state.get("intents", ())]
        self.out = [OutBatch(str(found["id"]), _part(found["part"])) for found in state.get("out", ())]

    @property
    def out_ids(self) -> tuple[str, ...]:
        return tuple(batch.id for batch in self.out)

    def next_round(self) -> int:
        self.rounds += 1
        self._save()
        return self.rounds

    def intend(self, part: BatchPart) -> BatchPart:
        """Note (durably) that ``part`` is about to be created; returns it with its time."""
        stamped = BatchPart(part.round, part.part, part.model, part.endpoint, time.time())
        self.intents.append(stamped)
        self._save()
        return stamped

    def created(self, part: BatchPart, provider_id: str) -> None:
        """The batch of ``part`` exists as ``provider_id``: out, no longer an intent (one write)."""
        self.intents = [i for i in self.intents if i.key != part.key]
        self.out.append(OutBatch(provider_id, part))
        self._save()

    def dropped(self, part: BatchPart) -> None:
        """``part`` was never created."""
        self.intents = [i for i in self.intents if i.key != part.key]
        self._save()

    def collected(self, provider_id: str) -> None:
        """Every line of ``provider_id`` is stored: it is no longer out."""
        self.out = [batch for batch in self.out if batch.id != provider_id]
        self._save()

    def _save(self) -> None:
        self.journal.save_provider_state({
            "rounds": self.rounds,
            "intents": [asdict(i) for i in self.intents],
            "out": [{"id": batch.id, "part": asdict(batch.part)} for batch in self.out],
        })  # fmt: skip


def _part(found: Any) -> BatchPart:
    return BatchPart(int(found["round"]), int(found["part"]), str(found["model"]), str(found["endpoint"]), float(found.get("at", 0)))
