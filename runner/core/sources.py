"""Sources: what an answer can cite. One type from the tool that found it (a knowledge base
chunk, a web search result, a browsed page, a memory) to the step record and the report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

SourceKind = Literal["knowledge", "web", "memory"]


@dataclass(frozen=True)
class Source:
    """One citable source. ``location`` is a project-relative file or a URL; ``section`` the
    heading path inside it; ``position`` where in it (``lines 12-30``, ``page 3``);
    ``collection`` the knowledge base or memory scope it came from."""

    kind: SourceKind
    location: str
    title: str = ""
    section: str = ""
    position: str = ""
    collection: str = ""

    def citation(self) -> str:
        """How an answer or a report names it: ``docs/billing.md — Refunds (lines 12-30)``."""
        where = " — ".join(part for part in (self.location, self.section) if part)
        return f"{where} ({self.position})" if self.position else where

    def as_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind, "location": self.location, "title": self.title, "section": self.section,
            "position": self.position, "collection": self.collection,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Source:
        return cls(
            kind=data["kind"], location=str(data["location"]), title=str(data.get("title") or ""),
            section=str(data.get("section") or ""), position=str(data.get("position") or ""),
            collection=str(data.get("collection") or ""),
        )


def unique_sources(sources: Iterable[Source]) -> tuple[Source, ...]:
    """``sources`` without repeats, in first-seen order."""
    return tuple(dict.fromkeys(sources))
