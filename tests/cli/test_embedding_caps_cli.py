"""Embeddings requests are paid from a run's caps and recorded (issue 15), through the real CLI
against the loopback server's /v1/embeddings."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.cli.test_knowledge_cli import ANSWER, KNOWLEDGE, project
from tests.support.project import run_cli, tool_call

pytestmark = pytest.mark.timeout(300)
SCRIPT = {
    "rules": [
        {"when": {"last_role": "user"}, "reply": tool_call("search_knowledge", query="annual plan refund")},
        {"when": {"last_role": "tool"}, "reply": {"content": ANSWER}},
    ],
    "fallback": None,
}


def _with_embeddings(tmp_path: Path, model: ScriptedServer) -> Path:
    knowledge = KNOWLEDGE + f"embeddings: {{model: text-embedding-3-large, base_url: '{model.base_url}', api_key_env: TEST_EMBED_KEY, batch_size: 2}}\n"
    return project(tmp_path, **{"knowledge.d/docs.yaml": knowledge})


def _calls(root: Path) -> list[sqlite3.Row]:
    with sqlite3.connect(root / ".runner/runs.sqlite3") as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM model_calls ORDER BY id").fetchall()


def test_a_tiny_money_cap_stops_before_the_embeddings_request_that_would_pass_it(tmp_path: Path) -> None:
    with ScriptedServer(SCRIPT) as model:
        root = _with_embeddings(tmp_path, model)
        result = run_cli(root, model, "run", "answer", "-i", "question=refund?", "--max-cost-usd", "0.00002",
                        env={"TEST_EMBED_KEY": "sk-embed-abcdef012345"})
        sent = [r for r in model.requests if r.rule == "embeddings"]
        chats = [r for r in model.requests if r.rule != "embeddings"]
    assert result.returncode == 3, result.stderr
    assert "max_cost_usd" in result.stdout + result.stderr and "Traceback" not in result.stderr
    assert not chats
    calls = _calls(root)
    ok = [c for c in calls if c["status"] == "ok"]
    assert len(ok) == len(sent) >= 1  # every request sent was recorded and settled; the refused one was not sent
    assert all(c["agent"] == "product_docs" and c["model"] == "text-embedding-3-large" for c in calls)
    assert all(c["input_tokens"] > 0 and c["cost_usd"] > 0 for c in ok)
    spent = sum(c["cost_usd"] for c in ok)
    assert spent <= 0.00002
    (report_dir,) = (root / "reports/answer").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    assert record["status"] == "capped"
    assert record["usage"]["total"]["cost_usd"] == pytest.approx(spent)
    assert record["usage"]["by_agent"]["product_docs"]["cost_usd"] == pytest.approx(spent)


def test_embeddings_spend_counts_in_the_report_and_runs_show(tmp_path: Path) -> None:
    with ScriptedServer(SCRIPT) as model:
        root = _with_embeddings(tmp_path, model)
        result = run_cli(root, model, "run", "answer", "-i", "question=refund?", "--max-cost-usd", "1",
                        env={"TEST_EMBED_KEY": "sk-embed-abcdef012345"})
    assert result.returncode == 0, result.stderr
    (report_dir,) = (root / "reports/answer").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    usage = record["usage"]
    embed = usage["by_agent"]["product_docs"]
    assert embed["input_tokens"] > 0 and usage["by_model"]["text-embedding-3-large"]["cost_usd"] == pytest.approx(embed["cost_usd"])
    chat = usage["by_agent"]["support"]
    assert usage["total"]["cost_usd"] == pytest.approx(chat["cost_usd"] + embed["cost_usd"])
    run_id = record["run_id"]
    shown = run_cli(root, None, "runs", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "(embeddings)" in shown.stdout and "text-embedding-3-large" in shown.stdout
    assert f"cost ${usage['total']['cost_usd']:.6f}" in shown.stdout  # the run's cost includes the embeddings


def test_runner_index_prints_its_embeddings_spend_and_honours_a_money_cap(tmp_path: Path) -> None:
    env = {"TEST_EMBED_KEY": "sk-embed-abcdef012345"}
    with ScriptedServer(SCRIPT) as model:
        root = _with_embeddings(tmp_path, model)
        capped = run_cli(root, model, "index", "product_docs", "--max-cost-usd", "0.00002", env=env)
        sent_capped = len([r for r in model.requests if r.rule == "embeddings"])
    assert capped.returncode == 3, capped.stderr
    assert "max_cost_usd" in capped.stderr and "Traceback" not in capped.stderr
    assert f"embeddings: {sent_capped} call(s)" in capped.stderr  # what was sent is said; the refused request was not
    with ScriptedServer(SCRIPT) as model:
        root = _with_embeddings(tmp_path / "second", model)
        done = run_cli(root, model, "index", "product_docs", "--max-cost-usd", "1", env=env)
        sent = len([r for r in model.requests if r.rule == "embeddings"])
    assert done.returncode == 0, done.stderr
    assert sent > sent_capped and f"embeddings: {sent} call(s)" in done.stderr
    assert "$0.000000" not in done.stderr.split("embeddings:")[1]


def test_a_money_cap_with_an_unpriced_embedding_model_refuses_to_start(tmp_path: Path) -> None:
    with ScriptedServer(SCRIPT) as model:
        knowledge = KNOWLEDGE + f"embeddings: {{model: house-embedder-1, base_url: '{model.base_url}', api_key_env: TEST_EMBED_KEY}}\n"
        root = project(tmp_path, **{"knowledge.d/docs.yaml": knowledge})
        result = run_cli(root, model, "run", "answer", "-i", "question=refund?", "--max-cost-usd", "1",
                        env={"TEST_EMBED_KEY": "sk-embed-abcdef012345"})
        sent = len(model.requests)
    assert result.returncode == 2, result.stderr
    assert "house-embedder-1" in result.stderr and "no known price" in result.stderr
    assert sent == 0
