"""Every invalid file in tests/config/invalid fails with exactly its golden messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.config.project import load_project

HERE = Path(__file__).parent
PROJECT = HERE / "project"
INVALID = sorted((HERE / "invalid").glob("*.yaml"))


def validate_one(path: Path) -> str:
    _, problems = load_project(PROJECT, [path])
    name = f"../invalid/{path.name}"
    mine = [p.render().replace(str(path), name) for p in problems if Path(p.file).name == path.name]
    return "\n".join(mine) + "\n"


def test_corpus_is_large_enough() -> None:
    assert len(INVALID) >= 30


def test_valid_project_has_no_problems() -> None:
    project, problems = load_project(PROJECT)
    assert [p.render() for p in problems] == []
    assert set(project.agents) == {"analyst", "writer"}
    assert set(project.tasks) == {"ask", "pipe"}
    assert set(project.tools) == {"word_count"}


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_file_matches_golden(path: Path) -> None:
    actual = validate_one(path)
    golden = path.with_suffix(".expected")
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(actual)
    assert actual.strip(), f"{path.name} produced no problem"
    assert actual == golden.read_text(), f"messages for {path.name} changed"
    for line in actual.strip().splitlines():
        assert ":" in line and "error:" in line
        _, line_no, col, *_ = line.split(":", 3)
        assert int(line_no) >= 1 and int(col) >= 1


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("apiVersion: runner/v1\nkind: Agent\nname: big\ndescription: '" + "x" * (1024 * 1024) + "'\n")
    _, problems = load_project(PROJECT, [big])
    assert any("limited to" in p.message for p in problems)


def test_alias_bomb_is_rejected_quickly(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 10)]
    bomb.write_text("\n".join(lines) + "\n")
    _, problems = load_project(PROJECT, [bomb])
    assert len(problems) == 1 and "anchors and aliases" in problems[0].message
