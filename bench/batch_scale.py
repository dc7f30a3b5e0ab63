"""Batch at scale: runner's batch engine against the floor, regime by regime, row count by row count.

The floor is a hand-written loop: one ``AsyncOpenAI`` client, C coroutines pulling rows
(:func:`batch_throughput.hand_loop`). Both run, each in a fresh process, against the same
loopback Chat Completions server (its own process, a fixed latency per call), interleaved
round by round, so load on the machine hits them alike; each figure is the median over the
rounds. Regimes (``--regimes``):

- ``calc16``: the 4-call calculator task (3 tool calls, then the answer), concurrency 16, 100 ms a call;
- ``triage64`` / ``triage128``: 1-call rows, concurrency 64 / 128, 20 ms a call;
- ``fanout4``: 1-call rows at concurrency 64 in each of 4 processes (shards of the input), run
  store and journals in the PostgreSQL database ``--store-url`` (``$RUNNER_STORE_URL``); the
  floor is 4 hand loops over the same shards. CPU is the sum of the processes', rows/s is all
  rows over the slowest process's time, peak RSS the largest process's.

Printed per regime and row count (``--rows``, comma-separated): CPU ms per row, rows/s and
peak RSS of both, and runner's ratio to the floor (the figure of merit: the machine may be
shared, so absolute figures are noisy and ratios are what to compare).

    .venv/bin/python bench/batch_scale.py [--rows 1000,10000,100000] [--regimes calc16,triage64,triage128] [--rounds 2]
    .venv/bin/python bench/batch_scale.py --rows 100000 --regimes fanout4 --store-url postgresql://user@host/db
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import batch_throughput as bench  # a sibling script, not a package


@dataclass(frozen=True)
class Regime:
    """One benchmarked regime: the task, the concurrency (per process), the server's latency a call, the processes."""

    task: str
    concurrency: int
    latency: float
    shards: int = 1


REGIMES = {
    "calc16": Regime("calc", 16, 0.1),
    "triage64": Regime("triage", 64, 0.02),
    "triage128": Regime("triage", 128, 0.02),
    "fanout4": Regime("triage", 64, 0.02, shards=4),
}


def measure(mode: str, regime: Regime, rows: int, root: Path, base_url: str, store_url: str | None) -> dict[str, Any]:
    """One process per shard of ``mode`` (``hand`` or ``engine``), started together; figures summed."""
    args = argparse.Namespace(concurrency=regime.concurrency, calls=bench.CALLS[regime.task], latency=regime.latency, task=regime.task)
    inputs = [f"tickets-{k}.csv" for k in range(regime.shards)] if regime.shards > 1 else ["tickets.csv"]
    share = -(-rows // len(inputs))
    children = [
        subprocess.Popen(
            bench.mode_command(mode, args, root, base_url, rows=share, data=data, store_url=store_url if regime.shards > 1 else None),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bench.checkout_env(),
        )
        for data in inputs
    ]  # fmt: skip
    results = []
    for child in children:
        out, err = child.communicate()
        if child.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return {
        "rows": sum(r["rows"] for r in results),
        "seconds": max(r["seconds"] for r in results),
        "cpu_seconds": sum(r["cpu_seconds"] for r in results),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
    }


def run_regime(name: str, rows: int, rounds: int, store_url: str | None) -> dict[str, dict[str, float]]:
    regime = REGIMES[name]
    if regime.shards > 1 and not store_url:
        raise SystemExit(f"the {name} regime needs a PostgreSQL store: --store-url or $RUNNER_STORE_URL")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _, script = bench.write_fixtures(root, rows, regime.latency, regime.task, shards=regime.shards)
        bench.compile_project(root)
        server, base_url = bench.start_server(script)
        try:
            bench.warm_server(base_url)
            samples: dict[str, list[dict[str, Any]]] = {"hand": [], "engine": []}
            for _ in range(rounds):
                for mode in samples:
                    samples[mode].append(measure(mode, regime, rows, root, base_url, store_url))
        finally:
            server.terminate()
            server.wait(timeout=10)
    return {mode: _figures(runs) for mode, runs in samples.items()}


def _figures(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "cpu_ms": statistics.median(1000 * r["cpu_seconds"] / r["rows"] for r in runs),
        "rows_s": statistics.median(r["rows"] / r["seconds"] for r in runs),
        "rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1000,10000,100000", help="row counts, comma-separated")
    parser.add_argument("--regimes", default="calc16,triage64,triage128", help=f"of {', '.join(REGIMES)}")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, interleaved; figures are medians")
    parser.add_argument("--store-url", default=os.environ.get("RUNNER_STORE_URL"), help="PostgreSQL, for fanout4")
    args = parser.parse_args()
    print("| regime | rows | floor CPU ms/row | runner CPU ms/row | CPU × floor | floor rows/s | runner rows/s "
          "| rows/s × floor | floor peak RSS MiB | runner peak RSS MiB | RSS × floor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rows in (int(n) for n in args.rows.split(",")):
        for name in args.regimes.split(","):
            started = time.monotonic()
            figures = run_regime(name, rows, args.rounds, args.store_url)
            hand, engine = figures["hand"], figures["engine"]
            print(
                f"| {name} | {rows:,} | {hand['cpu_ms']:.2f} | {engine['cpu_ms']:.2f} | {engine['cpu_ms'] / hand['cpu_ms']:.2f} "
                f"| {hand['rows_s']:.0f} | {engine['rows_s']:.0f} | {engine['rows_s'] / hand['rows_s']:.2f} "
                f"| {hand['rss_mb']:.0f} | {engine['rss_mb']:.0f} | {engine['rss_mb'] / hand['rss_mb']:.2f} |",
                flush=True,
            )
            print(f"<!-- {name} at {rows} rows took {time.monotonic() - started:.0f} s -->", file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's runner, as the modes use
    main()
