"""What ``runner batch --via batch-api`` changed at the provider, or leaves to the user, is said on
stderr whatever ``--progress`` says (``none`` included): input files deleted, or not deletable yet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import run, via_api, write_rows
from tests.support.project import copy_shipped

pytestmark = pytest.mark.timeout(300)
SCRIPT: dict[str, Any] = {"fallback": {"content": json.dumps({"category": "bug", "urgency": "high", "summary": "x"})}}


@pytest.mark.parametrize("progress", ["none", "log"])
@pytest.mark.parametrize("fail_deletes", [0, 100], ids=["deleted", "not-deleted"])
def test_file_notices_show_whatever_the_progress(tmp_path: Path, progress: str, fail_deletes: int) -> None:
    root = copy_shipped(tmp_path / "project")
    source = write_rows(root / "t.jsonl", [{"id": "t1", "subject": "S", "body": "B"}])
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, fail_deletes=fail_deletes)) as server:
        done = run(root, server, "triage_ticket", *via_api(source, root / "out.jsonl", "--progress", progress))
    assert done.returncode == 0, done.stderr
    if fail_deletes:
        assert "could not delete uploaded input file(s)" in done.stderr and "the next run tries again" in done.stderr
    else:
        assert "deleted uploaded input file(s)" in done.stderr
    assert ("round 1: provider batch" in done.stderr) == (progress == "log")  # progress itself still follows --progress
