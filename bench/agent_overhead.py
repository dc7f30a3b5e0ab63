"""Client overhead of runner against a hand-written openai-SDK loop (the floor).

Both drive the same conversation (two calculator tool calls, then an answer: 3 model calls)
against the same loopback Chat Completions server, which runs in its own process, so only
client work is measured. Every figure is printed with its ratio to the floor measured in
the same run; ratios, not absolute times, are what to compare across machines.

- **agent loop**: ``execute_task`` with a shared store and model pool vs the hand loop with
  a shared client, many tasks in one process (target: CPU <= 1.2x, prompt tokens <= 1.0x).
- **runner run, per task**: everything ``runner run calc`` does once its modules are
  imported (parse the command line, load the project, open the store and a client, run,
  write the report, close), called in-process once per task, vs the floor doing what a
  hand-written script does per task (a new ``AsyncOpenAI`` client, the loop, close)
  (target: CPU <= 1.5x).
- **runner run, one process per task**: ``python -m runner run calc`` vs
  ``python floor.py``, each a fresh interpreter: CPU and peak RSS per process
  (bound: peak RSS < 1.5x; memory is a bound, not a target to trade clarity for); also
  ``runner run --no-report``, to show what writing the three report formats adds (the floor
  writes none).
- **start-up**: ``runner validate`` and ``runner list`` on the same project and on this
  repository's own project, wall seconds (target: <= 0.3 s), with ``runner --help`` for scale.

Child processes run as Python does by default (writing bytecode caches), and each is run
once before it is measured; rounds alternate runner and floor so load on the machine hits
both alike.

    .venv/bin/python bench/agent_overhead.py [--tasks 30] [--processes 10] [--latency 0.0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

SYSTEM = "You are careful with arithmetic. Use the calculator for every sum."
GOAL = "What is (3 + 4) * 6, and then that plus 8?"
SCRIPT = {
    "rules": [
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "(3 + 4) * 6"}}]}},
        {"when": {"last_message": "= 42$"}, "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "42 + 8"}}]}},
        {"reply": {"content": "(3 + 4) * 6 = 42, and 42 + 8 = 50."}},
    ]
}
API_KEY = "sk-bench"

# The floor as a script: what someone writes by hand with the openai SDK. Its calculator
# walks the expression's syntax tree (the server only ever asks for + - * / on numbers).
FLOOR_SCRIPT = '''
import ast, asyncio, json, operator, sys
from openai import AsyncOpenAI

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calc(node):
    if isinstance(node, ast.Expression):
        return calc(node.body)
    if isinstance(node, ast.Constant):
        return node.value
    return OPS[type(node.op)](calc(node.left), calc(node.right))


async def main(base_url, system, goal, tools):
    client = AsyncOpenAI(base_url=base_url, api_key="KEY", max_retries=0)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": goal}]
    while True:
        response = await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=tools, tool_choice="auto", max_tokens=200
        )
        message = response.choices[0].message
        if not message.tool_calls:
            print(message.content)
            break
        messages.append({"role": "assistant", "content": message.content,
                         "tool_calls": [c.model_dump() for c in message.tool_calls]})
        for call in message.tool_calls:
            expression = json.loads(call.function.arguments)["expression"]
            value = calc(ast.parse(expression, mode="eval"))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{expression} = {value!r}"})
    await client.close()


asyncio.run(main(*sys.argv[1:4], json.loads(sys.argv[4])))
'''.replace("KEY", API_KEY)


def write_project(root: Path, latency: float) -> Path:
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    agent = {
        "apiVersion": "runner/v1", "kind": "Agent", "name": "calc",
        "model": {"id": "gpt-4o-mini", "max_tokens": 200, "retries": 0},
        "system_prompt": SYSTEM, "tools": ["calculator"],
    }
    task = {"apiVersion": "runner/v1", "kind": "Task", "name": "calc", "agent": "calc", "goal": GOAL}
    (root / "agents.d/calc.yaml").write_text(yaml.safe_dump(agent))
    (root / "tasks.d/calc.yaml").write_text(yaml.safe_dump(task))
    (root / "floor.py").write_text(FLOOR_SCRIPT)
    script = dict(SCRIPT)
    script["rules"] = [dict(r, reply=dict(r["reply"], latency_seconds=latency)) for r in SCRIPT["rules"]]
    path = root / "script.json"
    path.write_text(json.dumps(script))
    return path


def start_server(script: Path) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "runner.model.server", "--script", str(script), "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )
    assert server.stdout is not None
    return server, server.stdout.readline().strip()


def calculator_tools() -> list[dict[str, Any]]:
    from runner.tools.registry import default_registry

    return default_registry().openai_tools(["calculator"])


# --- the agent loop, many tasks in one process ---------------------------------------------


async def runner_tasks(root: Path, base_url: str, n: int) -> tuple[float, int]:
    from runner.config.project import load_project_or_raise
    from runner.model.factory import ModelPool
    from runner.runs.execute import execute_task
    from runner.runs.options import RunOptions
    from runner.store.runstore import RunStore

    project = load_project_or_raise(root)
    task = project.task_for("calc")
    store = RunStore(root / "runs.sqlite3")
    pool = ModelPool()
    started = time.process_time()
    tokens = 0
    for _ in range(n):
        options = RunOptions(write_report=False, base_url_override=base_url, api_key=API_KEY)
        result = await execute_task(project, task, {}, options, store=store, pool=pool)
        assert result.status == "completed", result.error
        tokens += result.usage.input_tokens
    cpu = time.process_time() - started
    await pool.aclose()
    store.close()
    return cpu / n, tokens // n


async def hand_conversation(client: Any, tools: list[dict[str, Any]]) -> int:
    """One task by hand; returns the prompt tokens it was billed."""
    from runner.tools.builtins.calculator import evaluate

    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": GOAL}]
    tokens = 0
    while True:
        response = await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=tools, tool_choice="auto", max_tokens=200
        )
        tokens += response.usage.prompt_tokens if response.usage else 0
        message = response.choices[0].message
        messages.append({"role": "assistant", "content": message.content, "tool_calls": [c.model_dump() for c in message.tool_calls or []]} if message.tool_calls else {"role": "assistant", "content": message.content})
        if not message.tool_calls:
            return tokens
        for call in message.tool_calls:
            expression = json.loads(call.function.arguments)["expression"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{expression} = {evaluate(expression)!r}"})


async def handwritten_tasks(base_url: str, n: int) -> tuple[float, int]:
    from openai import AsyncOpenAI

    tools = calculator_tools()
    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
    started = time.process_time()
    tokens = sum([await hand_conversation(client, tools) for _ in range(n)])
    cpu = time.process_time() - started
    await client.close()
    return cpu / n, tokens // n


# --- `runner run` per task, in process ------------------------------------------------------


def runner_run_once(root: Path, base_url: str) -> None:
    """``runner run calc`` as the command line runs it, minus interpreter start-up."""
    from runner.cli import cli

    argv = ["run", "calc", "--root", str(root), "--base-url", base_url]
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            cli.main(args=argv, prog_name="runner", standalone_mode=False)
        except SystemExit as done:
            code = done.code
        else:
            code = 0
    if code not in (0, None):
        raise SystemExit(f"runner run failed with exit code {code}")


def floor_run_once(base_url: str, tools: list[dict[str, Any]]) -> None:
    """What the floor script does once its modules are imported."""
    from openai import AsyncOpenAI

    async def main() -> None:
        client = AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
        await hand_conversation(client, tools)
        await client.close()

    asyncio.run(main())


def cpu_per_call(function: Callable[[], None], n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        function()
    return (time.process_time() - started) / n


def per_task_in_process(root: Path, base_url: str, n: int) -> tuple[float, float]:
    """CPU seconds per task: (runner run, floor), measured in alternating rounds."""
    tools = calculator_tools()
    run = lambda: runner_run_once(root, base_url)  # noqa: E731
    floor = lambda: floor_run_once(base_url, tools)  # noqa: E731
    for function in (run, floor):
        cpu_per_call(function, 3)  # warm imports, the project cache, the run store
    runs, floors = [], []
    rounds = 5
    for _ in range(rounds):
        runs.append(cpu_per_call(run, max(n // rounds, 1)))
        floors.append(cpu_per_call(floor, max(n // rounds, 1)))
    return statistics.median(runs), statistics.median(floors)


# --- one process per task -------------------------------------------------------------------


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["OPENAI_API_KEY"] = API_KEY
    return env


# Peak RSS of a child counts the memory of the process it was forked from, so each command
# is started by this small launcher (about 10 MiB), which reports its child's usage.
LAUNCHER = """
import json, os, sys, time
errors = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.dup2(errors, 2)
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - started
print(json.dumps([os.waitstatus_to_exitcode(status), wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024]))
"""


STDERR_FILE = Path(tempfile.gettempdir()) / f"runner-bench-{os.getpid()}.stderr"


def measure_process(command: list[str], cwd: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS MiB) of one child process, from ``wait4``."""
    errors = STDERR_FILE
    done = subprocess.run(
        [sys.executable, "-S", "-c", LAUNCHER, str(errors), *command],
        cwd=cwd, env=child_env(), capture_output=True, text=True, check=True,
    )
    code, wall, cpu, rss = json.loads(done.stdout)
    if code != 0:
        raise SystemExit(f"{' '.join(command)} exited {code}:\n{errors.read_text(errors='replace')[-2000:]}")
    return wall, cpu, rss


REPO = Path(__file__).resolve().parent.parent  # the runner repository: its own project (agents.d, tasks.d)


def per_process(root: Path, base_url: str, n: int) -> dict[str, tuple[float, float, float]]:
    """Median (wall, CPU, peak RSS) per command, in alternating rounds after one warm-up each."""
    runner = [sys.executable, "-m", "runner"]
    floor = [sys.executable, str(root / "floor.py"), base_url, SYSTEM, GOAL, json.dumps(calculator_tools())]
    commands = {
        "runner run": ([*runner, "run", "calc", "--base-url", base_url], root),
        "floor script": (floor, root),
        "runner run --no-report": ([*runner, "run", "calc", "--no-report", "--base-url", base_url], root),
        "runner validate": ([*runner, "validate"], root),
        "runner list": ([*runner, "list"], root),
        "runner validate (repo)": ([*runner, "validate"], REPO),
        "runner list (repo)": ([*runner, "list"], REPO),
        "runner --help": ([*runner, "--help"], root),
    }
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
    for command, cwd in commands.values():
        measure_process(command, cwd)
    for _ in range(n):
        for name, (command, cwd) in commands.items():
            samples[name].append(measure_process(command, cwd))
    return {
        name: tuple(statistics.median(column) for column in zip(*rows, strict=True))  # type: ignore[misc]
        for name, rows in samples.items()
    }


# --- main -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=30, help="tasks per in-process measurement")
    parser.add_argument("--processes", type=int, default=10, help="processes per command")
    parser.add_argument("--latency", type=float, default=0.0, help="server latency per call, seconds")
    args = parser.parse_args()
    os.environ["OPENAI_API_KEY"] = API_KEY  # for `runner run` in this process
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        script = write_project(root, args.latency)
        server, base_url = start_server(script)
        try:
            asyncio.run(handwritten_tasks(base_url, 3))  # warm imports and connections for both
            asyncio.run(runner_tasks(root, base_url, 3))
            hand_cpu, hand_tokens = asyncio.run(handwritten_tasks(base_url, args.tasks))
            run_cpu, run_tokens = asyncio.run(runner_tasks(root, base_url, args.tasks))
            cli_cpu, floor_cpu = per_task_in_process(root, base_url, args.tasks)
            processes = per_process(root, base_url, args.processes)
        finally:
            server.terminate()
            server.wait(timeout=10)
            STDERR_FILE.unlink(missing_ok=True)
    report(args, (hand_cpu, hand_tokens, run_cpu, run_tokens), (cli_cpu, floor_cpu), processes)


def report(
    args: argparse.Namespace,
    loop: tuple[float, int, float, int],
    per_task: tuple[float, float],
    processes: dict[str, tuple[float, float, float]],
) -> None:
    hand_cpu, hand_tokens, run_cpu, run_tokens = loop
    print(f"tasks: {args.tasks}, processes: {args.processes}, server latency {args.latency}s per call, 3 model calls per task")
    print("agent loop (shared client, many tasks in one process)")
    print(f"  hand-written loop : {hand_cpu * 1000:8.2f} ms CPU/task  {hand_tokens:6d} prompt tokens/task")
    print(f"  runner            : {run_cpu * 1000:8.2f} ms CPU/task  {run_tokens:6d} prompt tokens/task")
    print(f"  ratio CPU    runner/hand = {run_cpu / hand_cpu:.2f}x (target <= 1.2x)")
    print(f"  ratio tokens runner/hand = {run_tokens / hand_tokens:.2f}x (target <= 1.0x)")
    cli_cpu, floor_cpu = per_task
    print("runner run per task (in process: command line, project, store, client, run, report)")
    print(f"  floor (new client per task) : {floor_cpu * 1000:8.2f} ms CPU/task")
    print(f"  runner run                  : {cli_cpu * 1000:8.2f} ms CPU/task")
    print(f"  ratio CPU runner run/floor = {cli_cpu / floor_cpu:.2f}x (target <= 1.5x)")
    print("one process per task (median wall, CPU and peak RSS per process)")
    for name, (wall, cpu, rss) in processes.items():
        print(f"  {name:24s}: {wall:6.3f} s wall  {cpu:6.3f} s CPU  {rss:6.1f} MiB peak RSS")
    _, run_proc_cpu, run_rss = processes["runner run"]
    _, floor_proc_cpu, floor_rss = processes["floor script"]
    bare_rss = processes["runner run --no-report"][2]
    print(f"  ratio CPU     runner run/floor script = {run_proc_cpu / floor_proc_cpu:.2f}x")
    print(f"  ratio peak RSS runner run/floor script = {run_rss / floor_rss:.2f}x (bound < 1.5x)")
    print(f"  ratio peak RSS runner run --no-report/floor script = {bare_rss / floor_rss:.2f}x (bound < 1.5x)")
    for name in ("runner validate", "runner list", "runner validate (repo)", "runner list (repo)"):
        print(f"  {name}: {processes[name][0]:.3f} s wall (target <= 0.3 s)")


if __name__ == "__main__":
    main()
