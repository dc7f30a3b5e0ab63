"""A task-wide budget counts a run's embeddings requests: each is reserved in the budget's
window before it is sent, so a budget smaller than the knowledge base's indexing stops the
run before the request that would pass it (exit 3, the budget named), and ``runner budgets``
shows the spend under the knowledge base and its embedding model. Real CLI processes against
the loopback server's /v1/embeddings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.cli.test_embedding_caps_cli import SCRIPT, _calls, _with_embeddings
from tests.support.project import run_cli

pytestmark = pytest.mark.timeout(300)
LIMIT = 0.00002
BUDGET = f"""\
apiVersion: runner/v1
kind: Budget
name: daily
max_cost_usd: {LIMIT}
window: day
"""
ENV = {"TEST_EMBED_KEY": "sk-embed-abcdef012345"}


def test_a_task_wide_budget_stops_before_the_embeddings_request_that_would_pass_it(tmp_path: Path) -> None:
    with ScriptedServer(SCRIPT) as model:
        root = _with_embeddings(tmp_path, model)
        (root / "budgets.d").mkdir()
        (root / "budgets.d/daily.yaml").write_text(BUDGET)
        result = run_cli(root, model, "run", "answer", "-i", "question=refund?", env=ENV)
        sent = [r for r in model.requests if r.rule == "embeddings"]
        chats = [r for r in model.requests if r.rule != "embeddings"]
    assert result.returncode == 3, result.stderr
    assert "budget 'daily' (day window " in result.stderr and f"max_cost_usd={LIMIT:g}" in result.stderr, result.stderr
    assert chats == [] and len(sent) >= 1  # some batches were indexed; the one that would pass the budget was not sent
    ok = [c for c in _calls(root) if c["status"] == "ok"]
    assert len(ok) == len(sent) and all(c["model"] == "text-embedding-3-large" for c in ok)
    spent = sum(c["cost_usd"] for c in ok)
    assert 0 < spent <= LIMIT

    shown = run_cli(root, None, "budgets", "--json")
    assert shown.returncode == 0, shown.stderr
    (daily,) = json.loads(shown.stdout)["budgets"]
    window = daily["current"]
    assert window["spent"]["cost_usd"] == pytest.approx(spent) and window["spent"]["tokens"] == sum(c["input_tokens"] for c in ok)
    assert [(s["task"], s["agent"], s["model"]) for s in window["spenders"]] == [
        ("answer", "product_docs", "text-embedding-3-large")
    ]
