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

One more row, ``budget``: a daily budget (``kind: Budget``) shared on one PostgreSQL store by two
``runner run`` processes (an agent that keeps calling the calculator) and the two shards of a
fan-out (each a process running what the Airflow shard task runs, at concurrency 32), all
started at once; the ratio is billed / the budget's limit. PostgreSQL: ``--store-url``
(``$RUNNER_STORE_URL``), else a private cluster (``initdb``, as the tests make one); without
PostgreSQL the row says so.

Targets: <= 1.00 for every honest, max_tokens, crash, hang and budget cell. Over-reporting cells may
pass the cap, by at most what the calls in flight when the first excess was seen reported;
the batch report flags it. The worst honest cell is printed last.

    .venv/bin/python bench/caps_overshoot.py            # the full grid (about 5 minutes on 2 cores)
    .venv/bin/python bench/caps_overshoot.py --quick    # concurrency 1 and 32, two contents
    .venv/bin/python bench/caps_overshoot.py --only-budget [--store-url postgresql://...]
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

REPO = Path(__file__).resolve().parents[1]
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
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))  # this checkout's runner
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
        spent = server.billed_usd()
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
    parser.add_argument("--only-budget", action="store_true", help="only the budget row")
    parser.add_argument("--store-url", default=os.environ.get("RUNNER_STORE_URL"), help="PostgreSQL, for the budget row")
    args = parser.parse_args()
    concurrencies = (1, 32) if args.quick else (1, 32, 128)
    contents = ("english", "digits") if args.quick else tuple(CONTENTS)
    behaviours = () if args.only_budget else ("honest", "max_tokens", "over", "hang", "crash")
    print(f"{'behaviour':<11} {'content':<8} {'conc':>4}  {'ratio':>6}  note", flush=True)
    worst_honest: tuple[float, str] = (0.0, "")
    worst_over: tuple[float, str] = (0.0, "")
    budget = shared_budget_row(args.store_url)
    if budget is not None:
        ratio, note = budget
        print(f"{'budget':<11} {'digits':<8} {32:>4}  {ratio:6.2f}  {note}", flush=True)
        worst_honest = max(worst_honest, (ratio, "budget/digits/c32"))
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
    if worst_over[1]:
        print(f"\nworst over-reporting cell: {worst_over[1]} ratio {worst_over[0]:.2f} (bounded by calls in flight; flagged)")
    print(f"worst honest, crash, hang or budget cell: {worst_honest[1]} ratio {worst_honest[0]:.2f} (target <= 1.00)")


# --- the budget row: runs and fan-out shards under one daily budget on PostgreSQL ---------------

BUDGET_USD = 0.02
BUDGET = f"""\
apiVersion: runner/v1
kind: Budget
name: daily
max_cost_usd: {BUDGET_USD}
window: day
timezone: Europe/Berlin
"""
ADDER = f"""\
apiVersion: runner/v1
kind: Agent
name: adder
model: {{id: {MODEL}, max_tokens: {MAX_TOKENS}}}
system_prompt: You add numbers with the calculator.
tools: [calculator]
stuck: {{max_repeats: 100}}
---
apiVersion: runner/v1
kind: Task
name: add
inputs:
  data: {{type: string}}
agent: adder
goal: "Add up these figures: {{{{ inputs.data }}}}"
"""
ADDER_CALLS = 400
SHARD = """\
import json, sys
from pathlib import Path
from runner.airflow.execution import run_batch_for_airflow
from runner.airflow.options import typed_options
from runner.airflow.plan import FanoutPlan, count_input_rows, plan_shards

root, index, store_url, base_url = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
options = typed_options({"id_column": "id", "concurrency": 32})
plan = FanoutPlan("read", root, root / "rows.jsonl", root / "work", options, key="bench/run/fanout", store_url=store_url)
project, spec = plan.load()
total, sha256 = count_input_rows(project, spec, plan)
shard = plan_shards(total, sha256, num_shards=2, shard_size=None)[index]
request = plan.request(shard, model_base_url=base_url, api_key="sk-bench-caps-0001")
print(json.dumps(run_batch_for_airflow("read", root=root, request=request)))
"""


def budget_script() -> dict[str, object]:
    """The fan-out's rows as in the grid (honest), and an adder that keeps calling the calculator."""
    rules = script("honest")["rules"]
    assert isinstance(rules, list)
    adder = [{"when": {"system": "add numbers"}, "times": 1,
              "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} + {i * 7}"}}],
                        "latency_seconds": 0.05}} for i in range(ADDER_CALLS)]  # fmt: skip
    return {"tokenizer": "o200k_base", "rules": [*adder, *rules], "fallback": "Done."}


def shared_budget_row(store_url: str | None) -> tuple[float, str] | None:
    """(billed / limit, note) of the budget row; ``None`` (after saying why) without PostgreSQL."""
    cluster = None
    if store_url is None:
        sys.path.insert(0, str(REPO))
        from tests.postgres import Cluster

        try:
            cluster = Cluster()
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"{'budget':<11} {'digits':<8} {32:>4}  {'-':>6}  skipped: no PostgreSQL ({exc})", flush=True)
            return None
        store_url = _fresh_database(cluster.admin_url)
    try:
        return _budget_cell(store_url)
    finally:
        if cluster is not None:
            cluster.stop()


def _fresh_database(admin_url: str) -> str:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("CREATE DATABASE bench_budget")
    head, sep, query = admin_url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/bench_budget{sep}{query}"


def _budget_cell(store_url: str) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(budget_script()) as server:
        root = project(Path(tmp), "digits", 200)
        (root / "agents.d/adder.yaml").write_text(ADDER)
        (root / "budgets.d").mkdir()
        (root / "budgets.d/daily.yaml").write_text(BUDGET)
        env = {**env_for(server), "RUNNER_STORE_URL": store_url}
        figures = ",".join(str(i % 10) for i in range(1500))
        run = [sys.executable, "-m", "runner", "run", "add", "--input", f"data={figures}", "--no-report", "--json"]
        shard = [sys.executable, "-c", SHARD, str(root)]
        argvs = [run, run, [*shard, "0", store_url, server.base_url], [*shard, "1", store_url, server.base_url]]
        logs = [(root / f"p{i}.out", root / f"p{i}.err") for i in range(len(argvs))]  # files: a full pipe would stall one
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for argv, (out, err) in zip(argvs, logs, strict=True):
                with out.open("wb") as stdout, err.open("wb") as stderr:  # the child keeps its own copies
                    processes.append(subprocess.Popen(argv, cwd=root, env=env, stdout=stdout, stderr=stderr))
            codes = [process.wait(timeout=600) for process in processes]
        finally:  # a hung process (or a failed start) leaves none running past the bench
            for process in processes:
                process.kill()
                process.wait()
        ended = [(code, out.read_text(), err.read_text()) for code, (out, err) in zip(codes, logs, strict=True)]
        if codes != [3, 3, 0, 0]:
            details = "\n".join(err[-1500:] for _, _, err in ended)
            raise SystemExit(f"budget: exits {codes} (expected 3, 3 for the runs and 0, 0 for the shards)\n{details}")
        shards = [json.loads(out.splitlines()[-1]) for _, out, _ in ended[2:]]
        spent = server.billed_usd()
        done, not_run = sum(s["done"] for s in shards), sum(s["skipped"] for s in shards)
        runs_spent = sum(json.loads(out.splitlines()[-1])["cost_usd"] for _, out, _ in ended[:2])
        note = (f"billed ${spent:.5f} of a ${BUDGET_USD} daily budget; 2 runs capped (${runs_spent:.5f}), 2 shards: "
                f"{done} rows done, {not_run} not run (budget) (${sum(s['cost_usd'] for s in shards):.5f}); PostgreSQL")  # fmt: skip
        return spent / BUDGET_USD, note


if __name__ == "__main__":
    main()
