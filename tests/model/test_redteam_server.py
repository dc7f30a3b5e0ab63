"""The scripted server's ``fault: {billed: true}``: a completion billed, then an HTTP error (a
gateway that failed after its upstream finished), for testing the caps against it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from runner.errors import ConfigError
from runner.model.script_rules import Script
from runner.model.server import ScriptedServer

pytestmark = pytest.mark.timeout(30)


def post(server: ScriptedServer) -> int:
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}).encode()
    request = urllib.request.Request(f"{server.base_url}/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        error.close()
        return int(error.code)


def test_a_billed_fault_bills_its_completion_and_answers_the_error() -> None:
    rules = [{"times": 1, "reply": {"fault": {"status": 502, "billed": True}, "usage": {"completion_tokens": 100}}},
             {"times": 1, "reply": {"fault": {"status": 500}}}]  # fmt: skip
    with ScriptedServer({"rules": rules}) as server:
        assert [post(server), post(server), post(server)] == [502, 500, 200]
        billed = server.billed
    assert len(billed) == 2  # the billed fault and the answer; the plain 500 bills nothing
    assert billed[0][1]["completion_tokens"] == 100 and billed[0][1]["prompt_tokens"] > 0


def test_billed_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match="billed"):
        Script.from_obj([{"reply": {"fault": {"status": 500, "billed": "yes"}}}])
