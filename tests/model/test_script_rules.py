"""Script rules: matching, order, use limits, fallback, loading and validation."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from runner.errors import ConfigError
from runner.model.replies import Reply
from runner.model.script_rules import Script

SCRIPTS = Path(__file__).parent / "scripts"


def body(*messages: tuple[str, str], tools: tuple[str, ...] = (), model: str = "scripted") -> dict:
    return {
        "model": model,
        "messages": [{"role": role, "content": content} for role, content in messages],
        "tools": [{"type": "function", "function": {"name": name}} for name in tools],
    }


def test_example_script_rules_match_in_order():
    script = Script.load(SCRIPTS / "research.yaml")
    ask = body(("user", "What is the capital of France?"), tools=("web_search",))
    assert script.next(ask).rule == "search-first"
    assert script.next(ask).rule == "fallback"  # times: 1 used up
    assert script.next(ask).reply == Reply(content="Done.")
    answered = body(("user", "capital of France?"), ("assistant", ""), ("tool", "Paris, France"))
    assert script.next(answered).rule == "answer"
    assert script.next(body(("system", "please rate limit me"), ("user", "x"))).reply.fault.status == 429
    assert script.next(body(("user", "x"), model="gpt-test")).reply.latency_seconds == 0.2
    assert script.unused_rules() == ["limited"]
    assert script.models == ["scripted", "gpt-test"]


def test_tools_matcher_needs_an_offered_tool():
    script = Script.from_obj([{"when": {"tools": "search"}, "reply": "with tools"}])
    assert script.next(body(("user", "x"))).rule == "fallback"
    assert script.next(body(("user", "x"), tools=("web_search",))).rule == "rules[0]"


def test_last_message_looks_at_the_last_user_or_tool_message():
    script = Script.from_obj([{"when": {"last_message": "^result"}, "reply": "seen"}])
    assert script.next(body(("tool", "result 42"), ("assistant", "thinking"))).rule == "rules[0]"
    assert script.next(body(("user", "no"), ("assistant", "result"))).rule == "fallback"


def test_json_script_and_bare_list(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"reply": {"content": "from json"}}]))
    assert Script.load(path).next(body(("user", "x"))).reply.content == "from json"


def test_times_is_exact_under_concurrency():
    script = Script.from_obj([{"times": 25, "reply": "limited"}])
    seen: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(20):
            rule = script.next(body(("user", "x"))).rule
            with lock:
                seen.append(rule)

    threads = [threading.Thread(target=worker) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen.count("rules[0]") == 25 and seen.count("fallback") == 175


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([{"reply": {"tool_call": []}}], "script: rules[0].reply: unknown key 'tool_call'. Did you mean 'tool_calls'?"),
        ([{"when": {"last_mesage": "x"}, "reply": "x"}], "Did you mean 'last_message'?"),
        ([{"when": {"system": "("}, "reply": "x"}], "rules[0].when.system: invalid regex"),
        ([{"times": 0, "reply": "x"}], "rules[0].times: expected a positive integer"),
        ([{"when": {}}], "rules[0]: a rule needs a reply"),
        ([{"reply": {"fault": {"status": 200}}}], "fault.status: expected an HTTP error status 400-599"),
        ([{"reply": {"content": "x", "fault": {"status": 500}}}], "a fault reply cannot also have content"),
        ([{"reply": {"tool_calls": [{"arguments": {}}]}}], "tool_calls[0].name: a tool call needs a name"),
        ([{"reply": {"usage": {"prompt_tokens": -1}}}], "usage.prompt_tokens: expected a non-negative integer"),
        ([{"reply": {"latency_seconds": "soon"}}], "reply.latency_seconds: unexpected value 'soon'"),
        ({"rulez": []}, "unknown key 'rulez'. Did you mean 'rules'?"),
    ],
)
def test_invalid_scripts_name_the_problem(obj, message):
    with pytest.raises(ConfigError) as caught:
        Script.from_obj(obj)
    assert message in str(caught.value)


def test_unreadable_script_file_is_a_config_error(tmp_path):
    (tmp_path / "bad.yaml").write_text("rules: [\n")
    with pytest.raises(ConfigError, match="cannot read script"):
        Script.load(tmp_path / "bad.yaml")
    with pytest.raises(ConfigError, match="cannot read script"):
        Script.load(tmp_path / "missing.yaml")
