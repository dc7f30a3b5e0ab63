"""Batch throughput: the batch engine vs a hand-written asyncio openai-SDK loop, same concurrency.

Every mode sends the same requests to the same loopback Chat Completions server
(:mod:`runner.model.server`, in its own process, with a fixed latency per call), so the
physical limit is ``concurrency / (calls per row * latency)`` rows per second. Modes, each
in a fresh process so peak RSS is its own:

- ``hand``: N worker coroutines pulling rows, one ``AsyncOpenAI`` client (the baseline);
- ``engine``: ``run_batch`` + journal + ``TaskExecutor`` -> ``runner.runs.execute.execute_task``
  (the real thing: a task YAML, the agent loop, the run store);
- ``engine-sdk``: ``run_batch`` + journal with the hand loop's SDK call as executor (the
  engine's own overhead, without the agent loop);
- ``engine-sleep``: ``run_batch`` + journal with an executor that only sleeps the latency
  per call (no HTTP): the engine's scheduling against the physical limit itself;
- ``run``: the first ``--run-rows`` rows one ``runner run`` each, in turn (the command as the
  command line runs it, minus interpreter start-up: project, store, client, run, report):
  what a row costs when a shell loop calls ``runner run`` instead of ``runner batch``;
- ``cli``: ``runner batch`` itself as a process (``--restart`` each time): the command a user
  runs, with its start-up, output file and batch report; measured from outside (``wait4``).

Modes run in ``--rounds`` rounds, every mode once per round in turn, so load on the machine
hits them alike; each figure is the median over the rounds. Printed per mode: rows/s,
fraction of the physical limit, ratio to ``hand``, CPU per row and its ratio to ``hand``,
peak RSS and its ratio to ``hand``, and how much it grew while rows ran (``ru_maxrss``: flat
memory means the growth does not scale with ``--rows``; ``--tracemalloc`` adds the Python
heap peak and slows every mode); then the peak RSS ratios against the target (<= 1.5x, and flat in the number of rows).
Only the row phase is timed for the in-process modes (for the engine: ingesting the input,
running, journaling), not interpreter start, imports or project loading; ``cli`` is timed
whole. The project is compiled once before the modes run (as its first run would leave it),
so each mode loads it from the cache. No mode imports what only the set-up needs (YAML).

``--count`` runs ``hand`` and ``engine`` once each and prints, instead of timings, what the
row phase did per row and per model call: SQLite statements by verb (from a trace callback
on every connection the process opens; ``BEGIN``/``COMMIT`` depend on how many rows share a
group commit, the rest do not) and JSON encodes (``json.JSONEncoder.encode`` calls, the
SDK's request bodies included). These figures do not depend on the machine's load.

The loopback server and the SDK's per-request connection handling (the server speaks
HTTP/1.0, so every call opens a connection) can themselves stay well under the limit;
the ratio to ``hand`` is the engine's figure of merit.

    .venv/bin/python bench/batch_throughput.py [--rows 2000] [--concurrency 64] [--latency 0.1] [--run-rows 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

MODEL = "gpt-4o-mini"
SYSTEM = "You triage support tickets: answer with a category."
REPLY = "category: hardware"
AGENT = {
    "apiVersion": "runner/v1",
    "kind": "Agent",
    "name": "triager",
    "model": {"id": MODEL, "max_tokens": 50, "retries": 0},
    "system_prompt": SYSTEM,
}
TASK = {
    "apiVersion": "runner/v1",
    "kind": "Task",
    "name": "triage",
    "inputs": {"subject": {"type": "string"}},
    "agent": "triager",
    "goal": "Triage this ticket: {{ inputs.subject }}",
}
CALC_SYSTEM = "You are careful with arithmetic. Use the calculator for every step."
CALC_GOAL = "Ticket {{ inputs.subject }}: what is 3 + 4, times 6, plus 8?"
CALC_AGENT = {
    "apiVersion": "runner/v1",
    "kind": "Agent",
    "name": "calc",
    "model": {"id": MODEL, "max_tokens": 200, "retries": 0},
    "system_prompt": CALC_SYSTEM,
    "tools": ["calculator"],
}
CALC_TASK = {
    "apiVersion": "runner/v1",
    "kind": "Task",
    "name": "calc",
    "inputs": {"subject": {"type": "string"}},
    "agent": "calc",
    "goal": CALC_GOAL,
}
CALC_RULES: list[dict[str, Any]] = [  # three calculator calls, then the answer: 4 model calls a row
    {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "3 + 4"}}]}},
    {"when": {"last_message": "= 7$"}, "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "7 * 6"}}]}},
    {"when": {"last_message": "= 42$"}, "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "42 + 8"}}]}},
    {"reply": {"content": "3 + 4 = 7, times 6 = 42, plus 8 = 50."}},
]
CALLS = {"triage": 1, "calc": 4}
"""Model calls per row of each task."""


# --- setup (parent process) ---------------------------------------------------------------


def write_fixtures(root: Path, rows: int, latency: float, task: str = "triage", shards: int = 1) -> tuple[Path, Path]:
    """The project (both agents and tasks), the input CSV (and ``shards`` slices of it,
    ``tickets-<k>.csv``) and the server script for ``task``, under ``root``."""
    import yaml  # here only: the measured modes must not carry it

    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d/triager.yaml").write_text(yaml.safe_dump(AGENT), encoding="utf-8")
    (root / "tasks.d/triage.yaml").write_text(yaml.safe_dump(TASK), encoding="utf-8")
    (root / "agents.d/calc.yaml").write_text(yaml.safe_dump(CALC_AGENT), encoding="utf-8")
    (root / "tasks.d/calc.yaml").write_text(yaml.safe_dump(CALC_TASK), encoding="utf-8")
    data = root / "tickets.csv"
    slices = [root / f"tickets-{k}.csv" for k in range(shards)] if shards > 1 else []
    with contextlib.ExitStack() as files:
        writers = [csv.writer(files.enter_context(path.open("w", encoding="utf-8", newline=""))) for path in (data, *slices)]
        for writer in writers:
            writer.writerow(["id", "subject"])
        for i in range(rows):
            line = [f"T{i:06d}", f"printer {i} is jammed"]
            writers[0].writerow(line)
            if slices:
                writers[1 + i % shards].writerow(line)
    script = root / "script.json"
    if task == "calc":
        rules = [dict(r, reply=dict(r["reply"], latency_seconds=latency)) for r in CALC_RULES]
        script.write_text(json.dumps({"rules": rules}), encoding="utf-8")
    else:
        script.write_text(json.dumps({"fallback": {"content": REPLY, "latency_seconds": latency}}), encoding="utf-8")
    return data, script


def compile_project(root: Path) -> None:
    """The project as a first run leaves it: ``.runner/`` with the compiled project cache, so
    every mode loads an unchanged project (from the cache) rather than a brand-new one."""
    from runner.config.project import load_project_or_raise

    (root / ".runner").mkdir()
    load_project_or_raise(root)


def start_server(script: Path) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "runner.model.server", "--script", str(script), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=checkout_env(),
    )
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def warm_server(base_url: str) -> None:
    """One request before any mode is timed: the server's first one loads its tokenizer."""
    import urllib.request

    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "warm up"}]}).encode()
    request = urllib.request.Request(f"{base_url}/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def run_mode(mode: str, args: argparse.Namespace, root: Path, base_url: str) -> dict[str, Any]:
    if mode == "cli":
        return run_cli(args, root, base_url)
    command = [sys.executable, __file__, "--child", mode, "--root", str(root), "--base-url", base_url]
    command += ["--rows", str(args.rows), "--concurrency", str(args.concurrency), "--calls", str(args.calls)]
    command += ["--latency", str(args.latency), "--run-rows", str(args.run_rows), "--task", args.task]
    command += ["--tracemalloc"] if args.tracemalloc else []
    command += ["--count"] if args.count else []
    command += ["--profile", f"{args.profile}.{mode}"] if args.profile else []
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=checkout_env())
    if done.returncode != 0:
        raise SystemExit(f"mode {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def mode_command(mode: str, args: argparse.Namespace, root: Path, base_url: str, *, rows: int, data: str,
                 store_url: str | None = None) -> list[str]:
    """The command line of one measured process of ``mode`` over the input file ``data`` (a shard's, in a fan-out)."""
    command = [sys.executable, __file__, "--child", mode, "--root", str(root), "--base-url", base_url, "--rows", str(rows)]
    command += ["--concurrency", str(args.concurrency), "--calls", str(args.calls), "--latency", str(args.latency)]
    command += ["--task", args.task, "--input", data] + (["--store-url", store_url] if store_url else [])
    return command


def checkout_env() -> dict[str, str]:
    """The environment of a measured process: this checkout's ``runner`` first on the path (not
    whichever one the interpreter's environment has installed)."""
    checkout = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)}


def run_cli(args: argparse.Namespace, root: Path, base_url: str) -> dict[str, Any]:
    """``runner batch`` as a user runs it, in its own process; peak RSS and CPU from ``wait4``."""
    command = [sys.executable, "-m", "runner", "batch", "triage", "--input", "tickets.csv", "--id-column", "id"]
    command += ["--output", "out.jsonl", "--concurrency", str(args.concurrency), "--restart", "--progress", "none"]
    command += ["--base-url", base_url]
    env = {**checkout_env(), "OPENAI_API_KEY": "sk-bench"}
    started = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        child = subprocess.Popen(command, cwd=root, env=env, stdout=sink, stderr=subprocess.PIPE)
        assert child.stderr is not None
        errors = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"runner batch exited {child.returncode}:\n{errors.decode(errors='replace')[-3000:]}")
    return {
        "rows": args.rows, "seconds": time.perf_counter() - started, "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "rss_before_mb": 0.0, "peak_rss_mb": usage.ru_maxrss / 1024, "heap_peak_mb": None,
    }


# --- modes (child process) ----------------------------------------------------------------


class WorkTally:
    """SQLite statements (by verb) and JSON encodes in this process since :meth:`restart`:
    ``--count`` installs one before the mode imports runner, the mode restarts it when its
    clock starts."""

    def __init__(self) -> None:
        import sqlite3

        self.statements: dict[str, int] = {}
        self.json_encodes = 0
        connect, encode = sqlite3.connect, json.JSONEncoder.encode

        def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            connection = connect(*args, **kwargs)
            connection.set_trace_callback(self._statement)
            return connection

        def counted_encode(encoder: json.JSONEncoder, value: Any) -> str:
            self.json_encodes += 1
            return encode(encoder, value)

        sqlite3.connect = traced_connect  # type: ignore[assignment]
        json.JSONEncoder.encode = counted_encode  # type: ignore[method-assign]

    def _statement(self, sql: str) -> None:
        verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else "?"
        self.statements[verb] = self.statements.get(verb, 0) + 1

    def restart(self) -> None:
        self.statements, self.json_encodes = {}, 0

    def figures(self) -> dict[str, Any]:
        return {"statements": dict(self.statements), "json_encodes": self.json_encodes}


TALLY: WorkTally | None = None
"""Set by ``--count`` in a child process."""


def clock() -> tuple[float, float]:
    """Wall and CPU time now, where a mode's row phase starts (the tally, if any, starts there too)."""
    if TALLY is not None:
        TALLY.restart()
    return time.perf_counter(), time.process_time()



def sdk_call(base_url: str, calls: int, task: str = "triage") -> tuple[Callable[[str], Awaitable[str]], Any]:
    """One row as a hand-written loop does it: ``calls`` chat completions in a conversation
    (for ``calc``: the calculator conversation, tools run by hand, until the answer)."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    if task == "calc":
        return calc_row(client), client

    async def row(subject: str) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Triage this ticket: {subject}"},
        ]
        answer = ""
        for _ in range(calls):
            response = await client.chat.completions.create(model=MODEL, messages=messages, max_tokens=50)  # type: ignore[arg-type]
            answer = response.choices[0].message.content or ""
            messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Go on."}]
        return answer

    return row, client


def calc_row(client: Any) -> Callable[[str], Awaitable[str]]:
    """The ``calc`` task by hand: the SDK, the tools list, the loop, the calculator."""
    from runner.tools.builtins.calculator import evaluate
    from runner.tools.registry import default_registry

    tools = default_registry().openai_tools(["calculator"])
    goal = CALC_GOAL.replace("{{ inputs.subject }}", "{}")

    async def row(subject: str) -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": CALC_SYSTEM}, {"role": "user", "content": goal.format(subject)},
        ]
        while True:
            response = await client.chat.completions.create(
                model=MODEL, messages=messages, tools=tools, tool_choice="auto", max_tokens=200,  # type: ignore[arg-type]
            )
            message = response.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append({"role": "assistant", "content": message.content,
                             "tool_calls": [c.model_dump() for c in message.tool_calls]})  # fmt: skip
            for call in message.tool_calls:
                expression = json.loads(call.function.arguments)["expression"]  # type: ignore[union-attr]
                messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{expression} = {evaluate(expression)!r}"})

    return row


async def hand_loop(
    root: Path, base_url: str, concurrency: int, calls: int, task: str = "triage", data: str = "tickets.csv"
) -> tuple[int, float, float, float]:
    """Rows done, seconds, CPU seconds, and RSS (MiB) before the first row."""
    row, client = sdk_call(base_url, calls, task)
    before = rss_mb()
    started, cpu = clock()
    with (root / data).open(encoding="utf-8", newline="") as handle:
        rows = iter(csv.DictReader(handle))
        done = 0

        async def worker() -> None:
            nonlocal done
            for item in rows:  # workers share one iterator: a fixed pool, like the engine
                await row(item["subject"])
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    await client.close()
    return done, seconds, cpu, before


async def engine_loop(
    root: Path, base_url: str, concurrency: int, calls: int, *, executor_kind: str, latency: float,
    task_name: str = "triage", data: str = "tickets.csv", store_url: str | None = None,
) -> tuple[int, float, float, float]:
    """Rows done, seconds and CPU seconds (reading the input included, imports and project
    loading not), RSS before. With ``store_url`` the run store and the journal are in that
    PostgreSQL database (the journal named after ``data``, so shards of a fan-out each have one)."""

    from runner.batch.engine import batch_budget, run_batch
    from runner.batch.executor import TaskExecutor
    from runner.batch.inputs import InputSource, file_sha256, read_rows
    from runner.batch.journal_open import open_batch_journal
    from runner.batch.ratelimit import SharedRateLimiter
    from runner.config.project import load_project_or_raise
    from runner.config.specs import Caps
    from runner.core.results import RunResult
    from runner.runs.options import RunOptions

    project = load_project_or_raise(root)
    task = project.task_for(task_name)
    source = InputSource.open(root / data, id_column="id")
    gate = SharedRateLimiter()
    options = RunOptions(
        write_report=False, base_url_override=base_url, api_key="sk-bench",
        store_path=None if store_url else root / "runs.sqlite3", store_url=store_url,
    )
    journal = open_batch_journal(
        root / f"journal-{executor_kind}-{Path(data).stem}.sqlite3",
        task=task.name,
        input_path=source.path,
        input_sha256=file_sha256(source.path),
        options=source.options(),
        restart=True,
        database_url=store_url,
    )
    closing: Callable[[], Awaitable[None]]
    if executor_kind == "sdk":
        row, client = sdk_call(base_url, calls, task_name)

        async def executor(inputs: dict[str, Any], opts: RunOptions) -> RunResult:
            return RunResult(str(opts.run_id), task.name, "completed", output=await row(inputs["subject"]))

        closing = client.close
    elif executor_kind == "sleep":

        async def executor(inputs: dict[str, Any], opts: RunOptions) -> RunResult:
            await asyncio.sleep(latency * calls)
            return RunResult(str(opts.run_id), task.name, "completed", output=REPLY)

        async def closing() -> None:
            pass
    else:
        task_executor = TaskExecutor(project, task, rate_gate=gate, store_path=options.store_path, store_url=store_url)
        executor, closing = task_executor, task_executor.aclose  # type: ignore[assignment]
    import openai  # noqa: F401  (imported before the clock starts, as the hand loop's is)

    before = rss_mb()
    started, cpu = clock()
    with journal:
        summary = await run_batch(
            read_rows(source, task.inputs),
            executor,
            journal=journal,
            budget=batch_budget(Caps()),
            concurrency=concurrency,
            rate_gate=gate,
            base_options=options,
        )
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    await closing()
    if summary.counts["done"] != summary.total:
        failed = next((r.error for r in journal.records() if r.status != "done"), None)
        raise SystemExit(f"not every row completed: {summary.counts}; first error: {failed}")
    return summary.counts["done"], seconds, cpu, before


def run_commands(root: Path, base_url: str, rows: int) -> tuple[int, float, float, float]:
    """The first ``rows`` rows, one ``runner run`` command each, in turn: rows done, seconds,
    CPU seconds, RSS before."""
    import contextlib
    import os

    from runner.cli import cli

    os.environ["OPENAI_API_KEY"] = "sk-bench"
    with (root / "tickets.csv").open(encoding="utf-8", newline="") as handle:
        subjects = [item["subject"] for _, item in zip(range(rows), csv.DictReader(handle), strict=False)]
    before = rss_mb()
    started, cpu = clock()
    for subject in subjects:
        argv = ["run", "triage", "--root", str(root), "--base-url", base_url, "-i", f"subject={subject}"]
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            try:
                cli.main(args=argv, prog_name="runner", standalone_mode=False)
            except SystemExit as exit_:
                if exit_.code not in (0, None):
                    raise SystemExit(f"runner run exited {exit_.code}") from None
    return len(subjects), time.perf_counter() - started, time.process_time() - cpu, before


def child(args: argparse.Namespace) -> None:
    global TALLY
    if args.count:
        TALLY = WorkTally()
    if args.tracemalloc:
        tracemalloc.start()
    if args.child == "hand":
        done, seconds, cpu, before = asyncio.run(
            hand_loop(args.root, args.base_url, args.concurrency, args.calls, args.task, args.input)
        )
    elif args.child == "run":
        done, seconds, cpu, before = run_commands(args.root, args.base_url, args.run_rows)
    else:
        kind = {"engine": "task", "engine-sdk": "sdk", "engine-sleep": "sleep"}[args.child]
        run = engine_loop(
            args.root, args.base_url, args.concurrency, args.calls, executor_kind=kind, latency=args.latency,
            task_name=args.task, data=args.input, store_url=args.store_url,
        )
        if args.profile:  # the whole child under cProfile (slower): where its CPU goes, not how fast it is
            import cProfile

            with cProfile.Profile() as profiler:
                done, seconds, cpu, before = asyncio.run(run)
            profiler.dump_stats(args.profile)
        else:
            done, seconds, cpu, before = asyncio.run(run)
    heap = tracemalloc.get_traced_memory()[1] / 2**20 if args.tracemalloc else None
    result = {
        "rows": done, "seconds": seconds, "cpu_seconds": cpu, "rss_before_mb": before, "peak_rss_mb": rss_mb(),
        "heap_peak_mb": heap, **(TALLY.figures() if TALLY else {}),
    }
    print(json.dumps(result))


def rss_mb() -> float:
    """Peak resident set size of this process so far, MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- main ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.1, help="server latency per call, seconds")
    parser.add_argument("--calls", type=int, default=None, help="model calls per row of the SDK modes (default: the task's)")
    parser.add_argument("--task", choices=sorted(CALLS), default="triage", help="triage: 1 call a row; calc: 4 (3 tool calls)")
    parser.add_argument("--modes", default="hand,engine-sdk,engine,engine-sleep,run,cli")
    parser.add_argument("--rounds", type=int, default=3, help="every mode runs once per round; figures are medians")
    parser.add_argument("--run-rows", type=int, default=50, help="rows the 'run' mode runs, one `runner run` each")
    parser.add_argument("--tracemalloc", action="store_true", help="also report the Python heap peak (slower)")
    parser.add_argument("--count", action="store_true",
                        help="print SQLite statements and JSON encodes per row of 'hand' and 'engine' (one round), not timings")
    parser.add_argument("--profile", metavar="PATH", help="run the engine modes under cProfile, stats to PATH.<mode> "
                        "(read with python -m pstats); their timings are then not comparable")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--input", default="tickets.csv", help=argparse.SUPPRESS)
    parser.add_argument("--store-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.calls = args.calls or CALLS[args.task]
    if args.child:
        return child(args)
    modes = ["hand", "engine"] if args.count else args.modes.split(",")
    args.rounds = 1 if args.count else args.rounds
    if {"engine", "run", "cli"} & set(modes) and args.calls != CALLS[args.task]:
        raise SystemExit(f"--calls must be {CALLS[args.task]} with the 'engine', 'run' and 'cli' modes (the task's calls a row)")
    if {"run", "cli"} & set(modes) and args.task != "triage":
        raise SystemExit("the 'run' and 'cli' modes run the triage task")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _, script = write_fixtures(root, args.rows, args.latency, args.task)
        compile_project(root)
        server, base_url = start_server(script)
        try:
            warm_server(base_url)
            rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
            for _ in range(args.rounds):  # interleaved: each round runs every mode once
                for mode in modes:
                    rounds[mode].append(run_mode(mode, args, root, base_url))
            results = {mode: _median(samples) for mode, samples in rounds.items()}
        finally:
            server.terminate()
            server.wait(timeout=10)
    if args.count:
        return report_counts(args, {mode: samples[0] for mode, samples in rounds.items()})
    report(args, results)


def _median(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds (rows/s from the median time)."""
    return {
        key: statistics.median(s[key] for s in samples) if samples[0][key] is not None else None
        for key in samples[0]
        if not isinstance(samples[0][key], dict)
    }


def report_counts(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    """``--count``: statements and encodes per row and per model call, by mode."""
    print(f"rows {args.rows}, {args.calls} call(s)/row, task {args.task}: per row (per call)")
    for mode, r in results.items():
        statements = r["statements"]
        grouping = sum(statements.get(verb, 0) for verb in ("BEGIN", "COMMIT"))
        steady = sum(statements.values()) - grouping
        print(f"{mode:8s}: SQLite statements {_per_row(steady, r['rows'], args.calls)} + BEGIN/COMMIT "
              f"{grouping / r['rows']:.2f}; JSON encodes {_per_row(r['json_encodes'], r['rows'], args.calls)}")
        verbs = [f"{verb} {n / r['rows']:.2f}" for verb, n in sorted(statements.items()) if verb not in ("BEGIN", "COMMIT")]
        if verbs:
            print(f"          {', '.join(verbs)}")


def _per_row(count: int, rows: int, calls: int) -> str:
    return f"{count / rows:6.2f} ({count / rows / calls:5.2f})"


def report(args: argparse.Namespace, results: dict[str, dict[str, Any]]) -> None:
    limit = args.concurrency / (args.calls * args.latency)
    print(f"rows {args.rows}, concurrency {args.concurrency}, {args.calls} call(s)/row, latency {args.latency}s, "
          f"median of {args.rounds} interleaved round(s)")
    print(f"physical limit: {limit:.1f} rows/s; the 'run' mode runs {args.run_rows} rows one at a time")
    hand = results.get("hand")
    for mode, r in results.items():
        rate, cpu = r["rows"] / r["seconds"], r["cpu_seconds"] / r["rows"]
        ratio = f"{rate / (hand['rows'] / hand['seconds']):.2f}x hand" if hand else "-"
        heap = f", heap peak {r['heap_peak_mb']:.1f} MiB" if r["heap_peak_mb"] is not None else ""
        print(
            f"{mode:12s}: {rate:8.1f} rows/s = {rate / limit:5.1%} of the limit, {ratio:>10s}, "
            f"{cpu * 1000:6.2f} ms CPU/row{_ratio(cpu, hand, 'cpu')}, "
            f"peak RSS {r['peak_rss_mb']:.1f} MiB{_ratio(r['peak_rss_mb'], hand, 'rss')}"
            f"{_growth(r)}{heap}"
        )
    if hand:
        print("peak RSS against the hand-written loop (target <= 1.5x, flat in rows)")
        names = {
            "engine": "runner batch's engine (in process)",
            "cli": "runner batch (the command)",
            "engine-sdk": "the engine with the SDK call",
            "run": "runner run per row (in process)",
        }
        for mode, name in names.items():
            if mode in results:
                peak = results[mode]["peak_rss_mb"]
                print(f"  {name:36s}: {peak:6.1f} / {hand['peak_rss_mb']:.1f} MiB = {peak / hand['peak_rss_mb']:.2f}x")


def _growth(r: dict[str, Any]) -> str:
    if not r["rss_before_mb"]:
        return " (whole process)"
    return f" (+{r['peak_rss_mb'] - r['rss_before_mb']:.0f} during the rows)"


def _ratio(value: float, hand: dict[str, Any] | None, what: str) -> str:
    """`` (1.23x hand)`` for CPU per row or peak RSS, when the hand loop ran."""
    if not hand:
        return ""
    base = hand["cpu_seconds"] / hand["rows"] if what == "cpu" else hand["peak_rss_mb"]
    return f" ({value / base:.2f}x hand)"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's runner, as the modes use
    main()
