"""ScriptedServer as an HTTP endpoint: protocol details, recording, concurrency, shutdown, CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runner.model.openai_client import OpenAIChatModel
from runner.model.server import ScriptedServer

pytestmark = pytest.mark.timeout(60)


def post(url: str, body: dict, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read()


def chat(text: str, **extra) -> dict:
    return {"model": "scripted", "messages": [{"role": "user", "content": text}], **extra}


def test_models_endpoint_lists_script_models():
    with ScriptedServer({"models": ["alpha", "beta"], "rules": []}) as srv:
        response = urllib.request.urlopen(srv.base_url + "/models", timeout=10)
        with response:
            listing = json.load(response)
    assert [m["id"] for m in listing["data"]] == ["alpha", "beta"]


def test_fallback_default_and_rule_order():
    rules = [{"name": "greeting", "when": {"last_message": "^hi"}, "times": 1, "reply": "Hello!"}]
    with ScriptedServer(rules) as srv:
        url = srv.base_url + "/chat/completions"
        first = json.loads(post(url, chat("hi there"))[2])
        second = json.loads(post(url, chat("hi again"))[2])
    assert first["choices"][0]["message"]["content"] == "Hello!"
    assert second["choices"][0]["message"]["content"] == "OK"
    assert [r.rule for r in srv.requests] == ["greeting", "fallback"]
    assert srv.script.unused_rules() == []


def test_no_match_without_fallback_is_a_400():
    with ScriptedServer({"fallback": None, "rules": [{"when": {"model": "^gpt"}, "reply": "x"}]}) as srv:
        status, _, body = post(srv.base_url + "/chat/completions", chat("hello"))
    assert status == 400
    assert "no script rule matched" in json.loads(body)["error"]["message"]
    assert srv.requests[0].rule == "no-match"


def test_fault_sends_status_retry_after_and_error_body():
    with ScriptedServer(
        [{"reply": {"fault": {"status": 429, "retry_after": 1.5, "headers": {"x-extra": "1"}}}}]
    ) as srv:
        status, headers, body = post(srv.base_url + "/chat/completions", chat("x"))
    assert status == 429
    assert headers["Retry-After"] == "1.5"
    assert headers["x-extra"] == "1"
    assert json.loads(body)["error"]["type"] == "scripted_fault"


def test_stream_sends_sse_chunks_and_usage_chunk_when_asked():
    with ScriptedServer([{"reply": "one two three"}]) as srv:
        url = srv.base_url + "/chat/completions"
        _, headers, with_usage = post(url, chat("x", stream=True, stream_options={"include_usage": True}))
        _, _, without_usage = post(url, chat("x", stream=True))
    assert headers["Content-Type"] == "text/event-stream"
    events = [line.removeprefix("data: ") for line in with_usage.decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "one two three"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert b'"usage"' not in without_usage


def test_credentials_are_fingerprinted_not_stored(canary_key):
    with ScriptedServer() as srv:
        post(srv.base_url + "/chat/completions", chat("x"), {"Authorization": f"Bearer {canary_key}"})
        post(srv.base_url + "/chat/completions", chat("y"))
    with_key, without_key = srv.requests
    assert canary_key not in repr(srv.requests)
    assert "authorization" not in with_key.headers
    assert with_key.auth_fingerprint == ScriptedServer.key_fingerprint(canary_key)
    assert not without_key.auth_present and without_key.auth_fingerprint is None


def test_invalid_request_body_is_a_400():
    with ScriptedServer() as srv:
        request = urllib.request.Request(srv.base_url + "/chat/completions", data=b"{not json")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        caught.value.close()
    assert caught.value.code == 400
    assert srv.requests[0].rule == "invalid-request"


async def test_fifty_concurrent_requests_with_limited_rules(canary_key, make_request):
    rules = [{"name": "limited", "times": 10, "reply": "limited"}, {"reply": "plenty"}]
    with ScriptedServer(rules) as srv:
        model = OpenAIChatModel("scripted", base_url=srv.base_url, api_key=canary_key, timeout_seconds=30)
        try:
            responses = await asyncio.gather(*(model.complete(make_request(f"q{i}")) for i in range(50)))
        finally:
            await model.aclose()
    contents = [r.content for r in responses]
    assert contents.count("limited") == 10 and contents.count("plenty") == 40
    assert sorted(r.body["messages"][0]["content"] for r in srv.requests) == sorted(f"q{i}" for i in range(50))


def test_close_wakes_pending_hangs():
    srv = ScriptedServer([{"reply": {"hang_seconds": 600}}]).start()
    outcome: list[object] = []

    def call() -> None:
        try:
            post(srv.base_url + "/chat/completions", chat("x"))
        except Exception as exc:  # the server drops the connection: any error is fine here
            outcome.append(type(exc))

    caller = threading.Thread(target=call)
    caller.start()
    while not srv.requests:
        threading.Event().wait(0.01)
    srv.close()  # must return promptly; the test timeout guards it
    caller.join(timeout=30)
    assert not caller.is_alive()
    assert outcome


def test_cli_serves_a_script_file_until_terminated(tmp_path: Path):
    script = tmp_path / "script.yaml"
    script.write_text("rules:\n  - when: {last_message: ping}\n    reply: pong\n", encoding="utf-8")
    record = tmp_path / "requests.jsonl"
    command = [sys.executable, "-m", "runner.model.server", "--script", str(script), "--record", str(record)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        _, _, body = post(base_url + "/chat/completions", chat("ping"))
        assert json.loads(body)["choices"][0]["message"]["content"] == "pong"
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
        process.stdout.close()
    assert json.loads(record.read_text().splitlines()[0])["rule"] == "rules[0]"


def test_cli_reports_a_bad_script(tmp_path: Path):
    script = tmp_path / "bad.yaml"
    script.write_text("rules:\n  - reply: {tool_call: []}\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "runner.model.server", "--script", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "unknown key 'tool_call'. Did you mean 'tool_calls'?" in result.stderr


@pytest.mark.parametrize("sent", [None, "Bearer sk-wrong", "Bearer sk-right-x", "sk-right"])
def test_a_server_that_wants_a_key_answers_401_to_any_other(sent: str | None) -> None:
    with ScriptedServer({"fallback": "hi"}, api_key="sk-right") as srv:
        headers = {"Authorization": sent} if sent else {}
        status, _, payload = post(srv.base_url + "/chat/completions", chat("x"), headers)
        good, _, _ = post(srv.base_url + "/chat/completions", chat("x"), {"Authorization": "Bearer sk-right"})
        rules = [r.rule for r in srv.requests]
    assert (status, json.loads(payload)["error"]["code"]) == (401, "invalid_api_key") and good == 200
    assert rules[0] == "unauthorized" and rules[1] != "unauthorized"


def test_what_the_server_billed_is_priced_at_the_shipped_rates() -> None:
    from runner.config.prices import batch_price, cost_usd, default_prices, find_price

    server = ScriptedServer({"fallback": "Done."})
    usage = {"prompt_tokens": 1000, "completion_tokens": 200, "prompt_tokens_details": {"cached_tokens": 400}}
    server.bill({"model": "gpt-4o-mini", "usage": usage})
    server.bill({"model": "gpt-4o-mini-2024-07-18", "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
    price = find_price(default_prices(), "gpt-4o-mini")
    assert price is not None
    first, second = cost_usd(price, 1000, 200, 400), cost_usd(price, 10, 5)
    assert server.billed_costs() == [("gpt-4o-mini", first), ("gpt-4o-mini-2024-07-18", second)]  # cached input at its rate
    assert server.billed_usd() == first + second and server.billed_usd(since=1) == second
    assert server.billed_usd(batch=True, since=1) == cost_usd(batch_price(price), 10, 5)
    server.bill({"model": "no-such-model", "usage": {"prompt_tokens": 1}})
    with pytest.raises(LookupError, match="no-such-model"):
        server.billed_usd()
