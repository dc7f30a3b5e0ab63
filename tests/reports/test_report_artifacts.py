"""Copying artifacts out of an untrusted workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner.reports.artifacts import ArtifactRefused, copy_artifacts, read_artifact

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture
def space(tmp_path: Path) -> Path:
    root = tmp_path / "space"
    (root / "charts").mkdir(parents=True)
    (root / "charts" / "ok.png").write_bytes(PNG)
    return root


def refusal(space: Path, relative: str, **kwargs: int) -> str:
    with pytest.raises(ArtifactRefused) as raised:
        read_artifact(space, relative, **kwargs)
    return raised.value.reason


def test_reads_a_regular_file(space: Path) -> None:
    assert read_artifact(space, "charts/ok.png") == PNG


def test_refuses_a_symlink_to_etc_passwd(space: Path) -> None:
    (space / "charts" / "passwd.txt").symlink_to("/etc/passwd")
    assert refusal(space, "charts/passwd.txt") == "is a symbolic link"


def test_refuses_a_symlinked_directory(space: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (space / "linked").symlink_to(outside, target_is_directory=True)
    assert "symbolic link" in refusal(space, "linked/secret.txt")


def test_refuses_a_hardlink(space: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    os.link(outside, space / "charts" / "copy.txt")
    assert refusal(space, "charts/copy.txt") == "has 2 hard links (only files with one link are copied)"


@pytest.mark.parametrize(
    "relative", ["../space/charts/ok.png", "/etc/passwd", "charts/../charts/ok.png", "./charts/ok.png", ""]
)
def test_refuses_paths_leaving_the_workspace(space: Path, relative: str) -> None:
    refusal(space, relative)


def test_refuses_large_files_fifos_and_fake_pngs(space: Path) -> None:
    assert refusal(space, "charts/ok.png", max_bytes=10) == f"is larger than 10 bytes ({len(PNG)} bytes)"
    os.mkfifo(space / "pipe.txt")
    assert refusal(space, "pipe.txt") == "is not a regular file"
    (space / "fake.png").write_text("<svg onload=alert(1)>")
    assert "wrong signature" in refusal(space, "fake.png")
    assert refusal(space, "missing.png") == "does not exist"


def test_copy_keeps_going_past_refusals(space: Path, tmp_path: Path) -> None:
    (space / "evil.png").symlink_to("/etc/passwd")
    artifacts = [{"path": "evil.png"}, {"path": "charts/ok.png", "step": "chart"}, {"path": "charts/ok.png"}]
    copied, problems = copy_artifacts(artifacts, space, tmp_path / "report")
    assert [c.report_path for c in copied] == ["artifacts/charts/ok.png"]
    assert (tmp_path / "report" / "artifacts" / "charts" / "ok.png").read_bytes() == PNG
    assert problems == [{"path": "evil.png", "reason": "is a symbolic link"}]  # a path listed again is copied once
    assert not (tmp_path / "report" / "artifacts" / "evil.png").exists()


def test_without_a_workspace_nothing_is_copied(tmp_path: Path) -> None:
    copied, problems = copy_artifacts([{"path": "a.png"}], None, tmp_path)
    assert copied == []
    assert problems == [{"path": "a.png", "reason": "cannot be copied: the run has no workspace"}]
