"""checks.judge and context.summarize through the real CLI: both make model calls that are
reserved, recorded and counted against the caps like any other."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import judged_price, run_cli, tool_call, write_project

pytestmark = pytest.mark.timeout(300)

JUDGED = judged_price(["The answer gives the price in euros.", "It is polite."])
REVIEWER = "strict reviewer"
REJECT = {"content": '{"pass": false, "reason": "no price is given"}'}
ACCEPT = {"content": '```json\n{"pass": true, "reason": "gives 20 EUR"}\n```'}


def judged(tmp_path: Path) -> Path:
    return write_project(tmp_path, {"agents.d/all.yaml": JUDGED})


def report_of(root: Path, task: str) -> dict[str, object]:
    (report_dir,) = (root / "reports" / task).iterdir()
    return json.loads((report_dir / "report.json").read_text())  # type: ignore[no-any-return]


def test_a_rejected_answer_is_repaired_and_the_judge_calls_are_counted(tmp_path: Path) -> None:
    root = judged(tmp_path)
    script = {
        "rules": [
            {"when": {"system": REVIEWER, "last_message": "It answered:\\s+It is affordable"}, "reply": REJECT},
            {"when": {"system": REVIEWER}, "reply": ACCEPT},
            {"when": {"last_message": "A reviewer rejected your answer: no price is given"}, "reply": {"content": "It costs 20 EUR a month, thank you."}},
        ],
        "fallback": "It is affordable.",
    }
    with ScriptedServer(script) as model:
        result = run_cli(root, model, "run", "price")
        judge_requests = [r for r in model.requests if REVIEWER in r.body["messages"][0]["content"]]
        total = len(model.requests)
    assert result.returncode == 0, result.stderr
    assert "It costs 20 EUR a month" in result.stdout
    assert len(judge_requests) == 2 and all(r.body["model"] == "gpt-4o" for r in judge_requests)
    assert "- The answer gives the price in euros." in judge_requests[0].body["messages"][-1]["content"]
    record = report_of(root, "price")
    usage = record["usage"]  # type: ignore[index]
    assert usage["total"]["model_calls"] == total == 4
    with sqlite3.connect(root / ".runner/runs.sqlite3") as db:
        calls = db.execute("SELECT agent, model, status, cost_usd FROM model_calls ORDER BY seq").fetchall()
    assert [(agent, model, status) for agent, model, status, _ in calls] == [
        ("writer", "gpt-4o-mini", "ok"), ("reviewer", "gpt-4o", "ok"), ("writer", "gpt-4o-mini", "ok"), ("reviewer", "gpt-4o", "ok"),
    ]
    judge_cost = sum(cost for agent, _, _, cost in calls if agent == "reviewer")
    assert judge_cost > 0 and usage["total"]["cost_usd"] == pytest.approx(sum(c for *_, c in calls))  # priced at the judge's model
    # the breakdowns file the judge's calls under the judge and its model, not the step's agent
    writer_cost = sum(cost for agent, _, _, cost in calls if agent == "writer")
    assert usage["by_agent"]["reviewer"]["cost_usd"] == pytest.approx(judge_cost)
    assert usage["by_agent"]["writer"]["cost_usd"] == pytest.approx(writer_cost)
    assert usage["by_agent"]["reviewer"]["model_calls"] == 2 and usage["by_agent"]["writer"]["model_calls"] == 2
    assert usage["by_model"]["gpt-4o"]["cost_usd"] == pytest.approx(judge_cost)
    assert usage["by_model"]["gpt-4o-mini"]["cost_usd"] == pytest.approx(writer_cost)


def test_an_answer_the_judge_keeps_rejecting_fails_the_step_with_the_reason(tmp_path: Path) -> None:
    root = judged(tmp_path)
    script = {"rules": [{"when": {"system": REVIEWER}, "reply": REJECT}], "fallback": "It is affordable."}
    with ScriptedServer(script) as model:
        result = run_cli(root, model, "run", "price")
        assert len(model.requests) == 4  # answer, judge, repaired answer, judge
    assert result.returncode == 1
    assert "the judge 'reviewer' rejected the answer: no price is given" in result.stderr
    record = report_of(root, "price")
    assert record["status"] == "failed" and record["steps"][0]["error_kind"] == "judge"  # type: ignore[index]
    assert "rejected the answer" in (next((root / "reports/price").iterdir()) / "report.md").read_text()


def test_a_judge_with_no_verdict_fails_without_a_repair(tmp_path: Path) -> None:
    root = judged(tmp_path)
    script = {"rules": [{"when": {"system": REVIEWER}, "reply": {"content": "Looks fine to me, I suppose."}}], "fallback": "20 EUR."}
    with ScriptedServer(script) as model:
        result = run_cli(root, model, "run", "price", "--no-report")
        assert len(model.requests) == 2
    assert result.returncode == 1 and "gave no verdict" in result.stderr


def test_the_judge_call_is_refused_by_a_cap_before_it_is_sent(tmp_path: Path) -> None:
    root = judged(tmp_path)
    with ScriptedServer({"rules": [{"when": {"system": REVIEWER}, "reply": ACCEPT}], "fallback": "20 EUR."}) as model:
        result = run_cli(root, model, "run", "price", "--max-steps", "1", "--no-report")
        assert len(model.requests) == 1  # the answer; the judge's call never left
    assert result.returncode == 3 and "max_steps" in result.stderr


@pytest.mark.parametrize(
    ("replacement", "message"),
    [
        ("agent: reviewer,", "agent: reviwer,"),
        ('criteria: ["The answer gives the price in euros.", "It is polite."]', "criteria: []"),
    ],
)
def test_validate_checks_the_judge(tmp_path: Path, replacement: str, message: str) -> None:
    root = write_project(tmp_path, {"agents.d/all.yaml": JUDGED.replace(replacement, message)})
    result = run_cli(root, None, "validate")
    assert result.returncode == 2 and "/checks/judge" in result.stdout
    assert "Did you mean 'reviewer'?" in result.stdout or "should be non-empty" in result.stdout or "is not valid" in result.stdout


SUMMARIZING = """\
apiVersion: runner/v1
kind: Agent
name: reader
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [read_file]
context: {max_history_tokens: 1500, keep_last_messages: 2, summarize: true}
---
apiVersion: runner/v1
kind: Task
name: read
agent: reader
goal: Read a.txt, b.txt and c.txt and say what line 3 of a.txt holds.
workspace: {files: [data/a.txt, data/b.txt, data/c.txt]}
"""
SUMMARY_SYSTEM = "You summarise an agent's work so far"


def summarizing(tmp_path: Path) -> Path:
    files = {"agents.d/all.yaml": SUMMARIZING}
    for name in "abc":
        files[f"data/{name}.txt"] = "".join(f"{name} line {i}: value {i * 7}\n" for i in range(1, 120))
    return write_project(tmp_path, files)


SUMMARY_SCRIPT = {
    "rules": [
        {"when": {"system": SUMMARY_SYSTEM}, "reply": {"content": "Read a.txt: line 3 holds value 21. Read b.txt."}},
        {"when": {"last_role": "user"}, "times": 1, "reply": tool_call("read_file", path="a.txt")},
        {"when": {"last_message": "^a line 1"}, "reply": tool_call("read_file", path="b.txt")},
        {"when": {"last_message": "^b line 1"}, "reply": tool_call("read_file", path="c.txt")},
        {"when": {"last_message": "^c line 1"}, "reply": {"content": "Line 3 of a.txt holds value 21."}},
    ],
    "fallback": None,
}


def test_over_budget_history_is_summarised_by_a_recorded_model_call(tmp_path: Path) -> None:
    root = summarizing(tmp_path)
    with ScriptedServer(SUMMARY_SCRIPT) as model:
        result = run_cli(root, model, "run", "read")
        requests = [r.body for r in model.requests]
    assert result.returncode == 0, result.stderr
    summaries = [i for i, body in enumerate(requests) if SUMMARY_SYSTEM in body["messages"][0]["content"]]
    assert summaries, "no summary call was made"
    first = summaries[0]
    assert "a line 1: value 7" in requests[first]["messages"][1]["content"]  # the summarised transcript
    after = json.dumps(requests[first + 1]["messages"])
    assert "[Summary of the earlier steps" in after and "line 3 holds value 21" in after
    assert "a line 1: value 7" not in after  # the summarised tool result is gone from the history
    assert not requests[first].get("tools")  # the summary call offers no tools
    record = report_of(root, "read")
    assert record["usage"]["total"]["model_calls"] == len(requests)  # type: ignore[index]


def test_the_summary_call_is_refused_by_a_cap_like_any_other(tmp_path: Path) -> None:
    root = summarizing(tmp_path)
    with ScriptedServer(SUMMARY_SCRIPT) as model:
        full = run_cli(root, model, "run", "read", "--no-report")
        first_summary = next(i for i, r in enumerate(model.requests) if SUMMARY_SYSTEM in r.body["messages"][0]["content"])
    assert full.returncode == 0, full.stderr
    with ScriptedServer(SUMMARY_SCRIPT) as model:
        capped = run_cli(root, model, "run", "read", "--no-report", "--max-steps", str(first_summary))
        sent = [r.body for r in model.requests]
    assert capped.returncode == 3 and "max_steps" in capped.stderr
    assert len(sent) == first_summary and not any(SUMMARY_SYSTEM in b["messages"][0]["content"] for b in sent)
