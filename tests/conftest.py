"""Suite-wide guards: no test reaches a real model endpoint or a shared database by accident.

The environment's OpenAI variables are removed for every test; tests that need an endpoint
start the loopback server (``runner.model.server.ScriptedServer``) and set them explicitly.
``RUNNER_STORE_URL`` is removed too: tests that run on PostgreSQL get their own database
from the fixtures in :mod:`tests.postgres`.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.postgres"]


@pytest.fixture(autouse=True)
def no_real_model_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def no_shared_store(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RUNNER_STORE_URL", "RUNNER_STORE_CONN_ID", "RUNNER_REPORTS_DIR", "RUNNER_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
