"""checks.evidence through the real CLI on the shipped data_question task (the analyst has it on):
an answer that names a region not in the data, using no tool, ends failed with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli, tool_call

pytestmark = pytest.mark.timeout(300)
HALLUCINATION = "The Atlantis region had the highest revenue in November 2026, at 48,210.55, ahead of Lemuria."
EVIDENCE_TURN = "none of your tool results support"
NEXT_STEP = "otherwise call the next tool"  # the analyst's next_step_prompt, sent after each round of tools
QUERY = {
    "table": "sales",
    "filters": [{"column": "date", "op": ">=", "value": "2026-11-01"}, {"column": "date", "op": "<=", "value": "2026-11-30"}],
    "group_by": ["region"],
    "aggregations": {"revenue": "sum"},
    "sort_by": ["revenue_sum"],
    "descending": True,
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project", ("agents.d", "tasks.d", "examples"))


def november_leader(root: Path) -> tuple[str, float]:
    sales = pd.read_csv(root / "examples/data/sales.csv", dtype={"date": str})
    november = sales[(sales["date"] >= "2026-11-01") & (sales["date"] <= "2026-11-30")]
    by_region = november.groupby("region")["revenue"].sum().sort_values(ascending=False)
    return str(by_region.index[0]), float(by_region.iloc[0])


def test_a_hallucinated_answer_using_no_tool_ends_failed_with_the_reason(project: Path) -> None:
    with ScriptedServer({"fallback": HALLUCINATION}) as model:
        result = run_cli(project, model, "run", "data_question")
        calls = len(model.requests)
    assert result.returncode == 1, result.stderr
    assert calls == 2  # the answer, and one repair turn (max_repairs: 1) that changed nothing
    assert "answer not supported by the run's evidence (the goal only: the agent called none of its tools)" in result.stderr
    assert "48210.55" in result.stderr and "Atlantis" in result.stderr and "Lemuria" in result.stderr
    assert "Traceback" not in result.stderr
    (report_dir,) = (project / "reports" / "data_question").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    assert record["status"] == "failed" and record["exit_code"] == 1
    assert "Atlantis" in record["stop_reason"]
    (step,) = record["steps"]
    assert step["status"] == "failed" and step["error_kind"] == "evidence"
    markdown = (report_dir / "report.md").read_text()
    assert "FAILED" in markdown and "answer not supported by the run's evidence" in markdown


def test_the_repair_turn_sends_the_agent_back_to_its_tools_and_a_grounded_answer_passes(project: Path) -> None:
    region, revenue = november_leader(project)
    answer = f"{region} had the highest revenue in November 2026: {revenue:,.2f}."
    script = {
        "rules": [
            {"when": {"last_message": EVIDENCE_TURN}, "reply": tool_call("load_table", path="sales.csv", name="sales")},
            {"when": {"last_role": "user"}, "times": 1, "reply": {"content": HALLUCINATION}},
            {"when": {"last_message": NEXT_STEP}, "times": 1, "reply": tool_call("query_table", **QUERY)},
            {"when": {"last_message": NEXT_STEP}, "reply": {"content": answer}},
        ],
        "fallback": None,
    }
    with ScriptedServer(script) as model:
        result = run_cli(project, model, "run", "data_question", "--json")
        offered = model.requests[1].body.get("tools") or []
    assert result.returncode == 0, result.stderr
    assert {t["function"]["name"] for t in offered} >= {"load_table", "query_table"}  # the repair turn may use tools
    assert answer in result.stdout


def test_a_grounded_answer_after_tools_passes_first_time(project: Path) -> None:
    region, revenue = november_leader(project)
    script = {
        "rules": [
            {"when": {"last_message": NEXT_STEP}, "times": 1, "reply": tool_call("query_table", **QUERY)},
            {"when": {"last_message": NEXT_STEP}, "reply": {"content": f"The {region} region led November 2026 with {revenue:.2f}."}},
            {"when": {"last_role": "user"}, "reply": tool_call("load_table", path="sales.csv", name="sales")},
        ],
        "fallback": None,
    }
    with ScriptedServer(script) as model:
        result = run_cli(project, model, "run", "data_question", "--no-report")
        assert len(model.requests) == 3
    assert result.returncode == 0, result.stderr


def test_a_number_the_tools_never_produced_fails_even_with_real_names(project: Path) -> None:
    region, _ = november_leader(project)
    script = {
        "rules": [
            {"when": {"last_message": NEXT_STEP}, "times": 1, "reply": tool_call("query_table", **QUERY)},
            {"when": {"last_role": "user"}, "times": 1, "reply": tool_call("load_table", path="sales.csv", name="sales")},
        ],
        "fallback": f"{region} led with 99,999,999.99.",
    }
    with ScriptedServer(script) as model:
        result = run_cli(project, model, "run", "data_question", "--no-report")
    assert result.returncode == 1
    assert "2 tool result(s)" in result.stderr and "99999999.99" in result.stderr and region not in result.stderr.split(":")[-1]


def test_validate_checks_the_evidence_key(tmp_path: Path) -> None:
    agent = "apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {id: gpt-4o-mini}\nchecks: {evidence: {from_goal: maybe}}\n"
    (tmp_path / "agents.d").mkdir()
    (tmp_path / "agents.d/a.yaml").write_text(agent)
    result = run_cli(tmp_path, None, "validate")
    assert result.returncode == 2 and "/checks/evidence" in result.stdout
