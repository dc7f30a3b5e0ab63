"""web_search through the real CLI: the model (loopback server) asks, the provider (loopback,
in Brave's real format, allow-listed) answers, the report lists what was found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.loopback_site import LoopbackSite, sample
from tests.support.project import run_cli, tool_call, write_project

pytestmark = pytest.mark.timeout(300)
SEARCH_KEY = "brave-key-0123456789abcdef"
ANSWER = "Heat pump sales rose 14% in Q3, led by Poland and Italy (https://www.example-energy.com/news/heat-pumps-q3)."


def project(root: Path, search_url: str, network: str = 'network: {allow_private_networks: ["127.0.0.1/32"]}') -> Path:
    agent = f"""\
apiVersion: runner/v1
kind: Agent
name: researcher
model: {{id: gpt-4o-mini}}
tools:
  - name: web_search
    settings: {{provider: brave, url: "{search_url}", api_key_env: TEST_BRAVE_KEY, max_results: 2}}
{network}
"""
    task = """\
apiVersion: runner/v1
kind: Task
name: scan
agent: researcher
goal: What happened to heat pump sales this quarter?
"""
    return write_project(root, {"agents.d/researcher.yaml": agent, "tasks.d/scan.yaml": task})


SCRIPT = {
    "rules": [
        {"when": {"last_role": "user"}, "reply": tool_call("web_search", query="heat pump sales Q3 2026")},
        {"when": {"last_role": "tool"}, "reply": {"content": ANSWER}},
    ]
}


def test_web_search_run_end_to_end(tmp_path: Path) -> None:
    with LoopbackSite() as site, ScriptedServer(SCRIPT) as model:
        site.json("/res/v1/web/search", sample("brave"))
        root = project(tmp_path, site.url("/res/v1/web/search"))
        result = run_cli(root, model, "run", "scan", env={"TEST_BRAVE_KEY": SEARCH_KEY})
        assert result.returncode == 0, result.stderr
        (search,) = site.seen("/res/v1/web/search")
        assert search.headers["x-subscription-token"] == SEARCH_KEY
        observation = model.requests[1].body["messages"][-1]["content"]
    assert "Heat pump sales rose 14% in Q3" in observation and "date: 2026-10-02" in observation
    assert ANSWER in result.stdout
    (report_dir,) = (root / "reports" / "scan").iterdir()
    record = json.loads((report_dir / "report.json").read_text())
    assert [s["location"] for s in record["sources"]] == [
        "https://www.example-energy.com/news/heat-pumps-q3",
        "https://research.example.org/reports/hvac-outlook",
    ]
    assert "https://research.example.org/reports/hvac-outlook" in (report_dir / "report.md").read_text()
    for path in [*report_dir.rglob("*"), *(root / ".runner").glob("runs.sqlite3*")]:
        if path.is_file():
            assert SEARCH_KEY.encode() not in path.read_bytes(), path


def test_without_the_allow_list_the_loopback_provider_is_refused(tmp_path: Path) -> None:
    script = {"rules": [SCRIPT["rules"][0], {"when": {"last_role": "tool"}, "reply": {"content": "No results."}}]}
    with LoopbackSite() as site, ScriptedServer(script) as model:
        site.json("/res/v1/web/search", sample("brave"))
        root = project(tmp_path, site.url("/res/v1/web/search"), network="")
        result = run_cli(root, model, "run", "scan", "--no-report", env={"TEST_BRAVE_KEY": SEARCH_KEY})
        observation = model.requests[1].body["messages"][-1]["content"]
        assert site.requests == []
    assert result.returncode == 0, result.stderr
    assert "refused" in observation and "not a public address" in observation


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ("web_search", "tool 'web_search' needs settings (provider)"),
        ("{name: web_search, settings: {provider: searxng}}", "'url' is a required property"),
        ("{name: web_search, settings: {provider: brave}}", "'api_key_env' is a required property"),
        ("{name: web_search, settings: {provider: bing, url: 'https://x'}}", "'bing' is not one of"),
        ("{name: web_search, settings: {provider: brave, api_key_env: 'sk-123-live'}}", "value hidden in case it is a key"),
        ("{name: web_search, settings: {provider: tavily, api_key_env: K, max_results: 500}}", "500 is greater than"),
    ],
)
def test_validate_checks_web_search_settings(tmp_path: Path, settings: str, message: str) -> None:
    agent = f"apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {{id: gpt-4o-mini}}\ntools: [{settings}]\n"
    root = write_project(tmp_path, {"agents.d/a.yaml": agent})
    result = run_cli(root, None, "validate")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "agents.d/a.yaml:5:" in result.stdout + result.stderr
    assert message in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("networks", "message"),
    [('["not-a-cidr"]', "does not match"), ('["10.0.0.0/33"]', "not a CIDR range"), ('["0.0.0.0/0"]', "exempts every address")],
)
def test_validate_checks_private_network_exemptions(tmp_path: Path, networks: str, message: str) -> None:
    agent = f"apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {{id: gpt-4o-mini}}\nnetwork: {{allow_private_networks: {networks}}}\n"
    root = write_project(tmp_path, {"agents.d/a.yaml": agent})
    result = run_cli(root, None, "validate")
    assert result.returncode == 2, result.stdout
    assert "/network/allow_private_networks/0" in result.stdout + result.stderr
    assert message in result.stdout + result.stderr
