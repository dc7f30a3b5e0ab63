"""The provider batches of one ``runner batch --via batch-api``, as its journal keeps them.

Every change is written to the journal before anything waits on it, so a process killed at
any point leaves enough behind for the next one to carry on without submitting a round twice:

- ``rounds``: the last round number handed out (round numbers are never reused);
- ``intents``: a batch about to be created, written *before* its input file is uploaded. A
  resume finds the batch it may have become by its metadata (``runner_batch_id``,
  ``runner_round``, ``runner_part``); when none exists it was never created and the intent
  is dropped (its calls are sent again with their rows);
- ``out``: batches created and not yet collected; a resume re-attaches to each.
- ``files``: input files runner uploaded and no longer needs (their batch was collected, or
  was never created), to be deleted from the provider once no batch that has not ended uses
  them (:meth:`~runner.batch.rounds.RoundCollector.delete_unneeded_files`). A file is known by
  its id once its upload returned, and always by its name (a resume finds one whose upload
  outlived its process, or one the SDK's retried upload made twice).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
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
    file_id: str | None = None  # its input file, once uploaded
    requests: int = 0  # how many requests it holds (0: not recorded); a Message Batch is recognised by it

    @property
    def key(self) -> str:
        return f"{self.round}.{self.part}"

    def filename(self, batch_id: str) -> str:
        """The name its input file is uploaded under (unique: round numbers are never reused)."""
        return f"{batch_id}-round{self.round}-{self.part}.jsonl"

    def metadata(self, batch_id: str) -> dict[str, str]:
        """The provider batch's metadata: how a resume finds it when its id was never recorded."""
        return {"runner_batch_id": batch_id, "runner_round": str(self.round), "runner_part": str(self.part)}


@dataclass(frozen=True)
class OutBatch:
    """A provider batch created and not yet collected."""

    id: str
    part: BatchPart


@dataclass(frozen=True)
class UnneededFile:
    """An input file runner uploaded and no longer needs: ``name`` always, ``id`` when known."""

    endpoint: str
    name: str
    id: str | None
    at: float  # when its batch was intended: a look for it by name goes no further back

    @property
    def key(self) -> tuple[str, str, str | None]:
        return self.endpoint, self.name, self.id


class ProviderState:
    """Read and change the provider state of ``journal`` (each change is one journal write)."""

    def __init__(self, journal: BatchJournal):
        self.journal = journal
        state = journal.provider_state()
        self.rounds = int(state.get("rounds", 0))
        self.out, self.intents, self.files = recorded(state)

    @property
    def out_ids(self) -> tuple[str, ...]:
        return tuple(batch.id for batch in self.out)

    def next_round(self) -> int:
        self.rounds += 1
        self._save()
        return self.rounds

    def intend(self, part: BatchPart) -> BatchPart:
        """Note (durably) that ``part`` is about to be created; returns it with its time."""
        stamped = replace(part, at=time.time(), file_id=None)
        self.intents.append(stamped)
        self._save()
        return stamped

    def uploaded(self, part: BatchPart, file_id: str) -> BatchPart:
        """``part``'s input file is uploaded as ``file_id``; returns the intent with it."""
        with_file = replace(self._intent(part), file_id=file_id)
        self.intents = [with_file if i.key == part.key else i for i in self.intents]
        self._save()
        return with_file

    def created(self, part: BatchPart, provider_id: str) -> None:
        """The batch of ``part`` exists as ``provider_id``: out, no longer an intent (one write)."""
        found = self._intent(part)
        self.intents = [i for i in self.intents if i.key != part.key]
        self.out.append(OutBatch(provider_id, found))
        self._save()

    def dropped(self, part: BatchPart) -> None:
        """``part`` was never created: its input file, if its upload got through, is not needed."""
        found = self._intent(part)
        self.intents = [i for i in self.intents if i.key != part.key]
        self.files.append(UnneededFile(found.endpoint, found.filename(self.journal.batch_id), found.file_id, found.at))
        self._save()

    def collected(self, provider_id: str, input_file_id: str | None = None) -> None:
        """Every line of ``provider_id`` is stored: it is no longer out, nor its input file needed."""
        for batch in self.out:
            if batch.id == provider_id:
                part = batch.part
                name = part.filename(self.journal.batch_id)
                self.files.append(UnneededFile(part.endpoint, name, input_file_id or part.file_id, part.at))
        self.out = [batch for batch in self.out if batch.id != provider_id]
        self._save()

    def abandoned(self, files: list[UnneededFile]) -> None:
        """Input files of an earlier journal's batches (``--restart``) to delete once they end
        (each once: a restart killed after this write notes them again)."""
        known = {f.key for f in self.files}
        self.files.extend(f for f in dict.fromkeys(files) if f.key not in known)
        self._save()

    def deleted(self, file: UnneededFile) -> None:
        """``file`` (every copy of it) is gone from the provider."""
        self.files = [f for f in self.files if f.key != file.key]
        self._save()

    def file_of(self, part: BatchPart) -> str | None:
        """The id of ``part``'s uploaded input file, if its upload returned."""
        return self._intent(part).file_id

    def _intent(self, part: BatchPart) -> BatchPart:
        """The recorded intent of ``part`` (with its file id when uploaded), or ``part`` itself."""
        return next((i for i in self.intents if i.key == part.key), part)

    def _save(self) -> None:
        self.journal.save_provider_state({
            "rounds": self.rounds,
            "intents": [asdict(i) for i in self.intents],
            "out": [{"id": batch.id, "part": asdict(batch.part)} for batch in self.out],
            "files": [asdict(f) for f in self.files],
        })  # fmt: skip


def recorded(state: dict[str, Any]) -> tuple[list[OutBatch], list[BatchPart], list[UnneededFile]]:
    """The batches out, the intents and the unneeded files of a journal's provider state."""
    return (
        [OutBatch(str(found["id"]), _part(found["part"])) for found in state.get("out", ())],
        [_part(found) for found in state.get("intents", ())],
        [_file(found) for found in state.get("files", ())],
    )


def _part(found: Any) -> BatchPart:
    file_id = found.get("file_id")
    return BatchPart(
        int(found["round"]), int(found["part"]), str(found["model"]), str(found["endpoint"]), float(found.get("at", 0)),
        None if file_id is None else str(file_id), int(found.get("requests") or 0),
    )


def _file(found: Any) -> UnneededFile:
    file_id = found.get("id")
    return UnneededFile(str(found["endpoint"]), str(found["name"]), None if file_id is None else str(file_id), float(found["at"]))
