"""Cost per row: the 1,200-ticket batch (``examples/batch/tickets.csv``, task ``triage_ticket``)
in each mode the runner offers to pay less, against the loopback Chat Completions server.

Modes, in this order, each a real ``runner batch`` process on a copy of the project whose
task opts into the result cache (``cache: {ttl: 1d}``), all sharing one run store:

- ``live``: ``--no-cache``: every row sent to the endpoint;
- ``cache, 1st run``: the cache on and empty: a row whose inputs an earlier row already had
  is answered from the store (this run fills it);
- ``cache re-run``: the same batch again (``--restart``): deterministic calls (the triage
  agent runs at temperature 0) are answered from the run store;
- ``dedupe``: ``--no-cache --dedupe``: rows with identical inputs (the file repeats some
  tickets) are sent once, each row still gets its own record;
- ``batch API``: ``--no-cache --via batch-api``: every row in one provider batch (OpenAI Files +
  Batch APIs, implemented by the loopback server), billed at the batch price (half the live
  price, as OpenAI's Batch API).

Then the forecast: ``--estimate --no-cache`` on a fresh journal (a paid sample of 20 rows), and the
full run after it (``--no-cache``, resuming that journal, so the sample's rows are not paid twice);
the last line compares the projected total with what the server billed for the sample and the full
run together (the issue's bar: within 25%).

The cost of a mode is what the loopback server billed while it ran (``ScriptedServer.billed``:
the usage of every completion it produced) at the published prices shipped in
``runner/config/prices.yaml``; not what the runner says it spent. Printed per mode: endpoint
calls, USD per 1,000 rows, wall time of the ``runner batch`` process, and records written.

    .venv/bin/python bench/cost.py [--rows 1200] [--concurrency 32] [--estimate-only]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.model.batch_endpoints import BatchBehaviour  # noqa: E402
from runner.model.server import ScriptedServer  # noqa: E402

TICKETS = ROOT / "examples" / "batch" / "tickets.csv"
SCRIPT = ROOT / "examples" / "batch" / "triage_script.yaml"
MODES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("live", ("--no-cache",)),
    ("cache, 1st run", ()),
    ("cache re-run", ()),
    ("dedupe", ("--no-cache", "--dedupe")),
    ("batch API", ("--no-cache", "--via", "batch-api", "--batch-poll-seconds", "0.2")),
)


def make_project(work: Path, rows: int) -> Path:
    """A copy of the triage agent and task (the task with the result cache on) and the first ``rows`` tickets."""
    project = work / "project"
    (project / "agents.d").mkdir(parents=True)
    (project / "tasks.d").mkdir()
    shutil.copy(ROOT / "agents.d" / "triage.yaml", project / "agents.d" / "triage.yaml")
    task = yaml.safe_load((ROOT / "tasks.d" / "triage_ticket.yaml").read_text())
    task["cache"] = {"ttl": "1d"}
    task["caps"] = {"max_cost_usd": 0.01}  # no wall-clock cap: a busy machine must not cap rows
    (project / "tasks.d" / "triage_ticket.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    with TICKETS.open(newline="") as src, (project / "tickets.csv").open("w", newline="") as dst:
        reader = csv.DictReader(src)
        writer = csv.DictWriter(dst, fieldnames=reader.fieldnames or [])
        writer.writeheader()
        for number, row in enumerate(reader):
            if number >= rows:
                break
            writer.writerow(row)
    return project


def run_mode(project: Path, server: ScriptedServer, name: str, flags: tuple[str, ...], concurrency: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "RUNNER_"))}
    env.update(PYTHONPATH=str(ROOT), OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-bench-cost")
    output = project / f"out-{name.replace(' ', '-')}.jsonl"
    command = [
        sys.executable, "-m", "runner", "batch", "triage_ticket", "--input", "tickets.csv", "--output", str(output),
        "--id-column", "id", "--concurrency", str(concurrency), "--progress", "none", "--restart", "--json", *flags,
    ]  # fmt: skip
    before = len(server.billed)
    started = time.monotonic()
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{name}: runner batch exited {done.returncode}\n{done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    return {
        "mode": name, "calls": len(server.billed) - before, "usd": server.billed_usd(batch="batch-api" in flags, since=before),
        "wall": wall,
        "records": summary["records_written"], "rows": summary["total"], "runner_usd": summary["cost_usd"],
    }


def run_estimate(project: Path, server: ScriptedServer, concurrency: int) -> dict[str, Any]:
    """``--estimate`` (a paid sample of 20 rows) on a fresh journal, then the full run: the projection and the bill."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "RUNNER_"))}
    env.update(PYTHONPATH=str(ROOT), OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-bench-cost")
    base = [sys.executable, "-m", "runner", "batch", "triage_ticket", "--input", "tickets.csv", "--output", "out-estimate.jsonl",
            "--id-column", "id", "--concurrency", str(concurrency), "--progress", "none", "--no-cache", "--json",
            "--journal", "estimate.sqlite3"]  # fmt: skip
    before = len(server.billed)
    started = time.monotonic()
    forecast = subprocess.run([*base, "--estimate"], cwd=project, env=env, capture_output=True, text=True, check=False)
    if forecast.returncode != 0:
        raise SystemExit(f"estimate: runner batch exited {forecast.returncode}\n{forecast.stderr[-2000:]}")
    sampled = len(server.billed) - before
    full = subprocess.run(base, cwd=project, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if full.returncode != 0:
        raise SystemExit(f"full run after the estimate: exited {full.returncode}\n{full.stderr[-2000:]}")
    figures = json.loads(forecast.stdout)
    return {
        "mode": "estimate+full", "calls": len(server.billed) - before, "sample_calls": sampled,
        "usd": server.billed_usd(since=before), "wall": wall,
        "records": json.loads(full.stdout)["records_written"], "rows": figures["rows"], "projected": figures["total"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1200, help="tickets from the file (default: all 1,200)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--estimate-only", action="store_true", help="only the forecast against the billed full run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runner-cost-") as tmp, ScriptedServer(
        yaml.safe_load(SCRIPT.read_text()), batch=BatchBehaviour(polls=2)
    ) as server:
        project = make_project(Path(tmp), args.rows)
        modes = () if args.estimate_only else MODES
        results = [run_mode(project, server, name, flags, args.concurrency) for name, flags in modes]
        forecast = run_estimate(project, server, args.concurrency)
    results.append(forecast)
    live = results[0]["usd"] or 1.0
    print(f"{args.rows} tickets, concurrency {args.concurrency}, gpt-4o-mini at published prices (billed by the loopback server)")
    print(f"{'mode':<15} {'calls':>6} {'USD/1k rows':>12} {'vs live':>8} {'wall s':>7} {'records':>8}")
    for r in results:
        per_k = 1000 * r["usd"] / max(r["rows"], 1)
        print(f"{r['mode']:<15} {r['calls']:>6} {per_k:>12.6f} {r['usd'] / live:>7.0%} {r['wall']:>7.1f} {r['records']:>8}")
    low, projected, high = forecast["projected"]
    off = projected / forecast["usd"] - 1 if forecast["usd"] else 0.0
    print(f"estimate from a {forecast['sample_calls']}-call sample: ${projected:.6f} (${low:.6f} to ${high:.6f}); billed "
          f"(sample + full run): ${forecast['usd']:.6f}; {off:+.1%} ({'within' if abs(off) <= 0.25 else 'NOT within'} 25%)")


if __name__ == "__main__":
    main()
