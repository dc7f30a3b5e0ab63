"""A batch run in its own process, for the kill -9 test: ``python crash_batch_script.py IN JOURNAL LOG OUT [DB_URL]``.

With ``DB_URL`` (``postgresql://...``) the journal lives in PostgreSQL under the name JOURNAL.

The executor appends each row id to LOG before working (so the test can count executions),
sleeps a little, and returns the subject upper-cased. At the end the output is written.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from runner.batch.engine import batch_budget, run_batch
from runner.batch.inputs import InputSource, file_sha256, read_rows
from runner.batch.journal_open import open_batch_journal
from runner.batch.output import write_output
from runner.config.specs import Caps, InputSpec
from runner.core.results import RunResult
from runner.runs.options import RunOptions

SPECS = (InputSpec("subject", "string"),)


def main(input_path: Path, journal_path: Path, log_path: Path, output_path: Path, database_url: str | None = None) -> int:
    source = InputSource.open(input_path, id_column="id")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def executor(inputs: dict[str, Any], options: RunOptions) -> RunResult:
        os.write(log_fd, f"{options.run_id}\n".encode())  # one write(2) with O_APPEND: a whole line
        await asyncio.sleep(0.005 + (hash(inputs["subject"]) % 10) / 1000)
        return RunResult(str(options.run_id), "crash", "completed", output={"upper": inputs["subject"].upper()})

    journal = open_batch_journal(
        journal_path, task="crash", input_path=input_path, input_sha256=file_sha256(input_path), options={},
        database_url=database_url,
    )
    with journal:
        rows = read_rows(source, SPECS)
        summary = asyncio.run(run_batch(rows, executor, journal=journal, budget=batch_budget(Caps()), concurrency=8))
        write_output(journal, output_path)
    os.close(log_fd)
    return summary.exit_code


if __name__ == "__main__":
    sys.exit(main(*(Path(arg) for arg in sys.argv[1:5]), *sys.argv[5:6]))
