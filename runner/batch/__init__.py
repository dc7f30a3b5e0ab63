"""Batch runs: a task over every row of a CSV/JSONL/Parquet file, resumable, within batch caps.

- :mod:`~runner.config.coerce`: raw values -> typed task inputs (shared with ``runner run --input``)
- :mod:`~runner.batch.readers`, :mod:`~runner.batch.inputs`: streamed rows, ids, per-row errors
- :mod:`~runner.batch.journal`: the SQLite journal (resume, exactly-once recording)
- :mod:`~runner.batch.ratelimit`: requests/tokens per minute shared by all rows, batch-wide pause
- :mod:`~runner.batch.engine`: bounded concurrency, batch caps, failure policy, cancellation
- :mod:`~runner.batch.output`, :mod:`~runner.batch.summary`: the output file and the batch report
- :mod:`~runner.batch.progress`: a tqdm bar on a terminal, log lines elsewhere
"""
