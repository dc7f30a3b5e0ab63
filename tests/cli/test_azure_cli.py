"""An Azure OpenAI deployment runs the shipped triage task, as a real ``runner`` process
against the strict Azure server (deployment path, required ``api-version``, ``api-key``
header); its standard key goes nowhere else; ``--via batch-api`` is refused with what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.model.azure_server import AzureServer
from tests.cli.anthropic_project import TRIAGE, records, runner, tickets, triage_agent
from tests.support.project import copy_shipped, runner_env

pytestmark = pytest.mark.timeout(300)
AZURE_KEY = "az-test-key-0123456789"
SCRIPT = {"fallback": {"content": json.dumps(TRIAGE), "usage": {"prompt_tokens": 100, "completion_tokens": 20}}}
LIVE_COST = (100 * 0.15 + 20 * 0.60) / 1_000_000  # gpt-4o-mini, the shipped price


@pytest.fixture
def project(tmp_path: Path) -> Path:
    agent = triage_agent("{id: gpt-4o-mini, provider: azure, deployment: triage-mini, api_version: 2024-10-21, max_tokens: 200,"
                         " extra_headers: {X-Team: triage}}")
    return copy_shipped(tmp_path / "project", files={"agents.d/triage.yaml": agent})


def _env(server: AzureServer) -> dict[str, str]:
    return runner_env(None, extra={"AZURE_OPENAI_ENDPOINT": server.endpoint, "AZURE_OPENAI_API_KEY": AZURE_KEY,
                                   "ANTHROPIC_API_KEY": "sk-ant-canary"})  # fmt: skip


def test_an_azure_deployment_runs_the_triage_task(project: Path) -> None:
    with AzureServer(SCRIPT, deployments={"triage-mini": "gpt-4o-mini"}, api_key=AZURE_KEY) as server:
        result = runner(project, _env(server), "run", "triage_ticket", "-i", "subject=Crash", "-i", "body=It crashes", "--json")
        assert result.returncode == 0, result.stderr
        (sent,) = server.requests
    finished = json.loads(result.stdout.splitlines()[-1])
    assert finished["status"] == "completed" and finished["cost_usd"] == pytest.approx(LIVE_COST)
    assert sent.path == "/openai/deployments/triage-mini/chat/completions?api-version=2024-10-21"
    assert sent.auth_fingerprint == AzureServer.key_fingerprint(AZURE_KEY) and "authorization" not in sent.headers
    assert sent.headers["x-team"] == "triage"  # model.extra_headers


@pytest.mark.parametrize("temperature", [None, "0.2"])
def test_a_reasoning_model_deployment_gets_its_profiles_request(tmp_path: Path, temperature: str | None) -> None:
    """The deployment of o4-mini is asked as o4-mini is (the server refuses what the model refuses:
    max_tokens, a temperature); the agent's own temperature for it is a located validate error."""
    extra = f", temperature: {temperature}" if temperature else ""
    agent = triage_agent("{id: o4-mini, provider: azure, deployment: triage-o4, api_version: 2024-10-21, max_tokens: 200" + extra + "}")
    root = copy_shipped(tmp_path / "project", files={"agents.d/triage.yaml": agent})
    with AzureServer(SCRIPT, deployments={"triage-o4": "o4-mini"}, api_key=AZURE_KEY) as server:
        result = runner(root, _env(server), "run", "triage_ticket", "-i", "subject=Crash", "-i", "body=It crashes", "--json")
        sent = server.requests
    if temperature:
        assert result.returncode == 2 and "triage.yaml" in result.stderr and "does not accept temperature" in result.stderr
        assert sent == []
        return
    assert result.returncode == 0, result.stderr
    (body,) = [r.body for r in sent]
    assert body["max_completion_tokens"] == 200 and "max_tokens" not in body and "temperature" not in body


def test_an_azure_batch_runs_live_and_batch_api_is_refused_with_what_to_use(project: Path) -> None:
    source, out = tickets(project, 3), project / "out.jsonl"
    with AzureServer(SCRIPT, deployments={"triage-mini": "gpt-4o-mini"}, api_key=AZURE_KEY) as server:
        env = _env(server)
        live = runner(project, env, "batch", "triage_ticket", "--input", str(source), "--output", str(out), "--id-column", "id")
        assert live.returncode == 0, live.stderr
        refused = runner(project, env, "batch", "triage_ticket", "--input", str(source), "--output", str(project / "b.jsonl"),
                         "--id-column", "id", "--via", "batch-api")  # fmt: skip
        assert len(server.requests) == 3  # the refused command sent nothing
    assert all(r["status"] == "done" and r["output"] == TRIAGE for r in records(out).values())
    assert refused.returncode == 2
    assert "has no Batch API" in refused.stderr and "--via live" in refused.stderr and "Traceback" not in refused.stderr
