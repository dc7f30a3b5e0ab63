"""Answer checks: numbers must come from the prompt; few-shot examples are sent first."""

from __future__ import annotations

from pathlib import Path

from runner.agent.checks import ungrounded_numbers
from runner.config.project import load_project_or_raise
from runner.model.factory import ModelPool
from runner.model.scripted import ScriptedModel
from runner.runs.execute import execute_task
from runner.runs.options import RunOptions

PROMPT = "- revenue on 2026-11-30: 4247.30 from 64 orders\n- change in revenue: -25.3%"


def test_numbers_must_come_from_the_prompt() -> None:
    assert ungrounded_numbers("Revenue was 4,247.30 from 64 orders (-25.3%).", [PROMPT]) == []
    assert ungrounded_numbers("Revenue was about 4,247 on 2026-11-30.", [PROMPT]) == []
    assert ungrounded_numbers("Revenue was 42.47, down 8% on 2026-11-29.", [PROMPT]) == ["2026-11-29", "42.47"]
    assert ungrounded_numbers("It had 3 highlights.", [PROMPT]) == []


AGENT = """\
apiVersion: runner/v1
kind: Agent
name: writer
model: {id: gpt-4o-mini}
system_prompt: Write from figures.
examples:
  - {input: "Figures: - sales: 10.50", output: "Sales were 10.50."}
checks: {numbers_from_prompt: true, max_repairs: 1}
---
apiVersion: runner/v1
kind: Task
name: write
agent: writer
goal: "Figures: - sales: 4247.30 from 64 orders"
"""


def project(tmp_path: Path) -> Path:
    (tmp_path / "agents.d").mkdir()
    (tmp_path / "agents.d/all.yaml").write_text(AGENT)
    return tmp_path


async def run(tmp_path: Path, *replies: str) -> tuple[object, ScriptedModel]:
    proj = load_project_or_raise(project(tmp_path))
    model = ScriptedModel.sequence(*({"content": r} for r in replies))
    result = await execute_task(proj, proj.task_for("write"), {}, RunOptions(write_report=False), pool=ModelPool(fixed=model))
    return result, model


async def test_invented_number_gets_a_repair_turn_then_passes(tmp_path: Path) -> None:
    result, model = await run(tmp_path, "Sales were 5000.00.", "Sales were 4247.30 from 64 orders.")
    assert result.status == "completed" and result.output == "Sales were 4247.30 from 64 orders."  # type: ignore[attr-defined]
    first = model.requests[0].messages
    assert [m.role for m in first] == ["system", "user", "assistant", "user"]
    assert "5000.00" in (model.requests[1].messages[-1].content or "")


async def test_invented_numbers_after_repairs_fail_the_step(tmp_path: Path) -> None:
    result, _ = await run(tmp_path, "Sales were 5000.00.", "Sales were 6000.00.")
    assert result.status == "failed" and result.error_kind == "ungrounded"  # type: ignore[attr-defined]
    assert "6000.00" in (result.error or "")  # type: ignore[attr-defined]


def test_figures_in_order_catches_swaps_and_drops() -> None:
    from runner.agent.checks import figures_fallback, missing_figures

    goal = "Figures:\n- revenue on 2026-11-30: 4247.30 from 64 orders\n- revenue last week: 5682.44\nWrite it."
    assert missing_figures("Revenue was 4247.30 from 64 orders; last week 5682.44.", goal) == []
    assert missing_figures("Revenue was 5682.44 from 64 orders; last week 4247.30.", goal) != []
    assert missing_figures("Revenue was 4247.30.", goal) == ["64", "5682.44"]
    fallback = figures_fallback(goal)
    assert "- revenue last week: 5682.44" in fallback and "did not match" in fallback
