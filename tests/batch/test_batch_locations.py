"""Outputs and reports at a URL (fsspec, through runner.locations): the batch output file, the
batch report, a run's report; local paths and file:// URLs stay local files, written atomically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import fsspec
import pytest

from runner.api import run_batch, run_task
from runner.batch.output import write_output
from runner.batch.summary import batch_report, write_reports
from runner.errors import UsageError
from runner.locations import location
from runner.model.server import ScriptedServer
from tests.batch.batch_fakes import rows_of, tickets
from tests.support.project import copy_shipped

REPO = Path(__file__).resolve().parents[2]
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'


@pytest.fixture
def memory_root() -> str:
    """A fresh directory of fsspec's in-memory filesystem (removed after the test)."""
    root = f"memory://runner-test-{uuid.uuid4().hex[:8]}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def read(url: str) -> str:
    with fsspec.open(url, "r", encoding="utf-8") as handle:
        return str(handle.read())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project", ("agents.d", "tasks.d", "examples/data/sales.csv"))


def test_locations_keep_local_paths_local(tmp_path: Path) -> None:
    assert location(str(tmp_path / "out.jsonl")) == tmp_path / "out.jsonl"
    assert location(f"file://{tmp_path}/out%20x.jsonl") == tmp_path / "out x.jsonl"
    assert str(location("memory://bucket/x") / "y.csv") == "memory://bucket/x/y.csv"
    with pytest.raises(UsageError, match="names a local path"):
        location("file://otherhost/x")
    with pytest.raises(UsageError, match="cannot use this location"):
        location("nosuchscheme://bucket/out.jsonl")


def test_batch_output_and_report_written_at_a_url(make_batch, memory_root: str) -> None:
    source, journal = make_batch(tickets(3))
    journal.ingest(rows_of(source))
    assert write_output(journal, f"{memory_root}/out/records.csv") == 3
    lines = read(f"{memory_root}/out/records.csv").splitlines()
    assert lines[0].startswith("id,row,status") and len(lines) == 4
    markdown, data = write_reports(batch_report(journal), location(f"{memory_root}/report"))
    assert str(markdown) == f"{memory_root}/report/batch_report.md"
    assert json.loads(read(str(data)))["rows"] == 3


def test_a_batch_and_a_run_report_to_urls_through_the_api(project: Path, memory_root: str) -> None:
    source = project / "tickets.jsonl"
    source.write_text("".join(json.dumps({"id": f"T{i}", "product": "app", "subject": "crash", "body": "It crashes."}) + "\n"
                              for i in range(4)))  # fmt: skip
    with ScriptedServer({"fallback": TRIAGE}) as server:
        summary = run_batch(
            "triage_ticket", root=project, input_path=source, output_path=f"{memory_root}/triage/out.jsonl",
            report_dir=f"{memory_root}/triage/report", model_base_url=server.base_url, api_key="sk-test-locations",
            id_column="id",
        )  # fmt: skip
        manifest = run_task("daily_report", root=project, inputs={"date": "2026-03-02"},
                            reports_dir=f"{memory_root}/reports", model_base_url=server.base_url, api_key="sk-test-locations")  # fmt: skip
    records = [json.loads(line) for line in read(f"{memory_root}/triage/out.jsonl").splitlines()]
    assert [r["id"] for r in records] == ["T0", "T1", "T2", "T3"] and summary["done"] == 4
    assert summary["output_path"] == f"{memory_root}/triage/out.jsonl"
    assert json.loads(read(f"{memory_root}/triage/report/batch_report.json"))["counts"]["done"] == 4
    report_dir = manifest["report_dir"]
    assert report_dir == f"{memory_root}/reports/daily_report/{manifest['run_id']}"
    assert json.loads(read(f"{report_dir}/report.json"))["run_id"] == manifest["run_id"]
    fs = fsspec.filesystem("memory")
    assert fs.exists(f"{report_dir}/report.html") and fs.exists(f"{report_dir}/artifacts/charts/trend.png")  # charts uploaded too
    assert not (project / "reports").exists()  # nothing on the local disk


def _batch(project: Path, server: ScriptedServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "RUNNER_"))}
    env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test-locations", PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "runner", "batch", "triage_ticket", "--root", str(project), "--progress", "none", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_the_cli_takes_file_urls_and_refuses_unknown_filesystems(project: Path) -> None:
    source = project / "tickets.jsonl"
    source.write_text(json.dumps({"id": "T1", "product": "app", "subject": "crash", "body": "It crashes."}) + "\n")
    with ScriptedServer({"fallback": TRIAGE}) as server:
        done = _batch(project, server, "--input", str(source), "--output", f"file://{project}/out.jsonl", "--id-column", "id")
        refused = _batch(project, server, "--input", str(source), "--output", "nosuchscheme://b/out.jsonl")
    assert done.returncode == 0, done.stderr
    assert json.loads((project / "out.jsonl").read_text())["id"] == "T1"
    assert refused.returncode == 2 and "--output" in refused.stderr and "nosuchscheme://b/out.jsonl" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_url_output_is_checked_for_its_format_before_any_row_runs(project: Path, memory_root: str) -> None:
    source = project / "tickets.jsonl"
    source.write_text(json.dumps({"id": "T1", "product": "app", "subject": "crash", "body": "It crashes."}) + "\n")
    with ScriptedServer({"fallback": TRIAGE}) as server, pytest.raises(UsageError, match="cannot tell the output format"):
        run_batch("triage_ticket", root=project, input_path=source, output_path=f"{memory_root}/out.xlsx",
                  model_base_url=server.base_url, api_key="sk-test-locations")  # fmt: skip
    assert server.requests == []
