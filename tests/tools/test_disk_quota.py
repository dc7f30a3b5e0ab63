"""The workspace inventory behind the disk quota, on real files (no sandbox needed)."""

from __future__ import annotations

import os
from pathlib import Path

from runner.tools.disk_quota import ENTRY_BYTES, MAX_DEPTH, remove_entries, scan, topmost


def test_topmost_keeps_only_the_outermost_of_nested_paths():
    paths = ["a/b", "a-b", "a", "a/b/c", "z/y", "a.b/c"]
    assert topmost(paths) == ["a", "a-b", "a.b/c", "z/y"]


def test_every_entry_costs_at_least_a_block_and_files_their_apparent_size(tmp_path: Path):
    (tmp_path / "empty").touch()
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to("/usr")
    with open(tmp_path / "sparse", "wb") as handle:
        handle.truncate(10 * 1024 * 1024)
    inventory = scan(tmp_path)
    assert inventory.entries["empty"].bytes == ENTRY_BYTES
    assert inventory.entries["link"].bytes == ENTRY_BYTES  # the link, not what it points at
    assert inventory.entries["sparse"].bytes == 10 * 1024 * 1024
    assert inventory.total == sum(charge.bytes for charge in inventory.entries.values())


def test_a_tree_deeper_than_the_walk_is_flagged_and_still_removable(tmp_path: Path):
    current = tmp_path
    for _ in range(MAX_DEPTH * 3):
        current = current / "n"
        current.mkdir()
    (current / "leaf").write_text("x")
    assert scan(tmp_path).too_deep
    assert remove_entries(tmp_path, ["n"]) == []
    assert os.listdir(tmp_path) == []


def test_removing_a_tree_unlinks_its_links_and_files_and_never_follows_a_link(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file")
    tree = tmp_path / "ws" / "t"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f.txt").write_text("x")
    (tree / "a" / "dir-link").symlink_to(outside, target_is_directory=True)
    (tree / "file-link").symlink_to(outside / "keep.txt")
    (tree / "top.txt").write_text("y")
    (tmp_path / "ws" / "lone-link").symlink_to(outside)
    assert remove_entries(tmp_path / "ws", ["t", "lone-link", "gone-already"]) == []
    assert os.listdir(tmp_path / "ws") == []
    assert (outside / "keep.txt").read_text() == "host file"  # a link is removed, never its target
