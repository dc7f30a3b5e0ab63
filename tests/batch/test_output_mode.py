"""Outputs are written whole (a temporary file renamed over the target); the rename must not
leave the temporary file's private mode on them: a batch's output, a fan-out's shard and
merged outputs are read by other users of a deployment (the worker runs as a service user)."""

from __future__ import annotations

import stat
from pathlib import Path

from runner.files import FILE_MODE, replacing, write_atomic


def test_a_file_written_through_replacing_is_readable_by_others(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    with replacing(target) as temp:
        temp.write_text("{}\n")
    assert stat.S_IMODE(target.stat().st_mode) == FILE_MODE == 0o644


def test_replacing_an_existing_file_keeps_the_same_mode_rule(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    write_atomic(target, b"old")
    with replacing(target) as temp:
        temp.write_text("new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_a_failed_write_leaves_neither_the_target_nor_a_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    try:
        with replacing(target) as temp:
            temp.write_text("partial")
            raise RuntimeError("the writer failed")
    except RuntimeError:
        pass
    assert list(tmp_path.iterdir()) == []
