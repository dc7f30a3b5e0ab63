"""``runner batch --via batch-api`` with what used to be refused: a judge on another model, a
pipeline whose steps run in parallel, and ``--dedupe``; every model call goes in a round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import batch_inputs, chat_calls, records, row_of, run, via_api, write_rows
from tests.support.project import judged_price, write_project

pytestmark = pytest.mark.timeout(300)

JUDGED = judged_price(
    ["The answer gives the price in euros."], writer_model="{id: gpt-4o-mini, max_tokens: 100}",
    inputs={"plan": "{type: string}"}, goal='"How much does the {{ inputs.plan }} plan cost?"',
)
JUDGE_SCRIPT = {
    "fallback": None,
    "rules": [
        {"when": {"system": "strict reviewer", "any_message": "no idea"}, "reply": {"content": '{"pass": false, "reason": "no price"}'}},
        {"when": {"system": "strict reviewer"}, "reply": {"content": '{"pass": true, "reason": "gives a price"}'}},
        {"when": {"last_message": "Team plan"}, "times": 1, "reply": {"content": "no idea"}},
        {"when": {"system": "product answers"}, "reply": {"content": "20 EUR a month."}},
    ],
}  # fmt: skip


def test_a_judge_on_another_model_gets_rounds_of_its_own(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"agents.d/all.yaml": JUDGED})
    source = write_rows(root / "plans.jsonl", [{"id": p, "plan": p.title()} for p in ("team", "solo", "pro")])
    with ScriptedServer(JUDGE_SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(root, server, "price", *via_api(source, root / "out.jsonl"))
        assert result.returncode == 0, result.stderr
        batches = batch_inputs(server)
        assert chat_calls(server) == []
    models = [{line["body"]["model"] for line in lines} for lines in batches]
    assert models == [{"gpt-4o-mini"}, {"gpt-4o"}, {"gpt-4o-mini"}, {"gpt-4o"}]  # answer, verdict, repair, verdict
    assert [sorted(row_of(line) for line in lines) for lines in batches] == [
        ["pro", "solo", "team"], ["pro", "solo", "team"], ["team"], ["team"],
    ]
    rows = records(root / "out.jsonl")
    assert {r["output"] for r in rows.values()} == {"20 EUR a month."}


PIPELINE = """\
apiVersion: runner/v1
kind: Agent
name: writer
model: {id: gpt-4o-mini, max_tokens: 50}
system_prompt: You write short notes.
---
apiVersion: runner/v1
kind: Task
name: notes
inputs:
  topic: {type: string}
pipeline:
  steps:
    - {id: pros, agent: writer, goal: "Pros of {{ inputs.topic }}"}
    - {id: cons, agent: writer, goal: "Cons of {{ inputs.topic }}"}
    - id: verdict
      agent: writer
      goal: "Weigh {{ steps.pros.output }} against {{ steps.cons.output }}"
      depends_on: [pros, cons]
"""
NOTES_SCRIPT = {"rules": [
    {"when": {"last_message": "^Pros"}, "reply": {"content": "cheap"}},
    {"when": {"last_message": "^Cons"}, "reply": {"content": "slow"}},
    {"when": {"last_message": "^Weigh"}, "reply": {"content": "worth it"}},
]}  # fmt: skip


def test_a_pipeline_with_parallel_steps_sends_both_in_the_same_round(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"agents.d/all.yaml": PIPELINE})
    source = write_rows(root / "topics.jsonl", [{"id": t, "topic": t} for t in ("trains", "bikes")])
    with ScriptedServer(NOTES_SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(root, server, "notes", *via_api(source, root / "out.jsonl"))
        assert result.returncode == 0, result.stderr
        first, second = batch_inputs(server)
    assert sorted((row_of(line), line["body"]["messages"][-1]["content"].split()[0]) for line in first) == [
        ("bikes", "Cons"), ("bikes", "Pros"), ("trains", "Cons"), ("trains", "Pros"),
    ]
    assert sorted(row_of(line) for line in second) == ["bikes", "trains"]
    assert all(line["body"]["messages"][-1]["content"] == "Weigh cheap against slow" for line in second)
    assert {r["status"] for r in records(root / "out.jsonl").values()} == {"done"}


def test_dedupe_sends_identical_rows_once(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"agents.d/all.yaml": PIPELINE})
    rows = [{"id": "a", "topic": "trains"}, {"id": "b", "topic": "trains"}, {"id": "c", "topic": "bikes"}]
    source = write_rows(root / "topics.jsonl", rows)
    with ScriptedServer(NOTES_SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(root, server, "notes", *via_api(source, root / "out.jsonl", "--dedupe", "--json"))
        assert result.returncode == 0, result.stderr
        first, second = batch_inputs(server)
    assert sorted({row_of(line) for line in first}) == ["a", "c"] and len(second) == 2
    out = records(root / "out.jsonl")
    assert out["a"]["output"] == out["b"]["output"] == "worth it" and out["b"]["cost_usd"] == 0
    assert json.loads(result.stdout)["counts"]["done"] == 3


def test_extra_headers_go_with_every_batch_api_request_of_the_agents_that_share_them(tmp_path: Path) -> None:
    headers = ", extra_headers: {X-Team: pricing, OpenAI-Project: proj_batch}}"
    text = JUDGED.replace("{id: gpt-4o, max_tokens: 100}", "{id: gpt-4o, max_tokens: 100" + headers)
    root = write_project(tmp_path, {"agents.d/all.yaml": text.replace("{id: gpt-4o-mini, max_tokens: 100}", "{id: gpt-4o-mini, max_tokens: 100" + headers)})
    source = write_rows(root / "plans.jsonl", [{"id": p, "plan": p.title()} for p in ("solo", "pro")])
    with ScriptedServer(JUDGE_SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(root, server, "price", *via_api(source, root / "out.jsonl"))
        assert result.returncode == 0, result.stderr
        sent = server.requests
    assert chat_calls(server) == [] and {r.rule for r in sent} >= {"files", "batches", "files/content"}
    assert all((r.headers.get("x-team"), r.headers.get("openai-project")) == ("pricing", "proj_batch") for r in sent), [
        (r.method, r.path, r.headers) for r in sent
    ]


def test_agents_calling_one_endpoint_with_different_extra_headers_are_refused_before_any_batch(tmp_path: Path) -> None:
    """Headers go with each HTTP request, and one upload and one create carry both agents' calls."""
    root = write_project(tmp_path, {"agents.d/all.yaml": JUDGED.replace(
        "{id: gpt-4o-mini, max_tokens: 100}", "{id: gpt-4o-mini, max_tokens: 100, extra_headers: {X-Team: writers}}"
    )})  # fmt: skip
    source = write_rows(root / "plans.jsonl", [{"id": "solo", "plan": "Solo"}])
    with ScriptedServer(JUDGE_SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(root, server, "price", *via_api(source, root / "out.jsonl"))
        sent = server.requests
    assert result.returncode == 2 and sent == [], result.stderr
    assert "its agents 'writer' (agents.d/all.yaml: /model/extra_headers) and 'reviewer' (agents.d/all.yaml: /model/extra_headers)" in result.stderr
    assert "give them the same extra_headers, or run it live (--via live)" in result.stderr


def test_a_fallback_model_with_other_extra_headers_on_the_same_endpoint_is_refused_before_any_batch(tmp_path: Path) -> None:
    """A budget's degrade sends the agent's calls to its fallback_model through the same rounds
    (the same uploads and creates): its headers must be those of the endpoint's other agents."""
    writer = "{id: gpt-4o-mini, max_tokens: 100}"
    fallback = writer + "\nfallback_model: {id: gpt-4o-mini, max_tokens: 50, extra_headers: {X-Team: cheap}}"
    root = write_project(tmp_path, {"agents.d/all.yaml": JUDGED.replace(writer, fallback, 1)})
    source = write_rows(root / "plans.jsonl", [{"id": "solo", "plan": "Solo"}])
    with ScriptedServer(JUDGE_SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = run(root, server, "price", *via_api(source, root / "out.jsonl"))
        sent = server.requests
    assert result.returncode == 2 and sent == [], result.stderr
    assert "(agents.d/all.yaml: /fallback_model/extra_headers)" in result.stderr and "different extra_headers" in result.stderr
