"""Client overhead of one agent run: runner vs a hand-written openai-SDK loop.

Both drive the same conversation (two calculator tool calls, then an answer) against the
same loopback Chat Completions server, which runs in its own process with a fixed latency
so only client work is measured. Printed: client CPU seconds per task and prompt tokens per
task for each, and their ratios (targets: CPU <= 1.2x, tokens <= 1.0x). Ratios, not absolute
times, are what to compare across machines.

    .venv/bin/python bench/agent_overhead.py [--tasks 30] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
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
        options = RunOptions(write_report=False, base_url_override=base_url, api_key="sk-bench")
        result = await execute_task(project, task, {}, options, store=store, pool=pool)
        assert result.status == "completed", result.error
        tokens += result.input_tokens
    cpu = time.process_time() - started
    await pool.aclose()
    store.close()
    return cpu / n, tokens // n


async def handwritten_tasks(base_url: str, n: int) -> tuple[float, int]:
    from openai import AsyncOpenAI

    from runner.tools.builtins.calculator import evaluate
    from runner.tools.registry import default_registry

    tools = default_registry().openai_tools(["calculator"])
    client = AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    started = time.process_time()
    tokens = 0
    for _ in range(n):
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": GOAL}]
        while True:
            response = await client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=tools, tool_choice="auto", max_tokens=200  # type: ignore[arg-type]
            )
            tokens += response.usage.prompt_tokens if response.usage else 0
            message = response.choices[0].message
            messages.append({"role": "assistant", "content": message.content, "tool_calls": [c.model_dump() for c in message.tool_calls or []]} if message.tool_calls else {"role": "assistant", "content": message.content})
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                expression = json.loads(call.function.arguments)["expression"]  # type: ignore[union-attr]
                messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{expression} = {evaluate(expression)!r}"})
    cpu = time.process_time() - started
    await client.close()
    return cpu / n, tokens // n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--latency", type=float, default=0.05, help="server latency per call, seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        script = write_project(root, args.latency)
        server, base_url = start_server(script)
        try:
            asyncio.run(handwritten_tasks(base_url, 3))  # warm imports and connections for both
            asyncio.run(runner_tasks(root, base_url, 3))
            hand_cpu, hand_tokens = asyncio.run(handwritten_tasks(base_url, args.tasks))
            run_cpu, run_tokens = asyncio.run(runner_tasks(root, base_url, args.tasks))
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"tasks: {args.tasks}, server latency {args.latency}s per call, 3 model calls per task")
    print(f"hand-written loop : {hand_cpu * 1000:8.2f} ms CPU/task  {hand_tokens:6d} prompt tokens/task")
    print(f"runner            : {run_cpu * 1000:8.2f} ms CPU/task  {run_tokens:6d} prompt tokens/task")
    print(f"ratio CPU    runner/hand = {run_cpu / hand_cpu:.2f}x (target <= 1.2x)")
    print(f"ratio tokens runner/hand = {run_tokens / hand_tokens:.2f}x (target <= 1.0x)")


if __name__ == "__main__":
    main()
