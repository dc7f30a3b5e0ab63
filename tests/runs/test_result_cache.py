"""The result cache through the real CLI and the loopback endpoint: a re-run answers
identical deterministic calls (and idempotent tool calls) from the run store at $0,
``--no-cache`` bypasses it, an expired entry is not served, temperature > 0 is never cached,
and ``runner batch --dedupe`` sends each distinct row once but writes a record per row."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer

pytestmark = pytest.mark.timeout(300)
WORKTREE = Path(__file__).resolve().parents[2]
SCRIPT = {
    "rules": [
        {
            "when": {"last_message": "add"},
            "times": None,
            "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+2"}}]},
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "The sum is 4."}},
    ],
    "fallback": {"content": "An answer."},
}
TASK = """\
apiVersion: runner/v1
kind: Task
name: ask
inputs: {q: {type: string}}
agent: asker
goal: "{{ inputs.q }}"
"""


def agent(*, temperature: str = "temperature: 0, ", cache: str = "cache: {ttl: 1h}\n", tools: str = "") -> str:
    return (
        "apiVersion: runner/v1\nkind: Agent\nname: asker\n"
        f"model: {{id: gpt-4o-mini, {temperature}max_tokens: 200}}\nsystem_prompt: Answer.\n{tools}{cache}"
    )


def project(tmp_path: Path, agent_yaml: str, task: str = TASK) -> Path:
    root = tmp_path / "project"
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d" / "asker.yaml").write_text(agent_yaml)
    (root / "tasks.d" / "ask.yaml").write_text(task)
    return root


def runner(root: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "RUNNER_"))}
    env.update(PYTHONPATH=str(WORKTREE), OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test-cache-0123456789")
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )


def run(root: Path, server: ScriptedServer, q: str, *flags: str) -> dict[str, Any]:
    done = runner(root, server, "run", "ask", "-i", f"q={q}", "--no-report", *flags)
    assert done.returncode == 0, done.stderr
    return latest_run(root)


def query(root: Path, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    db = sqlite3.connect(root / ".runner" / "runs.sqlite3")
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute(sql, params)]
    finally:
        db.close()


def latest_run(root: Path) -> dict[str, Any]:
    row = query(root, "SELECT * FROM runs ORDER BY started_at DESC LIMIT 1")[0]
    row["model_call_rows"] = query(root, "SELECT * FROM model_calls WHERE run_id = ? ORDER BY id", (row["run_id"],))
    row["tool_call_rows"] = query(root, "SELECT * FROM tool_calls WHERE run_id = ? ORDER BY id", (row["run_id"],))
    row["step"] = json.loads(
        query(root, "SELECT record_json FROM steps WHERE run_id = ?", (row["run_id"],))[0]["record_json"]
    )
    return row


def test_a_rerun_makes_no_endpoint_call_and_costs_nothing(tmp_path: Path) -> None:
    root = project(tmp_path, agent())
    with ScriptedServer(SCRIPT) as server:
        first = run(root, server, "what is it")
        assert len(server.requests) == 1 and first["cost_usd"] > 0
        again = run(root, server, "what is it")
        assert len(server.requests) == 1  # answered from the store
        assert again["cost_usd"] == 0 and again["model_calls"] == 0 and again["input_tokens"] == 0
        assert json.loads(again["output_json"]) == json.loads(first["output_json"])
        [call] = again["model_call_rows"]
        assert call["cached"] == 1 and call["cost_usd"] == 0 and call["status"] == "ok"
        assert again["step"]["cached_calls"] == 1
        assert first["step"]["cached_calls"] == 0 and first["model_call_rows"][0]["cached"] == 0
        other = run(root, server, "something else")  # other messages: another key
        assert len(server.requests) == 2 and other["cost_usd"] > 0


def test_no_cache_calls_the_endpoint_again_and_stores_nothing(tmp_path: Path) -> None:
    root = project(tmp_path, agent())
    with ScriptedServer(SCRIPT) as server:
        run(root, server, "q1", "--no-cache")
        run(root, server, "q1", "--no-cache")
        assert len(server.requests) == 2
        run(root, server, "q1")  # nothing was stored by the --no-cache runs
        assert len(server.requests) == 3
        bypassed = run(root, server, "q1", "--no-cache")
        assert len(server.requests) == 4 and bypassed["cost_usd"] > 0


def test_an_expired_entry_is_not_served(tmp_path: Path) -> None:
    root = project(tmp_path, agent(cache="cache: {ttl: 30m}\n"))
    with ScriptedServer(SCRIPT) as server:
        run(root, server, "q1")
        [entry] = query(root, "SELECT created_at, expires_at FROM result_cache")
        assert entry["expires_at"] - entry["created_at"] == pytest.approx(1800)
        db = sqlite3.connect(root / ".runner" / "runs.sqlite3")
        db.execute("UPDATE result_cache SET expires_at = expires_at - 1801")  # as if 30 minutes had passed
        db.commit()
        db.close()
        again = run(root, server, "q1")
        assert len(server.requests) == 2 and again["cost_usd"] > 0 and again["model_call_rows"][0]["cached"] == 0
        run(root, server, "q1")  # the fresh answer was stored again
        assert len(server.requests) == 2


@pytest.mark.parametrize("temperature", ["temperature: 0.7, ", ""])
def test_a_sampled_call_is_never_cached(tmp_path: Path, temperature: str) -> None:
    root = project(tmp_path, agent(temperature=temperature))
    with ScriptedServer(SCRIPT) as server:
        run(root, server, "q1")
        again = run(root, server, "q1")
        assert len(server.requests) == 2 and again["cost_usd"] > 0
    assert query(root, "SELECT COUNT(*) AS n FROM result_cache")[0]["n"] == 0


def test_without_a_cache_setting_nothing_is_cached(tmp_path: Path) -> None:
    root = project(tmp_path, agent(cache=""))
    with ScriptedServer(SCRIPT) as server:
        run(root, server, "q1")
        run(root, server, "q1")
        assert len(server.requests) == 2


def test_the_task_cache_setting_covers_its_agents(tmp_path: Path) -> None:
    root = project(tmp_path, agent(cache=""), TASK + "cache: {ttl: 3600}\n")
    with ScriptedServer(SCRIPT) as server:
        run(root, server, "q1")
        again = run(root, server, "q1")
        assert len(server.requests) == 1 and again["cost_usd"] == 0


def test_an_idempotent_tool_call_is_cached_and_marked(tmp_path: Path) -> None:
    root = project(tmp_path, agent(tools="tools: [calculator]\n"))
    with ScriptedServer(SCRIPT) as server:
        first = run(root, server, "add two and two")
        assert len(server.requests) == 2 and json.loads(first["output_json"]) == "The sum is 4."
        assert [t["cached"] for t in first["tool_call_rows"]] == [0]
        again = run(root, server, "add two and two")
        assert len(server.requests) == 2 and again["cost_usd"] == 0
        assert [t["cached"] for t in again["tool_call_rows"]] == [1]
        assert [c["cached"] for c in again["model_call_rows"]] == [1, 1]
        assert again["step"]["cached_calls"] == 3


def test_a_secret_in_an_answer_is_redacted_in_the_cache(tmp_path: Path) -> None:
    root = project(tmp_path, agent())
    script = {"fallback": {"content": "the key is sk-test-cache-0123456789"}}
    with ScriptedServer(script) as server:
        run(root, server, "q1")
    [entry] = query(root, "SELECT value_json FROM result_cache")
    assert "sk-test-cache-0123456789" not in entry["value_json"]


def test_a_bad_ttl_is_a_located_config_error(tmp_path: Path) -> None:
    root = project(tmp_path, agent(cache="cache: {ttl: 10 minutes}\n"))
    with ScriptedServer(SCRIPT) as server:
        done = runner(root, server, "validate")
    assert done.returncode == 2
    assert "asker.yaml" in done.stderr + done.stdout and "/cache/ttl" in done.stderr + done.stdout


def test_batch_dedupe_sends_each_distinct_row_once_with_a_record_per_row(tmp_path: Path) -> None:
    root = project(tmp_path, agent(cache=""))
    (root / "rows.csv").write_text("id,q\na,first\nb,second\nc,first\nd,first\n")
    with ScriptedServer(SCRIPT) as server:
        done = runner(
            root,
            server,
            "batch",
            "ask",
            "--input",
            "rows.csv",
            "--id-column",
            "id",
            "--output",
            "out.jsonl",
            "--dedupe",
            "--progress",
            "none",
        )
        assert done.returncode == 0, done.stderr
        assert len(server.requests) == 2
    records = {r["id"]: r for r in map(json.loads, (root / "out.jsonl").read_text().splitlines())}
    assert sorted(records) == ["a", "b", "c", "d"]
    assert records["c"]["output"] == records["a"]["output"] == records["d"]["output"]
    assert all(r["status"] == "done" for r in records.values())


def test_batch_without_dedupe_runs_every_row(tmp_path: Path) -> None:
    root = project(tmp_path, agent(cache=""))
    (root / "rows.csv").write_text("id,q\na,first\nb,second\nc,first\n")
    with ScriptedServer(SCRIPT) as server:
        done = runner(
            root,
            server,
            "batch",
            "ask",
            "--input",
            "rows.csv",
            "--id-column",
            "id",
            "--output",
            "out.jsonl",
            "--progress",
            "none",
        )
        assert done.returncode == 0, done.stderr
        assert len(server.requests) == 3


def test_batch_rerun_with_the_cache_is_free_and_no_cache_pays(tmp_path: Path) -> None:
    root = project(tmp_path, agent())
    (root / "rows.csv").write_text("id,q\na,first\nb,second\n")
    batch = ("batch", "ask", "--input", "rows.csv", "--id-column", "id", "--progress", "none", "--json", "--restart")
    with ScriptedServer(SCRIPT) as server:
        first = json.loads(runner(root, server, *batch, "--output", "one.jsonl").stdout)
        again = json.loads(runner(root, server, *batch, "--output", "two.jsonl").stdout)
        assert len(server.requests) == 2 and first["cost_usd"] > 0 and again["cost_usd"] == 0
        paid = json.loads(runner(root, server, *batch, "--output", "three.jsonl", "--no-cache").stdout)
        assert len(server.requests) == 4 and paid["cost_usd"] == pytest.approx(first["cost_usd"])
