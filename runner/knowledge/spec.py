"""A knowledge base as declared in YAML (``kind: Knowledge``, or inline under ``knowledge:``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from runner.core.providers import Provider
from runner.knowledge.limits import DEFAULT_LIMITS, ConversionLimits

SearchMode = Literal["bm25", "vector", "hybrid"]


@dataclass(frozen=True)
class EmbeddingSpec:
    """Where embeddings come from: an OpenAI-compatible ``/v1/embeddings`` endpoint
    (``provider: openai``) or the embedded model (``provider: local``)."""

    model: str
    provider: Provider = Provider.OPENAI  # openai or local (the knowledge schema allows no other)
    base_url: str | None = None
    api_key_env: str | None = None
    batch_size: int = 64
    timeout_seconds: float = 60.0


@dataclass(frozen=True)
class KnowledgeSpec:
    """A knowledge base: which files, how they are chunked, how they are searched.

    ``sources`` are globs or folders relative to the project root (a folder means every
    supported file under it). ``source`` names the YAML that declared it, for messages.
    """

    name: str
    sources: tuple[str, ...]
    description: str = ""
    max_chunk_chars: int = 1200
    overlap_chars: int = 200
    top_k: int = 5
    mode: SearchMode | None = None  # default: hybrid with embeddings, else bm25
    embeddings: EmbeddingSpec | None = None
    limits: ConversionLimits = DEFAULT_LIMITS  # how long and how much one source file may take to read
    source: str = ""
    pointer: str = ""  # where in ``source`` it was declared

    @property
    def search_mode(self) -> SearchMode:
        return self.mode or ("hybrid" if self.embeddings else "bm25")

    @classmethod
    def from_config(cls, data: dict[str, Any], source: str = "", pointer: str = "") -> KnowledgeSpec:
        """From a validated ``kind: Knowledge`` document or inline ``knowledge:`` item."""
        chunking = data.get("chunking", {})
        search = data.get("search", {})
        embeddings = data.get("embeddings")
        return cls(
            name=data["name"],
            sources=tuple(data["sources"]),
            description=data.get("description", ""),
            max_chunk_chars=chunking.get("max_chars", 1200),
            overlap_chars=chunking.get("overlap_chars", 200),
            top_k=search.get("top_k", 5),
            mode=search.get("mode"),
            embeddings=_embeddings(embeddings) if embeddings else None,
            limits=ConversionLimits.from_config(data.get("parsing", {})),
            source=source,
            pointer=pointer,
        )


def _embeddings(data: dict[str, Any]) -> EmbeddingSpec:
    """The ``embeddings:`` block (schema-checked: ``provider`` is ``openai`` or ``local``)."""
    return EmbeddingSpec(**{**data, "provider": Provider(data.get("provider", Provider.OPENAI))})
