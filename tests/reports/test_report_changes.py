"""Changes since the previous run."""

from __future__ import annotations

from typing import Any

from runner.reports.changes import compare_runs
from runner.reports.record import fill_usage_rollups


def test_no_previous_run_no_changes(record: dict[str, Any]) -> None:
    record["previous_run"] = None
    assert compare_runs(record) is None


def test_structured_outputs_compare_field_by_field(record: dict[str, Any]) -> None:
    record["final_output"] = {"revenue": 184220.0, "orders": 1466, "region": {"top": "North"}, "new": 1}
    record["previous_run"] |= {"final_output": {"revenue": 160000.0, "orders": 1466, "region": {"top": "West"}}}
    record["previous_run"]["cost_usd"] = 0.0345
    changes = compare_runs(fill_usage_rollups(record))
    assert changes is not None
    by_name = {change.name: change for change in changes.fields}
    assert by_name["revenue"].delta == "+24,220 (+15.1%)"
    assert (by_name["region.top"].before, by_name["region.top"].after) == ("West", "North")
    assert by_name["new"].before == "(absent)"
    assert "run cost" not in by_name and changes.unchanged_fields == 1


def test_text_outputs_get_a_diff(record: dict[str, Any]) -> None:
    changes = compare_runs(fill_usage_rollups(record))
    assert changes is not None and not changes.identical
    assert (
        "-Revenue was **$173,640** (+6.1% vs the previous Sunday), driven by the *Cyber Weekend* promotion."
        in changes.diff
    )
    assert any(line.startswith("+- **Web** grew fastest: +14%") for line in changes.diff)
    assert [c.name for c in changes.fields] == ["run cost"]
