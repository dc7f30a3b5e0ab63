"""Knowledge bases and long-term memory: documents converted, chunked by structure and indexed
in SQLite (FTS5 BM25, optionally embeddings in a sqlite-vec index, fused by reciprocal rank).

Below the tools layer: the ``search_knowledge``, ``remember`` and ``recall`` tools use it; the
run builds or refreshes the bases a task uses before its first step; ``runner index`` builds
them ahead of time. Embeddings come from an :class:`~runner.knowledge.embedder.Embedder` the
caller hands in (``runner.model.embeddings`` has the OpenAI-compatible and embedded ones).
"""
