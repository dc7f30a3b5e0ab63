"""What one delivery did, and what the deliverers are given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

DeliveryStatus = Literal["delivered", "failed"]


class DeliveryFailed(Exception):
    """A delivery did not arrive; ``kind`` says why in one word (connection, auth, refused,
    http_status, config, storage), the message says it for a person, without secrets."""

    def __init__(self, message: str, kind: str, attempts: int = 1):
        super().__init__(message)
        self.kind = kind
        self.attempts = attempts


@dataclass(frozen=True)
class DeliveryOutcome:
    """One target's result, as stored in the record (``report.schema.json#/properties/deliveries``)."""

    name: str
    kind: str
    status: DeliveryStatus
    target: str = ""
    attempts: int = 0
    error: str | None = None
    error_kind: str | None = None
    at: str | None = None
    files: tuple[str, ...] = ()
    earlier_attempt: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "status": self.status, "target": self.target,
            "attempts": self.attempts, "error": self.error, "error_kind": self.error_kind, "at": self.at,
            "files": list(self.files), "earlier_attempt": self.earlier_attempt,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeliveryOutcome:
        return cls(
            data["name"], data["kind"], data["status"], data.get("target", ""), int(data.get("attempts", 0)),
            data.get("error"), data.get("error_kind"), data.get("at"), tuple(data.get("files", ())),
            bool(data.get("earlier_attempt", False)),
        )  # fmt: skip


@dataclass(frozen=True)
class Package:
    """What is delivered: the report's files by format, its charts, and what a message says."""

    report_dir: Path
    files: Mapping[str, Path]  # format -> file (markdown, html, json, pdf, xlsx)
    charts: Sequence[Path] = ()
    title: str = ""
    status: str = ""
    summary: str = ""
    run_id: str = ""
    task: str = ""
    exit_code: int = 0
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    facts: Mapping[str, Any] = field(default_factory=dict)  # plain fields a webhook adds (a budget warning's)

    def chosen(self, names: Sequence[str] | None, default: Sequence[str]) -> list[Path]:
        """The files named by format (``charts`` for the chart images); ``default`` when not given."""
        wanted = list(names) if names is not None else list(default)
        paths = [self.files[n] for n in wanted if n in self.files]
        return paths + (list(self.charts) if "charts" in wanted else [])
