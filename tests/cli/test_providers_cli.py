"""Today's OpenAI models through the real CLI, against the loopback server in strict mode
(it answers 400 where the real API does: ``max_tokens`` or ``temperature`` on a reasoning
model, a field the specification does not have), and ``runner validate`` refusing, at
``file:line:col``, a setting the model's profile does not take."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from runner.model.strict_openai import conformance_error, model_error
from tests.cli.batch_api_project import TRIAGE, TRIAGE_SCRIPT, records, tickets, triage, uploaded_lines, via_api
from tests.support.project import copy_shipped, run_cli, tool_call, write_project

TICKET = ("-i", "subject=Printer on fire", "-i", "body=It crashes when I print.")


def chat_bodies(server: ScriptedServer) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.path.endswith("/chat/completions")]


def report(root: Path) -> dict[str, Any]:
    (found,) = root.glob("reports/**/report.json")
    return dict(json.loads(found.read_text()))


@pytest.mark.parametrize("model", ["o4-mini", "gpt-5-mini", "gpt-4o-mini"])
def test_the_shipped_triage_task_runs_on_each_openai_profile(tmp_path: Path, model: str) -> None:
    root = copy_shipped(tmp_path / "project")
    with ScriptedServer(TRIAGE_SCRIPT, strict=True) as server:
        done = run_cli(root, server, "run", "triage_ticket", "--model", model, *TICKET)
        bodies = chat_bodies(server)
    assert done.returncode == 0, done.stderr
    (body,) = bodies
    assert "max_tokens" not in body and body["max_completion_tokens"] == 200
    assert body["response_format"]["json_schema"]["strict"] is True  # every OpenAI profile takes strict schemas
    assert conformance_error(body) is None and model_error(body) is None
    if model == "gpt-4o-mini":
        assert body["temperature"] == 0  # the agent's own model: its temperature is sent
    else:  # a reasoning model given by --model: the agent's temperature is left out, and the run says so
        assert "temperature" not in body
        assert "model.temperature is not sent" in done.stderr + json.dumps(report(root)["warnings"])
    assert report(root)["final_output"] == TRIAGE


def test_a_plain_compatible_model_gets_max_tokens_and_no_response_format(tmp_path: Path) -> None:
    root = copy_shipped(tmp_path / "project")
    with ScriptedServer(TRIAGE_SCRIPT, strict=True) as server:
        done = run_cli(root, server, "run", "triage_ticket", "--model", "deepseek-chat", *TICKET)
        (body,) = chat_bodies(server)
    assert done.returncode == 0, done.stderr  # the answer is checked against the schema as before
    assert body["max_tokens"] == 200 and "response_format" not in body and body["temperature"] == 0


def agent_file(model: str, extra: str = "") -> dict[str, str]:
    return {
        "agents.d/a.yaml": f"apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {{id: {model}{extra}}}\nsystem_prompt: Hi.\n",
        "tasks.d/t.yaml": "apiVersion: runner/v1\nkind: Task\nname: t\nagent: a\ngoal: Say hi.\n",
    }


@pytest.mark.parametrize(
    ("extra", "pointer", "message"),
    [
        (", temperature: 0.2", "/model/temperature", "model 'o4-mini' (profile 'o-series') does not accept temperature"),
        (", top_p: 0.9", "/model/top_p", "model 'o4-mini' (profile 'o-series') does not accept top_p"),
        (", reasoning_effort: hihg", "/model/reasoning_effort", "'hihg' is not a reasoning effort of model 'o4-mini' (profile 'o-series'): use one of low, medium, high. Did you mean 'high'?"),
        (", service_tier: scale", None, None),  # not a tier at all: the schema refuses it
        (", extra_headers: {Authorization: Bearer x}", "/model/extra_headers/Authorization", "header 'Authorization' carries the API key"),
        (", extra_headers: {X-Team: sk-model-key-web-0123456789}", "/model/extra_headers/X-Team", "this value is the API key in $OPENAI_API_KEY"),
        (", extra_body: {max_tokens: 5}", "/model/extra_body/max_tokens", "runner sets 'max_tokens' itself"),
    ],
)  # fmt: skip
def test_validate_refuses_what_the_profile_does_not_take(tmp_path: Path, extra: str, pointer: str | None, message: str | None) -> None:
    root = write_project(tmp_path / "project", agent_file("o4-mini", extra))
    done = run_cli(root, None, "validate", env={"OPENAI_API_KEY": "sk-model-key-web-0123456789"})
    assert done.returncode == 2, done.stdout + done.stderr
    shown = done.stdout + done.stderr
    if pointer is not None:
        assert re.search(rf"agents\.d/a\.yaml:4:\d+: error: {re.escape(pointer)}: {re.escape(str(message))}", shown), shown
    assert "Traceback" not in shown


def test_validate_refuses_a_tier_the_profile_lacks_and_accepts_flex_where_it_exists(tmp_path: Path) -> None:
    refused = write_project(tmp_path / "refused", agent_file("gpt-4o-mini", ", service_tier: flex"))
    accepted = write_project(tmp_path / "accepted", agent_file("o4-mini", ", service_tier: flex, reasoning_effort: low"))
    bad, good = run_cli(refused, None, "validate"), run_cli(accepted, None, "validate")
    assert bad.returncode == 2 and "model 'gpt-4o-mini' (profile 'gpt-4o') has no service tier 'flex'; use one of auto, default, priority" in bad.stdout + bad.stderr
    assert good.returncode == 0, good.stdout + good.stderr


FLEX_AGENT = """\
apiVersion: runner/v1
kind: Agent
name: calc
model: {id: o4-mini, max_tokens: 1000, service_tier: flex, retries: 0}
system_prompt: Use the calculator, then answer with the number.
tools: [calculator]
caps: {max_cost_usd: 0.0075}
---
apiVersion: runner/v1
kind: Task
name: sum
agent: calc
goal: What is 2+3?
"""
USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "reasoning_tokens": 150}
FLEX_IN, FLEX_OUT = 0.55, 2.20  # o4-mini at batch prices (half of 1.10 / 4.40)
STANDARD_IN, STANDARD_OUT = 1.10, 4.40


def flex_script(second_served: str | None = None, usage: dict[str, int] = USAGE) -> list[dict[str, Any]]:
    """A calculator call then the answer, each at ``usage``; the strict server says the tier
    asked served them, or ``second_served`` served the answer."""
    served = {"service_tier": second_served} if second_served else {}
    return [
        {"when": {"last_role": "user"}, "times": 1, "reply": {**tool_call("calculator", expression="2+3"), "usage": usage}},
        {"when": {"last_role": "tool"}, "reply": {"content": "5", "usage": usage, **served}},
    ]


def test_flex_runs_a_tool_using_agent_billed_at_flex_prices(tmp_path: Path) -> None:
    root = write_project(tmp_path / "project", {"agents.d/calc.yaml": FLEX_AGENT})
    with ScriptedServer(flex_script(), strict=True) as server:
        done = run_cli(root, server, "run", "sum")
        bodies = chat_bodies(server)
    assert done.returncode == 0, done.stderr
    assert [b["service_tier"] for b in bodies] == ["flex", "flex"] and all("max_completion_tokens" in b for b in bodies)
    total = report(root)["usage"]["total"]
    assert total["cost_usd"] == pytest.approx(2 * (1000 * FLEX_IN + 200 * FLEX_OUT) / 1e6)
    assert total["reasoning_tokens"] == 300 and total["output_tokens"] == 400
    stats = run_cli(root, None, "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    (model,) = json.loads(stats.stdout)["models"]
    assert model["name"] == "o4-mini" and model["reasoning_tokens"] == 300
    assert model["cost_total"] == pytest.approx(total["cost_usd"])


def test_a_flex_call_the_provider_served_at_the_default_tier_is_billed_at_standard_prices(tmp_path: Path) -> None:
    root = write_project(tmp_path / "project", {"agents.d/calc.yaml": FLEX_AGENT})
    with ScriptedServer(flex_script(second_served="default"), strict=True) as server:
        done = run_cli(root, server, "run", "sum")
        bodies = chat_bodies(server)
    assert done.returncode == 0, done.stderr
    assert [b["service_tier"] for b in bodies] == ["flex", "flex"]
    flex, standard = (1000 * FLEX_IN + 200 * FLEX_OUT) / 1e6, (1000 * STANDARD_IN + 200 * STANDARD_OUT) / 1e6
    assert report(root)["usage"]["total"]["cost_usd"] == pytest.approx(flex + standard)


def test_a_flex_call_served_at_default_above_its_flex_reservation_counts_in_full_and_is_named(tmp_path: Path) -> None:
    """Reserved at flex rates (the shipped profile has no tier_fallback), billed at default ones:
    the whole cost counts against the caps (a scope it takes over its cap starts no new call) and
    the run's warnings name the tier and the profile setting that would have reserved for it."""
    root = write_project(tmp_path / "project", {"agents.d/calc.yaml": FLEX_AGENT})
    usage = {"prompt_tokens": 50, "completion_tokens": 900}  # within the worst case's tokens, above its flex price at default
    with ScriptedServer(flex_script(second_served="default", usage=usage), strict=True) as server:
        done = run_cli(root, server, "run", "sum")
    assert done.returncode == 0, done.stderr
    found = report(root)
    flex, standard = (50 * FLEX_IN + 900 * FLEX_OUT) / 1e6, (50 * STANDARD_IN + 900 * STANDARD_OUT) / 1e6
    assert found["usage"]["total"]["cost_usd"] == pytest.approx(flex + standard)
    warnings = json.dumps(found["warnings"])
    assert "billed at the service tier that served it ('default')" in warnings and "tier_fallback ({flex: default})" in warnings


def test_a_call_served_at_a_dearer_tier_than_it_could_ask_for_is_billed_at_it_and_said(tmp_path: Path) -> None:
    """auto reserves at standard rates; a Project whose auto tier is priority is billed at priority ones."""
    root = write_project(tmp_path / "project", agent_file("o4-mini", ", max_tokens: 100, service_tier: auto"))
    usage = {"prompt_tokens": 50, "completion_tokens": 100}  # within the worst case's tokens, above its standard price
    with ScriptedServer([{"reply": {"content": "hi", "usage": usage, "service_tier": "priority"}}], strict=True) as server:
        done = run_cli(root, server, "run", "t")
        (body,) = chat_bodies(server)
    assert done.returncode == 0, done.stderr
    assert body["service_tier"] == "auto"
    found = report(root)
    assert found["usage"]["total"]["cost_usd"] == pytest.approx((50 * 2.0 + 100 * 8.0) / 1e6)  # o4-mini's priority rates
    assert "billed at the service tier that served it ('priority')" in json.dumps(found["warnings"])


FLEX_FALLS_BACK = "apiVersion: runner/v1\nkind: ModelProfiles\nprofiles:\n  o-series: {tier_fallback: {flex: default}}\n"


@pytest.mark.parametrize(
    ("tier", "profiles", "runs"),
    [(", service_tier: flex", None, True), (", service_tier: flex", FLEX_FALLS_BACK, False), ("", None, False)],
    ids=["flex", "flex-with-a-fallback", "standard"],
)
def test_a_cap_under_one_calls_standard_worst_case_lets_flex_run_at_flex_prices(
    tmp_path: Path, tier: str, profiles: str | None, runs: bool
) -> None:
    """max_cost_usd 0.0038 is below one call's worst case at standard prices (1000 output
    tokens x $4.40/M = $0.0044) and above two flex calls: a flex call reserves at flex rates
    (OpenAI refuses a flex request it cannot serve rather than serve it at default), unless
    the profile says the provider may fall back (tier_fallback), when it reserves at those."""
    agent = FLEX_AGENT.replace(", service_tier: flex", tier).replace("max_cost_usd: 0.0075", "max_cost_usd: 0.0038")
    files = {"agents.d/calc.yaml": agent} | ({"agents.d/profiles.yaml": profiles} if profiles else {})
    root = write_project(tmp_path / "project", files)
    with ScriptedServer(flex_script(), strict=True) as server:
        done = run_cli(root, server, "run", "sum")
        bodies = chat_bodies(server)
    if runs:
        assert done.returncode == 0, done.stderr
        assert len(bodies) == 2 and report(root)["usage"]["total"]["cost_usd"] == pytest.approx(2 * (1000 * FLEX_IN + 200 * FLEX_OUT) / 1e6)
    else:
        assert done.returncode == 3, done.stderr  # capped: the standard-price worst case is over the cap
        assert bodies == []


def test_a_flex_request_refused_for_capacity_is_not_billed_and_is_retried(tmp_path: Path) -> None:
    """OpenAI answers a flex request it has no capacity for with 429 Resource Unavailable, unbilled:
    runner retries it as any 429, releasing the refused attempt's reservation."""
    root = write_project(tmp_path / "project", {"agents.d/calc.yaml": FLEX_AGENT.replace("retries: 0", "retries: 2")})
    with ScriptedServer(flex_script(), strict=True, flex_unavailable=1) as server:
        done = run_cli(root, server, "run", "sum")
        rules, billed = [r.rule for r in server.requests if r.path.endswith("/chat/completions")], server.billed
    assert done.returncode == 0, done.stderr
    assert rules[0] == "flex-unavailable" and len(rules) == 3 and len(billed) == 2
    total = report(root)["usage"]["total"]
    assert total["cost_usd"] == pytest.approx(2 * (1000 * FLEX_IN + 200 * FLEX_OUT) / 1e6)  # the refusal costs nothing
    stats = json.loads(run_cli(root, None, "stats", "--json").stdout)
    assert stats["models"][0]["cost_total"] == pytest.approx(total["cost_usd"])


def test_a_flex_request_refused_for_capacity_with_no_retries_left_fails_the_run_saying_so(tmp_path: Path) -> None:
    root = write_project(tmp_path / "project", {"agents.d/calc.yaml": FLEX_AGENT})  # retries: 0
    with ScriptedServer(flex_script(), strict=True, flex_unavailable=1) as server:
        done = run_cli(root, server, "run", "sum")
        billed = server.billed
    assert done.returncode != 0 and billed == []
    assert "HTTP 429: Resource Unavailable" in done.stderr, done.stderr
    assert report(root)["usage"]["total"]["cost_usd"] == 0


@pytest.mark.parametrize("via", ["live", "batch-api"])
def test_reasoning_and_cache_write_tokens_reach_the_batch_journal_summary_and_report(tmp_path: Path, via: str) -> None:
    root = copy_shipped(tmp_path / "project")
    source, out = tickets(root, 3), root / "out.jsonl"
    usage = {"prompt_tokens": 1000, "completion_tokens": 200, "reasoning_tokens": 150, "cache_write_tokens": 400}
    script = {"fallback": {"content": json.dumps(TRIAGE), "usage": usage}}
    with ScriptedServer(script, strict=True) as server:
        done = triage(root, server, *via_api(source, out, "--model", "o4-mini", "--via", via, "--json"))
        again = triage(root, server, *via_api(source, out, "--model", "o4-mini", "--via", via, "--json"))  # all done: read back
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["reasoning_tokens"], summary["cache_write_tokens"], summary["output_tokens"]) == (450, 1200, 600)
    report_md = Path(summary["report_path"])
    batch_report = json.loads(report_md.with_suffix(".json").read_text())
    assert (batch_report["reasoning_tokens"], batch_report["cache_write_tokens"]) == (450, 1200)
    assert "Reasoning: 450 of 600 output tokens" in report_md.read_text()
    assert "Cache writes: 1,200 input tokens" in report_md.read_text()
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["reasoning_tokens"] == 450  # as the journal keeps them


@pytest.mark.parametrize("model", ["o4-mini", "gpt-5-mini", "gpt-4o-mini"])
def test_the_shipped_triage_batch_goes_out_in_batch_api_lines_built_from_each_openai_profile(tmp_path: Path, model: str) -> None:
    root = copy_shipped(tmp_path / "project")
    source, out = tickets(root, 3), root / "out.jsonl"
    with ScriptedServer(TRIAGE_SCRIPT, strict=True) as server:
        done = triage(root, server, *via_api(source, out, "--model", model))
        lines = uploaded_lines(server)
        billed = len(server.billed)
    assert done.returncode == 0, done.stderr
    assert len(lines) == 3 and billed == 3 and {r["status"] for r in records(out).values()} == {"done"}
    for line in lines:  # the strict server answers a line it would refuse live with a 400 line
        body = line["body"]
        assert body["max_completion_tokens"] == 200 and "max_tokens" not in body
        assert body["response_format"]["json_schema"]["strict"] is True
        assert ("temperature" in body) is (model == "gpt-4o-mini")  # a reasoning model takes none
        assert conformance_error(body) is None and model_error(body) is None


def test_a_profile_without_a_batch_api_is_refused_naming_what_to_use(tmp_path: Path) -> None:
    no_batches = "apiVersion: runner/v1\nkind: ModelProfiles\nprofiles:\n  gpt-4o: {batch_api: null}\n"
    root = copy_shipped(tmp_path / "project", files={"agents.d/profiles.yaml": no_batches})
    source, out = tickets(root, 2), root / "out.jsonl"
    with ScriptedServer(TRIAGE_SCRIPT, strict=True) as server:
        done = triage(root, server, *via_api(source, out))
        sent = server.requests
    assert done.returncode == 2, done.stderr
    assert "model 'gpt-4o-mini' (profile 'gpt-4o', batch_api: null), which has no Batch API; run it live (--via live)" in done.stderr
    assert "service_tier: flex" in done.stderr and sent == []


def test_a_money_cap_at_a_tier_the_price_does_not_give_is_a_located_error(tmp_path: Path) -> None:
    files = agent_file("gpt-5-nano", ", service_tier: priority")  # no priority rates for gpt-5-nano in prices.yaml
    files["agents.d/a.yaml"] += "caps: {max_cost_usd: 0.5}\n"
    done = run_cli(write_project(tmp_path / "project", files), None, "validate")
    assert done.returncode == 2
    assert re.search(r"agents\.d/a\.yaml:4:\d+: error: /model/service_tier: service_tier 'priority' bills model 'gpt-5-nano' at "
                     r"priority rates, which its price does not give", done.stdout + done.stderr), done.stdout + done.stderr
