"""A scripted model tries each hostile action through the real tools inside a real run:
every attempt becomes an observation, the host is unchanged, the key stays invisible, and
the run carries on to its answer."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.config.project import load_project_or_raise
from runner.model.factory import ModelPool
from runner.model.scripted import ScriptedModel
from runner.runs.execute import execute_task
from runner.runs.options import RunOptions
from tests.support.project import sandbox_project

CANARY = "sk-canary-hostile-0123456789"
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: hostile
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [python, shell, read_file, write_file, list_files, fetch_url]
sandbox: {mode: bwrap, wall_seconds: 10, cpu_seconds: 5, memory_mb: 256}
stuck: {max_repeats: 5, max_invalid_calls: 10}
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: hostile
agent: hostile
goal: Try to escape.
"""


@pytest.fixture
def project() -> Iterator[Path]:
    with sandbox_project("hostile", {"agents.d/hostile.yaml": AGENT, "tasks.d/hostile.yaml": TASK}) as root:
        yield root


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    yield server.getsockname()[1]
    server.close()


def attacks(port: int, marker: Path) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("read_file", {"path": "../../../../etc/passwd"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("write_file", {"path": f"../{marker.name}", "content": "escaped"}),
        ("python", {"code": f"open('{marker}', 'w').write('escaped')"}),
        ("python", {"code": f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')"}),
        ("python", {"code": "import os; print(dict(os.environ))"}),
        ("shell", {"command": "cat /proc/1/environ /proc/$PPID/environ 2>&1; env"}),
        ("shell", {"command": "sleep 1000 & setsid sleep 1000 & echo started"}),
        ("fetch_url", {"url": f"http://127.0.0.1:{port}/"}),
        ("fetch_url", {"url": "http://169.254.169.254/latest/meta-data/"}),
        ("fetch_url", {"url": "file:///etc/passwd"}),
    ]


def sleepers() -> set[int]:
    found = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "cmdline").read_bytes().startswith(b"sleep\x001000"):
                    found.add(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.timeout(180)
async def test_every_hostile_action_is_an_observation(project: Path, listener: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    marker = project.parent / f"{project.name}-escaped.txt"
    steps = attacks(listener, marker)
    replies: list[Any] = [{"tool_calls": [{"name": n, "arguments": a}]} for n, a in steps]
    model = ScriptedModel.sequence(*replies, {"content": "I could not escape."})
    before = sleepers()
    result = await execute_task(
        load_project_or_raise(project), load_project_or_raise(project).task_for("hostile"), {},
        RunOptions(write_report=False, api_key=CANARY), pool=ModelPool(fixed=model),
    )
    assert result.status == "completed" and result.output == "I could not escape."
    observations = [m for m in model.requests[-1].messages if m.role == "tool"]
    assert len(observations) == len(steps)
    for (name, _), message in zip(steps, observations, strict=True):
        text = message.content or ""
        assert CANARY not in text, name
        assert "CONNECTED" not in text, name
        assert "root:x:0:0" not in text, name
    assert not marker.exists() and not (project / ".runner" / "workspaces" / marker.name).exists()
    assert sleepers() <= before, "a sandboxed process survived its call"
    assert os.environ["OPENAI_API_KEY"] == CANARY
