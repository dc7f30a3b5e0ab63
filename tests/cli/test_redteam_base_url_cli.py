"""Red-team base URLs: one the HTTP client cannot parse (a bracket left open, a port out of
range) ended ``runner run`` with a traceback; and the ``--base-url`` check echoed the URL it
refused, user info (``https://user:sk-...@host``) and all. Now each is a usage error (exit 2)
naming the setting, and no message shows the credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.project import run_cli, write_project

pytestmark = pytest.mark.timeout(120)

SECRET = "sk-urlsecret-0123456789"
KEY = "sk-model-key-0123456789"
TASK = "apiVersion: runner/v1\nkind: Task\nname: t\nagent: a\ngoal: Say hi.\n"
BAD = [
    f"http://user:{SECRET}@[::1/v1",
    f"http://user:{SECRET}@127.0.0.1:99999/v1",
    f"https://user:{SECRET}@example.com:port/v1?api-key={SECRET}",
]


def project(root: Path, base_url: str | None = None) -> Path:
    own = f", base_url: '{base_url}'" if base_url else ""
    agent = f"apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {{id: gpt-4o-mini, retries: 0{own}}}\n"
    return write_project(root, {"agents.d/a.yaml": agent, "tasks.d/t.yaml": TASK, "rows.jsonl": '{"id": 1}\n'})


def refused(done, where: str) -> None:  # type: ignore[no-untyped-def]
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-2000:]
    assert "Traceback" not in said and SECRET not in said and KEY not in said, said[-2000:]
    assert where in said, said[-2000:]


@pytest.mark.parametrize("url", BAD)
def test_a_malformed_openai_base_url_is_a_usage_error_without_its_credentials(tmp_path: Path, url: str) -> None:
    root = project(tmp_path / "p")
    env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": KEY}
    refused(run_cli(root, None, "run", "t", env=env), "$OPENAI_BASE_URL '")
    batch = run_cli(root, None, "batch", "t", "--input", "rows.jsonl", "--output", "out.jsonl", env=env)
    refused(batch, "is not an http(s) URL with a host")


@pytest.mark.parametrize("url", [*BAD, f"ftp://user:{SECRET}@example.com/v1"])
def test_a_refused_base_url_flag_never_echoes_its_credentials(tmp_path: Path, url: str) -> None:
    root = project(tmp_path / "p")
    refused(run_cli(root, None, "run", "t", "--base-url", url, env={"OPENAI_API_KEY": KEY}), "--base-url")


def test_a_malformed_base_url_in_an_agent_file_names_the_file(tmp_path: Path) -> None:
    root = project(tmp_path / "p", base_url=BAD[0])
    refused(run_cli(root, None, "run", "t", env={"OPENAI_API_KEY": KEY}), "agents.d/a.yaml: /model/base_url 'http://***@[::1/v1'")


@pytest.mark.parametrize("url", [f"user:{SECRET}@example.com/v1", f"{SECRET}", f"unix:{SECRET}@/tmp/socket"])
def test_a_base_url_without_a_scheme_never_shows_what_may_be_a_key(tmp_path: Path, url: str) -> None:
    """``user:sk-...@host`` parses as the scheme ``user`` with the key in its path."""
    root = project(tmp_path / "p")
    refused(run_cli(root, None, "run", "t", env={"OPENAI_BASE_URL": url, "OPENAI_API_KEY": KEY}), "is not an http(s) URL")
