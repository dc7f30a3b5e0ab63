"""The issue's end-to-end check: ``runner batch --via batch-api`` over 120,000 one-call rows
against the strict loopback servers makes three provider batches at OpenAI's limits and two at
Anthropic's, resumes each after ``kill -9`` (once its first batch exists), and bills each row once.

    python bench/provider_batch_split.py                # 120,000 rows (slow: tens of minutes)
    python bench/provider_batch_split.py --rows 500 --max-requests 200   # the same at a small scale

Prints one JSON line per provider: batches made, their sizes, rows billed, seconds. Not a test
(too slow for the suite): the split at the real limits is tested in-process
(tests/batch/test_batch_flavours.py), the CLI path at small limits (tests/cli/test_anthropic_cli.py).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runner.model.anthropic_server import AnthropicServer  # noqa: E402
from runner.model.batch_endpoints import BatchBehaviour  # noqa: E402
from runner.model.server import ScriptedServer  # noqa: E402
from tests.cli.anthropic_project import ANTHROPIC_KEY, SCRIPT, anthropic_env, claude_project, tickets  # noqa: E402
from tests.support.project import copy_shipped, runner_env  # noqa: E402


def _run(root: Path, env: dict[str, str], rows: int, max_requests: int | None, created: object) -> float:
    """The batch command, killed with SIGKILL once ``created()`` says a batch exists, then run again."""
    source, out = tickets(root, rows), root / "out.jsonl"
    argv = [sys.executable, "-m", "runner", "batch", "triage_ticket", "--input", str(source), "--output", str(out),
            "--id-column", "id", "--via", "batch-api", "--batch-poll-seconds", "0.5", "--progress", "none",
            "--journal", str(root / "journal.sqlite3"),
            *(["--batch-max-requests", str(max_requests)] if max_requests else [])]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not created() and process.poll() is None:  # type: ignore[operator]
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the resumed command failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", type=int, default=120_000)
    parser.add_argument("--max-requests", type=int, help="lower the per-batch request limit (a small-scale run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2)) as openai:
            root = copy_shipped(Path(tmp) / "openai")
            seconds = _run(root, runner_env(openai, key="sk-bench"), args.rows, args.max_requests, lambda: openai.batches.batches_created > 0)
            sizes = [b.total for b in sorted(openai.batches.batches.values(), key=lambda b: b.id)]
            print(json.dumps({"provider": "openai", "batches": len(sizes), "sizes": sizes, "billed": len(openai.billed),
                              "rows": args.rows, "seconds": round(seconds, 1)}), flush=True)  # fmt: skip
        with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY, batch=BatchBehaviour(polls=2)) as anthropic:
            root = claude_project(Path(tmp) / "anthropic")
            seconds = _run(root, anthropic_env(anthropic), args.rows, args.max_requests, lambda: len(anthropic.message_batches) > 0)
            sizes = [len(b.requests) for b in sorted(anthropic.message_batches.values(), key=lambda b: b.id)]
            print(json.dumps({"provider": "anthropic", "batches": len(sizes), "sizes": sizes, "billed": len(anthropic.billed),
                              "rows": args.rows, "seconds": round(seconds, 1)}), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
