"""Answer checks through the real CLI: what they count as evidence, and what a repair may become.

* a framework prompt is never delivered as the answer (a no-orders day of the shipped daily
  report: figures_in_order now checks a figure with no number in it, and an echo is refused);
* ``repair: resample`` applies to every failed check, the evidence check included;
* an agent without tools is not told to use its tools, and the error says what the evidence was;
* a tool result that repeats the call's arguments is no evidence (issue #27).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli, tool_call

pytestmark = pytest.mark.timeout(300)
ECHO = ("Your answer states things that none of your tool results support. Use your tools to find evidence for them, "
        "or answer again using only facts, names and figures that appear in your tool results.")  # fmt: skip
NO_ORDERS_DAY = "2026-12-05"  # after the last day of examples/data/sales.csv
NEXT_STEP = "otherwise call the next tool"  # the analyst's next_step_prompt


def record_of(root: Path, task: str) -> dict:
    (report_dir,) = (root / "reports" / task).iterdir()
    return json.loads((report_dir / "report.json").read_text())


def test_a_day_with_no_orders_never_delivers_a_repair_prompt_as_the_summary(tmp_path: Path) -> None:
    project = copy_shipped(tmp_path / "p", ("agents.d", "tasks.d", "examples/data"))
    with ScriptedServer({"fallback": ECHO}) as model:
        result = run_cli(project, model, "run", "daily_report", "--input", f"date={NO_ORDERS_DAY}")
        goal = model.requests[0].body["messages"][-1]["content"]
    assert "no sales recorded" in goal
    record = record_of(project, "daily_report")
    summary = str(record["final_output"])
    assert "none of your tool results support" not in summary and "Use your tools" not in summary
    # the writer's fallback (figures) lists the figures instead of the rejected text
    assert result.returncode == 0, result.stderr
    assert "did not match the figures" in summary and f"- revenue on {NO_ORDERS_DAY}: no sales recorded" in summary


WRITER_TASK = """\
apiVersion: runner/v1
kind: Agent
name: writer
model: {{id: gpt-4o-mini}}
system_prompt: You summarise sales figures.
checks: {{evidence: true, max_repairs: 1{repair}}}
---
apiVersion: runner/v1
kind: Task
name: regions
workspace: {{files: [examples/data/sales.csv]}}
pipeline:
  steps:
    - {{id: load, tool: load_table, args: {{path: sales.csv, name: sales}}}}
{queries}    - id: summary
      agent: writer
      depends_on: [{ids}]
      goal: |
        Figures:
        - strongest region: {{{{ steps.q1.data.records[0].region }}}}
        Write the summary.
"""


def writer_project(root: Path, repair: str = "") -> Path:
    """A pipeline of eight tool steps, then an agent without tools whose answer is checked for evidence."""
    queries = "".join(
        f"    - {{id: q{i}, tool: query_table, depends_on: [load], args: {{table: sales, group_by: [region], "
        f"aggregations: {{revenue: sum}}, sort_by: [revenue_sum], descending: true}}}}\n"
        for i in range(1, 8)
    )
    text = WRITER_TASK.format(repair=repair, queries=queries, ids=", ".join(f"q{i}" for i in range(1, 8)))
    return copy_shipped(root, ("examples/data",), files={"agents.d/writer.yaml": text})


def test_an_agent_without_tools_is_not_told_to_use_them_and_the_error_names_its_evidence(tmp_path: Path) -> None:
    project = writer_project(tmp_path / "p")
    with ScriptedServer({"fallback": "Atlantis led every region."}) as model:
        result = run_cli(project, model, "run", "regions", "--no-report")
        repair = model.requests[1].body["messages"][-1]["content"]
    assert result.returncode == 1, result.stderr
    assert "Atlantis" in repair and "use your tools" not in repair.lower() and "you were given" in repair
    assert "no tool was called" not in result.stderr
    assert "answer not supported by the run's evidence (the goal only: the agent has no tools): Atlantis" in result.stderr


def test_resample_applies_to_the_evidence_check(tmp_path: Path) -> None:
    project = writer_project(tmp_path / "p", repair=", repair: resample")
    script = {"rules": [{"times": 1, "reply": {"content": "Atlantis led every region."}}], "fallback": "The strongest region led."}
    with ScriptedServer(script) as model:
        result = run_cli(project, model, "run", "regions", "--no-report")
        second = [str(m.get("content") or "") for m in model.requests[1].body["messages"]]
    assert result.returncode == 0, result.stderr
    assert not any("Atlantis" in text for text in second)  # asked afresh: neither the answer nor a repair request
    assert not any("none of your tool results support" in text or "nothing you were given" in text for text in second)


def test_a_tool_echoing_the_arguments_is_no_evidence_for_them(tmp_path: Path) -> None:
    """describe_table's error repeats the table name it was asked for; that is the model's own text."""
    project = copy_shipped(tmp_path / "p", ("agents.d", "tasks.d", "examples"))
    script = {
        "rules": [
            {"when": {"last_role": "user"}, "times": 1, "reply": tool_call("describe_table", table="Atlantis 4242")},
        ],
        "fallback": "Atlantis revenue was 4242.",
    }
    with ScriptedServer(script) as model:
        result = run_cli(project, model, "run", "data_question", "--no-report")
        echoed = [str(m.get("content")) for r in model.requests for m in r.body["messages"] if m["role"] == "tool"]
    assert any("Atlantis 4242" in text for text in echoed)  # the tool did echo it
    assert result.returncode == 1, result.stderr
    assert "answer not supported by the run's evidence (the goal and 1 tool result(s)): 4242, Atlantis" in result.stderr


def test_what_a_tool_found_beyond_its_arguments_still_counts(tmp_path: Path) -> None:
    """The neighbour: a query for the region North returns North's revenue; the revenue is evidence."""
    import pandas as pd

    project = copy_shipped(tmp_path / "p", ("agents.d", "tasks.d", "examples"))
    sales = pd.read_csv(project / "examples/data/sales.csv")
    region = str(sales["region"].iloc[0])
    revenue = float(sales[sales["region"] == region]["revenue"].sum())
    query = {"table": "sales", "filters": [{"column": "region", "op": "==", "value": region}],
             "aggregations": {"revenue": "sum"}}  # fmt: skip
    script = {
        "rules": [
            {"when": {"last_role": "user"}, "times": 1, "reply": tool_call("load_table", path="sales.csv", name="sales")},
            {"when": {"last_message": NEXT_STEP}, "times": 1, "reply": tool_call("query_table", **query)},
        ],
        "fallback": f"Total revenue was {revenue:.2f}.",
    }
    with ScriptedServer(script) as model:
        result = run_cli(project, model, "run", "data_question", "--no-report")
    assert result.returncode == 0, result.stderr
