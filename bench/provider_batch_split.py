"""The issue's end-to-end check: ``runner batch --via batch-api`` over 120,000 one-call rows
against the strict loopback servers makes three provider batches at OpenAI's limits and two at
Anthropic's, resumes each after ``kill -9`` (once its first batch exists), and bills each row once.

    python bench/provider_batch_split.py                # 120,000 rows, both providers
    python bench/provider_batch_split.py --provider openai   # one of them
    python bench/provider_batch_split.py --rows 10000 --max-requests 4000   # the same at a smaller scale

Measured on 2 shared cores (seconds for both runs of the command, killed and resumed): 2,000 rows
at 800 per batch, OpenAI 51 s, Anthropic 76 s; 10,000 rows at 4,000 per batch, OpenAI 259 s (tests
running beside it), Anthropic 181 s: linear in the rows (18-26 ms a row, the rows' runs being the
cost, not the servers), so 120,000 rows take about 35-50 minutes per provider. 120,000 rows,
measured 2026-12-06 at eeb9d08 (tests running beside it), the servers at the real limits:
OpenAI 2,255 s, three batches of 50,000, 50,000 and 20,000; Anthropic 1,939 s, two batches of
100,000 and 20,000; for each, billed 120,000 = done 120,000, and the rows' recorded cost the
server's bill at batch prices ($1.62 and $12.00). (Before the calls a killed process held were
settled on resume, some rows kept their worst case: a 300-row run recorded 2-3x the bill.)
(The first Anthropic run found that a 100,000-request Message
Batch's results, about 60 MB, passed the 16 MiB cap of a live answer: fixed with
runner.model.response_cap.MAX_BATCH_RESULTS_BYTES.)
The row's wall-clock cap is raised to a provider batch's day (:func:`_patient`): the shipped
task's 120 s is a live call's, and bounds a row waiting on its batch too.

Prints one JSON line per provider: batches made (and how many the limits call for), their sizes,
calls billed, rows done in the output, what the server billed and what the rows recorded (USD),
seconds; exits 1 unless each provider made the batches its limits call for, billed each row once
(one call per row: billed = done = rows) and the rows recorded what it billed. Not a test
(too slow for the suite): the split at the real limits is tested in-process
(tests/batch/test_batch_flavours.py), the CLI path at small limits (tests/cli/test_anthropic_cli.py).
"""

from __future__ import annotations

import argparse
import json
import math
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

OPENAI_LIMIT, ANTHROPIC_LIMIT = 50_000, 100_000  # requests per batch: the shipped profiles' (runner/config/profiles.yaml)
OPENAI_BYTES = 200_000_000  # a batch's input file, as OpenAI documents it (the Anthropic server's own defaults are its 256 MB)


def _figures(provider: str, root: Path, sizes: list[int], server: ScriptedServer, rows: int, limit: int,
             seconds: float) -> dict[str, object]:  # fmt: skip
    """What the run made and billed, and whether it is what the limits call for: the batches, each
    row done and billed once, and the rows' recorded cost what the server billed at batch prices."""
    wanted = math.ceil(rows / limit)
    output = [json.loads(line) for line in (root / "out.jsonl").read_text().splitlines()]
    done = sum(row["status"] == "done" for row in output)
    recorded, billed_usd = sum(row["cost_usd"] for row in output), server.billed_usd(batch=True)
    billed = len(server.billed)
    return {"provider": provider, "batches": len(sizes), "batches_wanted": wanted, "sizes": sizes, "billed": billed,
            "done": done, "rows": rows, "billed_usd": round(billed_usd, 6), "recorded_usd": round(recorded, 6),
            "seconds": round(seconds, 1),
            "ok": len(sizes) == wanted and billed == done == rows and math.isclose(recorded, billed_usd, rel_tol=1e-9)}  # fmt: skip


def _patient(root: Path) -> Path:
    """The shipped triage task with a row's wall-clock cap of a provider batch's day: its 120 s (a live
    call's) also bounds a row waiting on its provider batch, which here takes minutes at this scale."""
    task = root / "tasks.d" / "triage_ticket.yaml"
    task.write_text(task.read_text().replace("max_wall_seconds: 120", "max_wall_seconds: 86400"))
    return root


def _run(root: Path, env: dict[str, str], rows: int, max_requests: int | None, created: object) -> float:
    """The batch command, killed with SIGKILL once ``created()`` says a batch exists, then run again."""
    source, out = tickets(root, rows), root / "out.jsonl"
    argv = [sys.executable, "-m", "runner", "batch", "triage_ticket", "--input", str(source), "--output", str(out),
            "--id-column", "id", "--via", "batch-api", "--batch-poll-seconds", "0.5", "--progress", "none", "--json",
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
        report = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}
        errors = json.loads(Path(report["report_path"]).with_suffix(".json").read_text())["errors_by_kind"] if report.get("report_path") else {}
        raise SystemExit(f"the resumed command failed ({done.returncode}): counts {report.get('counts')}, errors {json.dumps(errors)[:3000]}; "
                         f"stderr: {done.stderr[-2000:]}")
    return time.monotonic() - started


def _openai(tmp: Path, rows: int, max_requests: int | None) -> dict[str, object]:
    limits = BatchBehaviour(polls=2, max_requests=OPENAI_LIMIT, max_bytes=OPENAI_BYTES)  # the server refuses a bigger batch
    with ScriptedServer(SCRIPT, batch=limits, strict=True) as openai:
        root = _patient(copy_shipped(tmp / "openai"))
        seconds = _run(root, runner_env(openai, key="sk-bench"), rows, max_requests, lambda: openai.batches.batches_created > 0)
        sizes = [b.total for b in sorted(openai.batches.batches.values(), key=lambda b: b.id)]
        return _figures("openai", root, sizes, openai, rows, max_requests or OPENAI_LIMIT, seconds)


def _anthropic(tmp: Path, rows: int, max_requests: int | None) -> dict[str, object]:
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY, batch=BatchBehaviour(polls=2)) as anthropic:
        root = _patient(claude_project(tmp / "anthropic"))
        seconds = _run(root, anthropic_env(anthropic), rows, max_requests, lambda: len(anthropic.message_batches) > 0)
        sizes = [len(b.requests) for b in sorted(anthropic.message_batches.values(), key=lambda b: b.id)]
        return _figures("anthropic", root, sizes, anthropic, rows, max_requests or ANTHROPIC_LIMIT, seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rows", type=int, default=120_000)
    parser.add_argument("--max-requests", type=int, help="lower the per-batch request limit (a small-scale run)")
    parser.add_argument("--provider", choices=["openai", "anthropic", "both"], default="both")
    args = parser.parse_args()
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for provider, measure in (("openai", _openai), ("anthropic", _anthropic)):
            if args.provider in (provider, "both"):
                found.append(measure(Path(tmp), args.rows, args.max_requests))
                print(json.dumps(found[-1]), flush=True)
    return 0 if all(f["ok"] for f in found) else 1


if __name__ == "__main__":
    sys.exit(main())
