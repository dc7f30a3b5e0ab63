"""The README's two examples, run as the README runs them: the ticket-answering batch over
examples/tickets/questions.csv, and market_scan (web_search + browse in real Chromium +
a knowledge base), each against the loopback model server with the shipped script."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from runner.model.script_rules import Script
from runner.model.server import ScriptedServer
from tests.support.project import REPO, copy_shipped, run_cli
from tests.support.services import requires

pytestmark = pytest.mark.timeout(300)
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project", ("agents.d", "tasks.d", "examples"))


def demo_site() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_site", REPO / "examples/web/site.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ticket_batch_answers_from_the_docs_with_citations(project: Path) -> None:
    script = Script.load(project / "examples/tickets/answer_script.yaml")
    with ScriptedServer(script) as model:
        result = run_cli(project, model, "batch", "answer_ticket", "--input", "examples/tickets/questions.csv",
                        "--output", "answers.jsonl", "--id-column", "id")  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = {row["id"]: row for row in map(json.loads, (project / "answers.jsonl").read_text().splitlines())}
    assert [rows[i]["status"] for i in sorted(rows)] == ["done"] * 5
    assert "[1] (examples/docs/billing.md — VAT and reverse charge)" in rows["Q-001"]["output"]
    assert "ERR_TIMEOUT" in rows["Q-002"]["output"] and "pos-terminal.md" in rows["Q-002"]["output"]
    assert "does not cover" in rows["Q-005"]["output"]
    assert (project / ".runner/knowledge/acme_docs.sqlite3").is_file()


def test_a_ticket_reply_the_docs_do_not_support_fails_its_row(project: Path) -> None:
    path = project / "examples/tickets/answer_script.yaml"
    data = yaml.safe_load(path.read_text())
    wrong = "Yes: annual plans are refunded within 90 days of purchase by Stripe."
    data["rules"] = [r for r in data["rules"] if "Refunds" not in str(r["when"])]
    data["rules"].insert(0, {"when": {"last_message": "^\\[1\\] examples/docs/billing.md — Acme Billing Portal > Refunds|none of your tool results"}, "reply": {"content": wrong}})
    with ScriptedServer(Script.from_obj(data)) as model:
        result = run_cli(project, model, "batch", "answer_ticket", "--input", "examples/tickets/questions.csv",
                        "--output", "answers.jsonl", "--id-column", "id")  # fmt: skip
    assert result.returncode == 1
    rows = {row["id"]: row for row in map(json.loads, (project / "answers.jsonl").read_text().splitlines())}
    assert rows["Q-004"]["status"] == "failed" and rows["Q-004"]["error_kind"] == "evidence"
    assert "90" in rows["Q-004"]["error"] and "Stripe" in rows["Q-004"]["error"]
    assert all(rows[i]["status"] == "done" for i in ("Q-001", "Q-002", "Q-003", "Q-005"))


@pytest.mark.browser
@requires(CHROMIUM.exists(), "headless chromium is not installed at /usr/bin/chromium")
def test_market_scan_searches_browses_and_cites(project: Path) -> None:
    site = demo_site().serve(0)
    port = str(site.server_address[1])
    try:
        for path in (project / "agents.d/market_researcher.yaml", project / "examples/web/market_script.yaml"):
            path.write_text(path.read_text().replace("8766", port))
        with ScriptedServer(Script.load(project / "examples/web/market_script.yaml")) as model:
            result = run_cli(project, model, "run", "market_scan")
            observations = [m["content"] for r in model.requests for m in r.body["messages"] if m["role"] == "tool"]
    finally:
        site.shutdown()
        site.server_close()
    assert result.returncode == 0, result.stderr
    assert any("Poland and Italy led the growth" in text for text in observations)  # written by the page's JavaScript
    (report_dir,) = (project / "reports/market_scan").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    locations = [s["location"] for s in record["sources"]]
    assert f"http://127.0.0.1:{port}/news/heat-pumps" in locations and "examples/market/notes.md" in locations
    assert len(locations) == len(set(locations))  # the searched and browsed page is one source
    (screenshot,) = [a for a in record["artifacts"] if a["media_type"] == "image/png"]
    assert (report_dir / screenshot["path"]).read_bytes().startswith(b"\x89PNG")
    assert "812,000 units" in record["final_output"]


def test_a_missing_browser_refuses_the_run_before_any_call(project: Path) -> None:
    with ScriptedServer(Script.load(project / "examples/web/market_script.yaml")) as model:
        result = run_cli(project, model, "run", "market_scan", env={"RUNNER_CHROMIUM": "/nonexistent/chromium"})
        assert model.requests == []
    assert result.returncode == 2 and "no Chromium at /nonexistent/chromium" in result.stderr
    assert "Traceback" not in result.stderr
