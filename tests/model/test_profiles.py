"""Model profiles: which profile a model id gets, the request body built from it (checked
against the ``openai`` package's request types), prices at a tier and for cache writes,
usage details read from the wire, and the loopback server refusing what OpenAI refuses."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from runner.config.prices import cost_usd, default_prices, tier_price
from runner.config.profiles import find_profile, shipped_profiles
from runner.config.project import load_project
from runner.config.specs import ModelSpec
from runner.model.base import Message
from runner.model.call_settings import call_settings, strict_response_format
from runner.model.server import ScriptedServer
from runner.model.strict_openai import conformance_error, model_error
from runner.model.wire import parse_usage, request_body
from tests.support.project import write_project

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["category"],
    "properties": {"category": {"enum": ["bug", "billing"]}},
}  # fmt: skip
MESSAGES = (Message("system", "You triage."), Message("user", "printer jammed"))


@pytest.mark.parametrize(
    ("model_id", "profile"),
    [
        ("o4-mini", "o-series"), ("o3", "o-series"), ("o1-2024-12-17", "o-series"), ("openai/o4-mini", "o-series"),
        ("gpt-5", "gpt-5"), ("gpt-5-mini", "gpt-5"), ("gpt-5.1", "gpt-5"),
        ("gpt-4o-mini", "gpt-4o"), ("gpt-4o-mini-2024-07-18", "gpt-4o"), ("gpt-4.1-nano", "gpt-4o"),
        ("claude-sonnet-4-5", "claude"), ("qwen2.5:7b", "default"), ("deepseek-chat", "default"),
    ],
)  # fmt: skip
def test_each_model_family_gets_its_profile(model_id: str, profile: str) -> None:
    assert find_profile(shipped_profiles(), model_id).name == profile


def test_a_project_changes_a_shipped_profile_and_adds_its_own(tmp_path: Path) -> None:
    write_project(tmp_path, {"agents.d/profiles.yaml": """\
apiVersion: runner/v1
kind: ModelProfiles
profiles:
  gpt-4o: {strict_json_schema: false}
  qwen3: {match: ["qwen3*"], reasoning_efforts: [low, high], batch_api: null}
"""})
    project, problems = load_project(tmp_path)
    assert problems == []
    changed, added = find_profile(project.profiles, "gpt-4o-mini"), find_profile(project.profiles, "qwen3-32b")
    assert changed.strict_json_schema is False and changed.tokens_field == "max_completion_tokens"  # the rest kept
    assert added.name == "qwen3" and added.reasoning_efforts == ("low", "high") and added.batch_api is None
    assert added.tokens_field == "max_tokens"  # from the default profile
    assert find_profile(project.profiles, "qwen3-32b", named="o-series").name == "o-series"


def test_a_new_profile_without_match_is_a_located_error(tmp_path: Path) -> None:
    write_project(tmp_path, {"agents.d/profiles.yaml": "apiVersion: runner/v1\nkind: ModelProfiles\nprofiles:\n  mine: {top_p: false}\n"})
    _, problems = load_project(tmp_path)
    assert [(p.line, p.pointer) for p in problems] == [(4, "/profiles/mine")]
    assert "give it match" in problems[0].message


def body_for(model_id: str, spec: ModelSpec, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    settings = call_settings(spec, find_profile(shipped_profiles(), model_id), schema)
    return request_body(settings.request(model_id, MESSAGES, structured=True))


def test_reasoning_models_get_max_completion_tokens_and_conform() -> None:
    spec = ModelSpec(id="o4-mini", max_tokens=300, reasoning_effort="low", service_tier="flex", seed=7, stop=("END",))
    body = body_for("o4-mini", spec, SCHEMA)
    assert "max_tokens" not in body and body["max_completion_tokens"] == 300
    assert (body["reasoning_effort"], body["service_tier"], body["seed"], body["stop"]) == ("low", "flex", 7, ["END"])
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "strict": True, "schema": SCHEMA}}
    assert conformance_error(body) is None and model_error(body) is None


def test_a_compatible_model_gets_max_tokens_and_no_strict_format() -> None:
    body = body_for("qwen2.5:7b", ModelSpec(id="qwen2.5:7b", max_tokens=50, temperature=0.2), SCHEMA)
    assert body["max_tokens"] == 50 and body["temperature"] == 0.2
    assert "response_format" not in body and "max_completion_tokens" not in body
    assert conformance_error(body) is None


def test_structured_output_off_or_a_loose_schema_sends_no_format() -> None:
    assert "response_format" not in body_for("gpt-4o-mini", ModelSpec(id="gpt-4o-mini", structured_output="off"), SCHEMA)
    loose = {"type": "object", "properties": {"category": {"type": "string"}}}  # not closed: outside strict mode
    assert strict_response_format(loose) is None
    assert "response_format" not in body_for("gpt-4o-mini", ModelSpec(id="gpt-4o-mini"), loose)


def test_extra_body_adds_fields_but_never_replaces_runners() -> None:
    spec = ModelSpec(id="gpt-4o-mini", max_tokens=10, extra_body={"user": "team-a", "max_completion_tokens": 99999})
    body = body_for("gpt-4o-mini", spec)
    assert body["user"] == "team-a" and body["max_completion_tokens"] == 10
    assert conformance_error(body) is None


def test_cache_writes_and_tiers_are_priced_from_prices_yaml() -> None:
    price = default_prices()["o4-mini"]
    assert tier_price(price, "standard") is price
    flex = tier_price(price, "batch")
    assert flex is not None and (flex.input_per_mtok, flex.output_per_mtok) == (0.55, 2.2)
    priority = tier_price(price, "priority")
    assert priority is not None and (priority.input_per_mtok, priority.output_per_mtok) == (2.0, 8.0)
    assert tier_price(default_prices()["gpt-5-nano"], "priority") is None  # no priority rates: unpriced
    written = cost_usd(price, 1_000_000, 0, cache_write_tokens=400_000)
    assert written == pytest.approx(1.1)  # no cache-write rate known: the input rate
    claude_like = type(price)(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75)
    assert cost_usd(claude_like, 1_000_000, 0, 200_000, 400_000) == pytest.approx((400_000 * 3 + 200_000 * 0.3 + 400_000 * 3.75) / 1e6)


def test_a_call_reserves_at_the_dearest_tier_that_may_serve_it_and_bills_at_the_one_that_did() -> None:
    from runner.caps.budget import Estimate
    from runner.caps.pricing import Pricer
    from runner.core.usage import Usage

    profiles, prices = shipped_profiles(), default_prices()
    flex = Pricer("o4-mini", prices["o4-mini"], "live", "flex", find_profile(profiles, "o4-mini"))
    worst = flex.reprice(Estimate(1000, 1000, 0.0), "live")
    assert worst.cost_usd == pytest.approx((1000 * 0.55 + 1000 * 2.20) / 1e6)  # flex: OpenAI refuses (429) rather than serve it at default
    used = Usage(1000, 1000)
    assert flex.cost(used, served="flex") == pytest.approx(worst.cost_usd) and flex.cost(used) == flex.cost(used, served="flex")
    standard = (1000 * 1.10 + 1000 * 4.40) / 1e6
    assert flex.cost(used, served="default") == pytest.approx(standard)  # served at default all the same: billed at default
    priority = Pricer("o4-mini", prices["o4-mini"], "live", "priority", find_profile(profiles, "o4-mini"))
    assert priority.reprice(Estimate(1000, 1000, 0.0), "live").cost_usd == pytest.approx((1000 * 2.0 + 1000 * 8.0) / 1e6)
    assert priority.cost(used, served="default") == pytest.approx(standard)  # served at default: billed at default
    claude = Pricer("claude-haiku-4-5", prices["claude-haiku-4-5"], "live", None, find_profile(profiles, "claude-haiku-4-5"))
    # every prompt token may be a cache write, dearer than a plain input token
    assert claude.reprice(Estimate(1000, 100, 0.0), "live").cost_usd == pytest.approx((1000 * 1.25 + 100 * 5.0) / 1e6)
    assert claude.cost(Usage(1000, 100, cache_write_tokens=1000), served="standard") == pytest.approx((1000 * 1.25 + 100 * 5.0) / 1e6)


def test_a_tier_fallback_reserves_at_the_dearer_of_the_tier_and_its_fallback() -> None:
    from runner.caps.budget import Estimate
    from runner.caps.pricing import Pricer
    from runner.config.profiles import merge_profiles, profile_entry

    profiles = merge_profiles(shipped_profiles(), {"o-series": {"tier_fallback": {"flex": "default", "auto": "priority"}}})
    o_series, price = profiles["o-series"], default_prices()["o4-mini"]
    assert shipped_profiles()["o-series"].tier_fallback == {}  # shipped: no fallback, as OpenAI documents
    assert [o_series.reserved_billing(tier) for tier in ("flex", "auto", "default", "priority", None)] == [
        "standard", "priority", "standard", "priority", "standard"
    ]
    worst = Pricer("o4-mini", price, "live", "flex", o_series).reprice(Estimate(1000, 1000, 0.0), "live")
    assert worst.cost_usd == pytest.approx((1000 * 1.10 + 1000 * 4.40) / 1e6)  # flex may be served at default: its rates
    cheaper = merge_profiles(profiles, {"o-series": {"tier_fallback": {"priority": "flex"}}})["o-series"]
    assert cheaper.reserved_billing("priority") == "priority"  # a cheaper fallback never lowers the reservation
    assert profile_entry(cheaper)["tier_fallback"] == {"priority": "flex"}


def test_reasoning_and_cache_write_tokens_are_read_from_the_usage() -> None:
    usage = parse_usage({
        "prompt_tokens": 100, "completion_tokens": 80, "prompt_tokens_details": {"cached_tokens": 20, "cache_write_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 64},
    })  # fmt: skip
    assert (usage.reasoning_tokens, usage.cache_write_tokens, usage.cached_input_tokens) == (64, 30, 20)
    assert parse_usage({"prompt_tokens": 5, "completion_tokens": 3, "completion_tokens_details": {"reasoning_tokens": 900}}).reasoning_tokens == 3


def post(server: ScriptedServer, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        server.base_url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


BASE = {"model": "o4-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("extra", "param", "code", "message"),
    [
        ({"max_tokens": 5}, "max_tokens", "unsupported_parameter",
         "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."),
        ({"temperature": 0.2}, "temperature", "unsupported_value",
         "Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value is supported."),
        ({"top_p": 0.5}, "top_p", "unsupported_value",
         "Unsupported value: 'top_p' does not support 0.5 with this model. Only the default (1) value is supported."),
    ],
)  # fmt: skip
def test_the_strict_server_refuses_what_reasoning_models_refuse(extra: dict[str, Any], param: str, code: str, message: str) -> None:
    with ScriptedServer({"fallback": {"content": "ok"}}, strict=True) as server:
        status, answer = post(server, {**BASE, **extra})
        ok_status, _ = post(server, {**BASE, "max_completion_tokens": 5})
    assert status == 400 and answer["error"] == {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    assert ok_status == 200


def test_every_server_refuses_what_the_api_types_do_not_allow() -> None:
    with ScriptedServer({"fallback": {"content": "ok"}}) as server:  # not strict: the same for every test
        unknown = post(server, {**BASE, "max_output_tokens": 5})
        bad_role = post(server, {**BASE, "messages": [{"role": "robot", "content": "hi"}]})
        bad_effort = post(server, {**BASE, "reasoning_effort": "extreme"})
        lenient = post(server, {**BASE, "max_tokens": 5})  # a reasoning-model rule: strict mode only
    assert unknown == (400, {"error": {"message": "Unrecognized request argument supplied: max_output_tokens",
                                       "type": "invalid_request_error", "param": None, "code": None}})  # fmt: skip
    assert bad_role[0] == 400 and "messages" in bad_role[1]["error"]["message"]
    assert bad_effort[0] == 400 and bad_effort[1]["error"]["param"] == "reasoning_effort"
    assert lenient[0] == 200


def test_a_price_without_the_rates_of_a_tier_its_calls_may_be_served_at_is_no_price_for_a_money_cap() -> None:
    """``auto`` that may be served at priority reserves at priority rates: a price without them
    cannot bound a call (it would reserve $0), so a money cap refuses to start on it."""
    from dataclasses import replace

    from runner.caps.budget import Estimate
    from runner.caps.pricing import Pricer
    from runner.config.prices import unpriced_message
    from runner.config.profiles import merge_profiles

    o_series = merge_profiles(shipped_profiles(), {"o-series": {"tier_fallback": {"auto": "priority"}}})["o-series"]
    price = default_prices()["o4-mini"]
    standard_only = replace(price, priority_input_per_mtok=None, priority_output_per_mtok=None)
    assert not Pricer("o4-mini", standard_only, "live", "auto", o_series).priced
    assert Pricer("o4-mini", standard_only, "live", "default", o_series).priced  # default is never served at priority
    with_priority = Pricer("o4-mini", price, "live", "auto", o_series)
    assert with_priority.priced and with_priority.reprice(Estimate(1000, 0, 0.0), "live").cost_usd > 0
    assert "priority_input_per_mtok" in unpriced_message("o4-mini", "triage", "priority")
