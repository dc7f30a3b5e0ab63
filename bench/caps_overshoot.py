"""How far above its cap can a batch spend? The worst billed/cap ratio this grid can find.

Each cell runs the real CLI (``runner batch``) against the loopback server, over rows whose
questions are one kind of content, with a money cap about a tenth of what all rows would
cost. Billed is what the server produced, priced at the shipped prices: every completion it
generated, including those the client had given up on or was killed before reading.

Endpoint behaviours:
  honest     usage counted with gpt-4o-mini's tokenizer (o200k_base), a short answer
  max_tokens honest prompt, completion reported as max_tokens every time
  over       completion reported as 3x max_tokens (an endpoint billing past what was allowed)
  hang       the endpoint never answers; a 3 s wall-clock cap must end the batch (its wall time is shown)
  crash      honest, but the batch is killed with kill -9 while calls are in flight, then resumed

Targets: <= 1.00 for every honest, max_tokens, crash and hang cell. Over-reporting cells may
pass the cap, by at most what the calls in flight when the first excess was seen reported;
the batch report flags it. The worst honest cell is printed last.

    .venv/bin/python bench/caps_overshoot.py            # the full grid (about 5 minutes on 2 cores)
    .venv/bin/python bench/caps_overshoot.py --quick    # concurrency 1 and 32, two contents
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner.config.prices import cost_usd, default_prices, find_price
from runner.model.server import ScriptedServer

MODEL = "gpt-4o-mini"
MAX_TOKENS = 100
CAP_USD = 0.002
WALL_CAP = 3.0

AGENT = f"""\
apiVersion: runner/v1
kind: Agent
name: reader
model: {{id: {MODEL}, max_tokens: {MAX_TOKENS}, timeout_seconds: 20, retries: 2}}
system_prompt: You read the text and answer with one short sentence. Use the calculator for sums.
tools: [calculator]
stuck: {{max_repeats: 50}}
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: read
inputs:
  text: {type: string}
agent: reader
goal: "Read this and say what it is about: {{ inputs.text }}"
"""

CONTENTS = {
    "english": lambda i: " ".join(f"The committee met on day {i} and agreed to review the quarterly plan." for _ in range(18)),
    "digits": lambda i: "\n".join(",".join(str((i * 7919 + r * 31 + c) % 100000) for c in range(8)) for r in range(24)),
    "cjk": lambda i: "".join(chr(0x4E00 + (i * 37 + k * 11) % 20000) for k in range(600)),
    "emoji": lambda i: "".join(chr(0x1F300 + (i + k * 7) % 700) for k in range(400)),
    "code": lambda i: "\n".join(f"def f{i}_{k}(x):\n    return [y ** {k} for y in range(x) if y % 3]" for k in range(14)),
}
TOOL_CALL = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "12 + 30"}}]}


def script(behaviour: str) -> dict[str, object]:
    """The server's rules: a tool call first, then an answer (two calls per row)."""
    usage = {
        "max_tokens": {"completion_tokens": MAX_TOKENS},
        "over": {"completion_tokens": 3 * MAX_TOKENS},
    }.get(behaviour)
    if behaviour == "hang":
        return {"fallback": {"hang_seconds": 60}}
    first = dict(TOOL_CALL, usage=usage) if usage else dict(TOOL_CALL)
    answer: dict[str, object] = {"content": "It is about a plan; the sum is 42.", "latency_seconds": 0.05}
    if usage:
        answer["usage"] = usage
    if behaviour == "crash":
        first["latency_seconds"] = 0.3
        answer["latency_seconds"] = 0.3
    return {"tokenizer": "o200k_base", "rules": [
        {"when": {"last_role": "user"}, "reply": first},
        {"when": {"last_role": "tool"}, "reply": answer},
    ]}


def billed(server: ScriptedServer) -> float:
    prices = default_prices()
    total = 0.0
    for model, usage in server.billed:
        price = find_price(prices, model)
        assert price is not None, model
        total += cost_usd(price, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)), 0)
    return total


def project(root: Path, content: str, rows: int) -> Path:
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d/reader.yaml").write_text(AGENT)
    (root / "tasks.d/read.yaml").write_text(TASK)
    make = CONTENTS[content]
    lines = (json.dumps({"id": f"r{i}", "text": make(i)}, ensure_ascii=False) for i in range(rows))
    (root / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def command(root: Path, concurrency: int, behaviour: str) -> list[str]:
    caps = ["--max-cost-usd", str(CAP_USD)] + (["--max-wall-seconds", str(WALL_CAP)] if behaviour == "hang" else [])
    return [
        sys.executable, "-m", "runner", "batch", "read", "--input", str(root / "rows.jsonl"),
        "--output", str(root / "out.jsonl"), "--concurrency", str(concurrency), "--progress", "none", *caps,
    ]


def env_for(server: ScriptedServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-bench-caps-0001")
    return env


def cell(concurrency: int, content: str, behaviour: str) -> tuple[float, str]:
    """One run of the grid: (ratio, note)."""
    rows = max(40, 2 * concurrency)
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(script(behaviour)) as server:
        root = project(Path(tmp), content, rows)
        argv, env = command(root, concurrency, behaviour), env_for(server)
        started = time.monotonic()
        if behaviour == "crash":
            process = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while len(server.requests) < 2 and process.poll() is None:
                time.sleep(0.01)
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
            process.wait()
        result = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        took = time.monotonic() - started
        if result.returncode not in (0, 1, 3):
            raise SystemExit(f"{behaviour}/{content}/{concurrency}: exit {result.returncode}\n{result.stderr[-2000:]}")
        spent = billed(server)
        note = f"billed ${spent:.5f} of ${CAP_USD}"
        if behaviour == "hang":
            elapsed = json.loads(next((root / "reports/read").glob("batch-*/batch_report.json")).read_text())["run"]
            note += f"; ended after {elapsed['elapsed_seconds']:.1f}s for a {WALL_CAP:g}s wall cap ({took:.1f}s with start-up)"
        if behaviour == "over":
            bound = CAP_USD + concurrency * _excess_per_call()
            note += f"; bound {bound / CAP_USD:.2f} (cap + {concurrency} calls in flight); {'flagged' if _flagged(root) else 'NOT FLAGGED'}"
        return spent / CAP_USD, note


def _excess_per_call() -> float:
    """What one over-reporting call adds beyond its reservation, in USD."""
    price = find_price(default_prices(), MODEL)
    assert price is not None
    return cost_usd(price, 0, 2 * MAX_TOKENS, 0)


def _flagged(root: Path) -> bool:
    """Whether the run store recorded a warning about usage above the reservation."""
    import sqlite3

    db = sqlite3.connect(root / ".runner/runs.sqlite3")
    rows = db.execute("SELECT record_json FROM steps").fetchall()
    return any("above the reserved worst case" in (r[0] or "") for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="concurrency 1 and 32, english and digits only")
    args = parser.parse_args()
    concurrencies = (1, 32) if args.quick else (1, 32, 128)
    contents = ("english", "digits") if args.quick else tuple(CONTENTS)
    behaviours = ("honest", "max_tokens", "over", "hang", "crash")
    print(f"{'behaviour':<11} {'content':<8} {'conc':>4}  {'ratio':>6}  note", flush=True)
    worst_honest: tuple[float, str] = (0.0, "")
    worst_over: tuple[float, str] = (0.0, "")
    for behaviour in behaviours:
        for content in contents:
            for concurrency in concurrencies:
                ratio, note = cell(concurrency, content, behaviour)
                name = f"{behaviour}/{content}/c{concurrency}"
                print(f"{behaviour:<11} {content:<8} {concurrency:>4}  {ratio:6.2f}  {note}", flush=True)
                if behaviour == "over":
                    worst_over = max(worst_over, (ratio, name))
                else:
                    worst_honest = max(worst_honest, (ratio, name))
    print(f"\nworst over-reporting cell: {worst_over[1]} ratio {worst_over[0]:.2f} (bounded by calls in flight; flagged)")
    print(f"worst honest, crash or hang cell: {worst_honest[1]} ratio {worst_honest[0]:.2f} (target <= 1.00)")


if __name__ == "__main__":
    main()
