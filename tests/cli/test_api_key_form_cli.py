"""An API key an HTTP header cannot carry is refused before any call, naming where it came from.

A key read from a file often keeps its newline; sent, it failed every call with a misleading
"connection dropped" after retries, each counted at its worst case. Now: exit 2, one line
naming the variable, the key itself never shown, and the endpoint never called.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import run_cli, write_project

AGENT = "apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {id: gpt-4o-mini, api_key_env: TEAM_KEY}\nsystem_prompt: Be brief.\n"
TASK = "apiVersion: runner/v1\nkind: Task\nname: t\nagent: a\ngoal: Say hi.\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_project(tmp_path / "project", {"agents.d/a.yaml": AGENT, "tasks.d/t.yaml": TASK})


@pytest.mark.parametrize(
    "key",
    ["sk-secret-key-123\n", "sk-secret-key-123 ", " sk-secret-key-123", "sk-secret\tkey-123", "sk-secret-kéy-123", "sk-secret\x7fkey"],
    ids=["newline-at-end", "space-at-end", "space-at-start", "tab-inside", "non-ascii", "delete-char"],
)
def test_a_key_a_header_cannot_carry_is_refused_before_any_call(project: Path, key: str) -> None:
    with ScriptedServer([{"reply": "hi"}]) as server:
        done = run_cli(project, server, "run", "t", "--no-report", env={"TEAM_KEY": key})
        assert server.requests == []
    assert done.returncode == 2, done.stderr
    assert "TEAM_KEY holds a character an HTTP header cannot carry" in done.stderr
    assert "sk-secret" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_the_standard_variable_is_named_too_and_a_clean_key_runs(project: Path) -> None:
    (project / "agents.d/a.yaml").write_text(AGENT.replace(", api_key_env: TEAM_KEY", ""))
    with ScriptedServer([{"reply": "hi"}]) as server:
        refused = run_cli(project, server, "run", "t", "--no-report", key="sk-abc\n")
        ran = run_cli(project, server, "run", "t", "--no-report", key="sk-abc")
        assert len(server.requests) == 1
    assert refused.returncode == 2 and "OPENAI_API_KEY holds a character" in refused.stderr
    assert ran.returncode == 0, ran.stderr
