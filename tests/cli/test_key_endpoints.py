"""A key goes only to its own endpoint: the real CLI against two loopback servers.

The *standard* server stands for the endpoint ``OPENAI_BASE_URL`` names (and ``OPENAI_API_KEY``
belongs to); the *foreign* one for a ``model.base_url`` an agent file points elsewhere. The
servers record a fingerprint of every ``Authorization`` header they receive, so each test
asserts what key (if any) reached which server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.errors import ConfigError
from runner.model.server import ScriptedServer

STANDARD_KEY = "sk-standard-canary-0123456789"
OTHER_KEY = "sk-foreign-own-key-9876543210"
ANSWER = "forty-two"

TASKS = """\
apiVersion: runner/v1
kind: Task
name: ask
inputs: {q: {type: string, default: what}}
agent: asker
goal: "{{ inputs.q }}"
---
apiVersion: runner/v1
kind: Task
name: pipe
pipeline:
  steps:
    - {id: first, agent: helper, goal: "one"}
    - {id: second, agent: asker, goal: "two", depends_on: [first]}
"""


def agent(name: str, model: str) -> str:
    return f"apiVersion: runner/v1\nkind: Agent\nname: {name}\nmodel: {model}\nsystem_prompt: Answer.\n"


@pytest.fixture
def servers() -> Iterator[tuple[ScriptedServer, ScriptedServer]]:
    with ScriptedServer({"fallback": ANSWER}) as standard, ScriptedServer({"fallback": ANSWER}) as foreign:
        yield standard, foreign


def project(tmp_path: Path, asker_model: str, helper_model: str = "{id: gpt-4o-mini}") -> Path:
    root = tmp_path / "project"
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d" / "asker.yaml").write_text(agent("asker", asker_model))
    (root / "agents.d" / "helper.yaml").write_text(agent("helper", helper_model))
    (root / "tasks.d" / "tasks.yaml").write_text(TASKS)
    (root / "rows.csv").write_text("q\nfirst\nsecond\n")
    return root


def runner(root: Path, *args: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env.pop("OTHER_KEY", None)
    env.update(env_vars)
    return subprocess.run(
        [sys.executable, "-m", "runner", *args], cwd=root, env=env, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )


def fingerprints(server: ScriptedServer) -> set[str | None]:
    return {r.auth_fingerprint for r in server.requests}


def fp(key: str) -> str:
    return ScriptedServer.key_fingerprint(key)


def assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "agents.d/asker.yaml:" in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    assert STANDARD_KEY not in result.stdout + result.stderr and OTHER_KEY not in result.stdout + result.stderr


# --- an agent with its own base_url and no api_key_env --------------------------------------


@pytest.mark.parametrize("command", [["run", "ask"], ["batch", "ask", "--input", "rows.csv", "--output", "out.jsonl"]])
def test_standard_key_is_not_sent_to_an_agents_own_base_url(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer], command: list[str]
) -> None:
    standard, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}'}}")
    result = runner(root, *command, OPENAI_BASE_URL=standard.base_url, OPENAI_API_KEY=STANDARD_KEY)
    assert_refused(result, "/model/base_url", "OPENAI_API_KEY is not sent", "api_key_env")
    assert foreign.requests == [] and standard.requests == []
    assert not (root / "out.jsonl").exists()
    assert not (root / ".runner" / "runs.sqlite3").exists() or "ask-" not in runner(root, "runs").stdout


def test_refused_with_the_default_endpoint_too(tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]) -> None:
    """No OPENAI_BASE_URL: the standard endpoint is api.openai.com, and the key belongs there."""
    _, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}'}}")
    result = runner(root, "run", "ask", OPENAI_API_KEY=STANDARD_KEY)
    assert_refused(result, "https://api.openai.com/v1")
    assert foreign.requests == []


def test_a_pipeline_step_agent_is_checked_before_any_step_runs(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]
) -> None:
    standard, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}'}}")
    result = runner(root, "run", "pipe", OPENAI_BASE_URL=standard.base_url, OPENAI_API_KEY=STANDARD_KEY)
    assert_refused(result)
    assert standard.requests == [] and foreign.requests == []  # the first step did not run either


def test_naming_the_standard_variable_in_api_key_env_is_refused(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]
) -> None:
    standard, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}', api_key_env: OPENAI_API_KEY}}")
    result = runner(root, "run", "ask", OPENAI_BASE_URL=standard.base_url, OPENAI_API_KEY=STANDARD_KEY)
    assert_refused(result, "standard variable")
    assert foreign.requests == []


def test_an_unset_own_variable_is_refused_naming_it(tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]) -> None:
    standard, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}', api_key_env: OTHER_KEY}}")
    result = runner(root, "run", "ask", OPENAI_BASE_URL=standard.base_url, OPENAI_API_KEY=STANDARD_KEY)
    assert_refused(result, "set OTHER_KEY")
    assert foreign.requests == []


# --- what still works --------------------------------------------------------------------------


def test_an_agents_own_variable_goes_to_its_own_endpoint(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]
) -> None:
    standard, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}', api_key_env: OTHER_KEY}}")
    env = {"OPENAI_BASE_URL": standard.base_url, "OPENAI_API_KEY": STANDARD_KEY, "OTHER_KEY": OTHER_KEY}
    result = runner(root, "run", "pipe", **env)
    assert result.returncode == 0, result.stderr
    assert fingerprints(foreign) == {fp(OTHER_KEY)}  # the asker step
    assert fingerprints(standard) == {fp(STANDARD_KEY)}  # the helper step, on the standard endpoint
    batch = runner(root, "batch", "ask", "--input", "rows.csv", "--output", "out.jsonl", **env)
    assert batch.returncode == 0, batch.stderr
    assert fingerprints(foreign) == {fp(OTHER_KEY)}


def test_a_keyless_foreign_endpoint_gets_no_key_when_none_is_set(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]
) -> None:
    """A local vLLM/Ollama in base_url needs no key: with no standard key set nothing can leak."""
    _, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}'}}")
    result = runner(root, "run", "ask")
    assert result.returncode == 0, result.stderr
    assert foreign.requests and fingerprints(foreign) == {fp("not-needed")}


def test_an_agent_base_url_equal_to_openai_base_url_is_the_standard_endpoint(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]
) -> None:
    standard, _ = servers
    spelled_differently = standard.base_url + "/"
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{spelled_differently}'}}")
    result = runner(root, "run", "ask", OPENAI_BASE_URL=standard.base_url, OPENAI_API_KEY=STANDARD_KEY)
    assert result.returncode == 0, result.stderr
    assert fingerprints(standard) == {fp(STANDARD_KEY)}


def test_base_url_flag_is_the_standard_endpoint_for_this_command(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]
) -> None:
    """--base-url replaces OPENAI_BASE_URL: the operator's own key goes where the operator says."""
    standard, foreign = servers
    root = project(tmp_path, "{id: gpt-4o-mini}")
    result = runner(
        root, "run", "ask", "--base-url", foreign.base_url, OPENAI_BASE_URL=standard.base_url, OPENAI_API_KEY=STANDARD_KEY
    )
    assert result.returncode == 0, result.stderr
    assert standard.requests == [] and fingerprints(foreign) == {fp(STANDARD_KEY)}


def test_base_url_flag_does_not_receive_an_agents_own_key(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]
) -> None:
    """The agent's OTHER_KEY belongs to its own base_url; --base-url elsewhere must not get it."""
    standard, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}', api_key_env: OTHER_KEY}}")
    refused = runner(root, "run", "ask", "--base-url", standard.base_url, OTHER_KEY=OTHER_KEY)
    assert_refused(refused, "/model/api_key_env", "OTHER_KEY belongs to")
    assert standard.requests == [] and foreign.requests == []
    with_own = runner(root, "run", "ask", "--base-url", standard.base_url, OTHER_KEY=OTHER_KEY, OPENAI_API_KEY=STANDARD_KEY)
    assert with_own.returncode == 0, with_own.stderr
    assert fingerprints(standard) == {fp(STANDARD_KEY)} and foreign.requests == []


# --- the caller's key (the Airflow connection's password) --------------------------------------


def test_a_callers_key_goes_only_to_its_own_host(tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]) -> None:
    """``runner.api`` is what the Airflow operators call with the connection's host and password."""
    from runner.api import run_batch, run_task

    standard, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}'}}")
    conn_key = "sk-airflow-connection-key-555"
    with pytest.raises(ConfigError, match="the API key given by the caller"):
        run_task("ask", root=root, api_key=conn_key, store_path=tmp_path / "s.sqlite3")
    with pytest.raises(ConfigError, match="/model/base_url"):
        run_batch("ask", root=root, input_path=root / "rows.csv", output_path=tmp_path / "o.jsonl", api_key=conn_key)
    assert foreign.requests == []
    manifest = run_task("ask", root=root, api_key=conn_key, model_base_url=standard.base_url, store_path=tmp_path / "s.sqlite3")
    assert manifest["status"] == "completed"
    assert fingerprints(standard) == {fp(conn_key)} and foreign.requests == []


def test_the_refusal_is_reported_as_json_free_of_keys(tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]) -> None:
    standard, foreign = servers
    root = project(tmp_path, f"{{id: gpt-4o-mini, base_url: '{foreign.base_url}'}}")
    result = runner(root, "run", "ask", "--json", OPENAI_BASE_URL=standard.base_url, OPENAI_API_KEY=STANDARD_KEY)
    assert result.returncode == 2
    assert STANDARD_KEY not in result.stdout + result.stderr
    for line in result.stdout.splitlines():
        json.loads(line)


# --- the same rule for custom http tools -------------------------------------------------------


def http_tool(url: str, variable: str) -> str:
    return (
        "apiVersion: runner/v1\nkind: Tool\nname: lookup\ndescription: Look up.\ntype: http\n"
        f'http: {{url: "{url}", api_key_env: {variable}}}\n'
        "parameters:\n  item: {type: string, description: what}\n  host: {type: string, description: where}\n"
    )


@pytest.mark.parametrize(
    ("url", "variable", "words"),
    [
        ("https://example.com/api/{item}", "OPENAI_API_KEY", "a standard variable sent only to the standard"),
        ("https://{host}/api/{item}", "OTHER_KEY", "parameter in its scheme or host"),
        ("https://api.example.com@{host}/x", "OTHER_KEY", "parameter in its scheme or host"),
        ("https://{host}.example.com/x", "OTHER_KEY", "parameter in its scheme or host"),
    ],
)
def test_an_http_tool_key_cannot_leave_its_declared_host(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer], url: str, variable: str, words: str
) -> None:
    standard, _ = servers
    root = project(tmp_path, "{id: gpt-4o-mini}\ntools: [lookup]")
    (root / "tools.d").mkdir()
    (root / "tools.d" / "lookup.yaml").write_text(http_tool(url, variable))
    result = runner(
        root, "run", "ask", OPENAI_BASE_URL=standard.base_url, OPENAI_API_KEY=STANDARD_KEY, OTHER_KEY=OTHER_KEY
    )
    assert result.returncode == 2, result.stderr
    assert "tools.d/lookup.yaml" in result.stderr and words in result.stderr
    assert standard.requests == []  # refused before the first model call
    assert STANDARD_KEY not in result.stderr and OTHER_KEY not in result.stderr


def test_an_http_tool_with_its_own_key_and_a_literal_host_still_runs(
    tmp_path: Path, servers: tuple[ScriptedServer, ScriptedServer]
) -> None:
    standard, _ = servers
    root = project(tmp_path, "{id: gpt-4o-mini}\ntools: [lookup]")
    (root / "tools.d").mkdir()
    (root / "tools.d" / "lookup.yaml").write_text(http_tool("https://api.example.com/v1/{item}", "OTHER_KEY"))
    result = runner(root, "run", "ask", OPENAI_BASE_URL=standard.base_url, OPENAI_API_KEY=STANDARD_KEY, OTHER_KEY=OTHER_KEY)
    assert result.returncode == 0, result.stderr
    assert fingerprints(standard) == {fp(STANDARD_KEY)}
