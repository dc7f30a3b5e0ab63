"""Suite-wide guard: no test reaches a real model endpoint by accident.

The environment's OpenAI variables are removed for every test; tests that need an endpoint
start the loopback server (``runner.model.server.ScriptedServer``) and set them explicitly.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_real_model_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
