"""Check paths through the real CLI: a list index in a Unicode digit (``items.²``) or of
thousands of digits is refused by ``runner validate`` and before ``runner eval`` pays for a
case, with the place named; in a dataset cell it is a failed check of that case, and the eval
report is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer

from .test_eval_hostile import AGENT, TASK, eval_yaml, refused, runner, write_eval

HUGE = "9" * 5000


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project with a labelling task and a one-case dataset."""
    project = tmp_path / "project"
    for folder in ("agents.d", "tasks.d", "evals.d", "data"):
        (project / folder).mkdir(parents=True)
    (project / "agents.d" / "labeler.yaml").write_text(AGENT)
    (project / "tasks.d" / "label.yaml").write_text(TASK)
    (project / "data" / "cases.csv").write_text("id,text,expected,checks\nc1,hello,greeting,\n")
    return project


@pytest.mark.parametrize("path", ["items.²", "items.٣", "items.３", f"items.{HUGE}", "items.-" + "1" * 10, "items..0"])
def test_validate_and_eval_refuse_a_path_they_cannot_follow(root: Path, path: str) -> None:
    write_eval(root, eval_yaml("data/cases.csv", assertions=f"  - {{path: {json.dumps(path)}, equals: greeting}}\n"))
    out = refused(runner(root, "validate"), "/assert/0/path")
    assert "ASCII digits" in out or "empty part" in out
    assert len(out) < 2000  # the 5,000 digits are not echoed back
    with ScriptedServer({"fallback": '{"items": ["greeting"]}'}) as server:
        refused(runner(root, "eval", "hostile", server=server), "/assert/0/path")
        assert not server.requests  # refused before any case was paid for


@pytest.mark.parametrize("path", ["items.0", "items.-1", "label", "items.x1", "counts.²x"])
def test_paths_that_can_be_followed_still_validate(root: Path, path: str) -> None:
    write_eval(root, eval_yaml("data/cases.csv", assertions=f"  - {{path: {json.dumps(path)}, contains: g}}\n"))
    done = runner(root, "validate")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_bad_path_in_a_dataset_cell_fails_that_case_and_the_report_is_written(root: Path) -> None:
    cell = json.dumps([{"path": "items.²", "equals": "x"}, {"path": f"items.{HUGE}", "equals": "x"}]).replace('"', '""')
    (root / "data" / "cells.csv").write_text(f'id,text,expected,checks\nbad,hello,greeting,"{cell}"\ngood,hi,greeting,\n')
    write_eval(root, eval_yaml("data/cells.csv", assertions="  - {path: items.0, equals: {column: expected}}\n"))
    with ScriptedServer({"fallback": '{"items": ["greeting"]}'}) as server:
        done = runner(root, "eval", "hostile", "--json", server=server)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    cases = {c["key"]: c for c in json.loads(done.stdout)["variants"][0]["results"]}
    assert cases["good"]["passed"] and not cases["bad"]["passed"]
    reasons = " | ".join(c["detail"] for c in cases["bad"]["checks"] if c["passed"] is False)
    assert "ASCII digits" in reasons and HUGE not in reasons
    assert list(root.rglob("eval_report.json"))
