"""One shard of a fanned-out batch, as a process of its own (the Airflow operator's call without
Airflow): ``python shard_script.py ROOT INPUT JOURNAL LEDGER KEY CAP [STORE_URL]``.

The shard reserves in the shared cap scope ``KEY`` (caps ``max_cost_usd=CAP``), which lives in
the PostgreSQL store ``STORE_URL`` when given, else in the SQLite file ``LEDGER``. Prints the
batch summary as JSON. Tests kill it with SIGKILL while calls are in flight, then run it again.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from runner.batch.file_batch import run_batch_file
from runner.batch.request import BatchRequest, SharedScope
from runner.config.project import load_project_or_raise
from runner.config.specs import Caps


def main(root: str, data: str, journal: str, ledger: str, key: str, cap: str, store_url: str | None = None) -> None:
    project = load_project_or_raise(Path(root))
    task = project.task_for("triage_ticket")
    request = BatchRequest(
        input_path=Path(data), output_path=Path(journal).with_suffix(".jsonl"), id_column="id",
        journal_path=Path(journal), store_path=None if store_url else Path(root) / "runs.sqlite3", store_url=store_url,
        report_dir=Path(journal).with_suffix(".report"), progress="none", concurrency=2, max_attempts=3,
        shared_scope=SharedScope(key, Caps(max_cost_usd=float(cap)), None if store_url else Path(ledger)),
    )  # fmt: skip
    print(json.dumps(asyncio.run(run_batch_file(project, task, request))), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
