"""`runner eval` as a real process against the loopback server: the shipped triage eval
compares two variants and fails below its threshold; resume, baselines and regressions,
variant overrides, per-case checks, caps, and located errors for bad eval files."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.model.script_rules import Script
from runner.model.server import ScriptedServer
from tests.support.project import copy_shipped, run_cli

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "evals" / "triage_script.yaml"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project", ("agents.d", "tasks.d", "evals.d", "examples/evals"))


def runner(root: Path, server: ScriptedServer | None, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(root, server, *args, key="sk-test-eval", drop=("OTEL_",), timeout=600)


def evaluate(root: Path, server: ScriptedServer | None, *args: str) -> tuple[int, dict[str, Any], str]:
    done = runner(root, server, "eval", "triage_accuracy", "--json", *args)
    assert done.returncode in (0, 1, 3), done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def variants(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in result["variants"]}


def models(server: ScriptedServer) -> Counter[str]:
    return Counter(r.body["model"] for r in server.requests)


def test_the_triage_eval_compares_two_variants_and_fails_below_the_threshold(project: Path) -> None:
    with ScriptedServer(Script.load(SCRIPT)) as server:
        code, result, _ = evaluate(project, server)
        assert models(server) == {"gpt-4o-mini": 37, "gpt-4.1-nano": 37}
    assert code == 1 and result["exit_code"] == 1
    found = variants(result)
    assert found["baseline"]["pass_rate"] == 1.0 and not found["baseline"]["below_threshold"]
    nano = found["nano"]
    assert nano["passed"] == 28 and nano["below_threshold"] and nano["threshold"] == 0.9
    assert nano["changes"] == {"model": "gpt-4.1-nano"}
    assert nano["checks"]["category"] == {"passed": 28, "applied": 37}
    assert nano["checks"]["equals urgency"] == {"passed": 3, "applied": 6}  # from the per-case checks column
    failed = {c["key"]: c for c in nano["results"] if not c["passed"]}
    assert "got \"bug\", expected \"account\"" in " ".join(ch["detail"] for ch in failed["T-00011"]["checks"])
    assert nano["cost_per_case"] < found["baseline"]["cost_per_case"]
    out = project / "reports" / "evals" / "triage_accuracy"
    markdown = (out / "eval_report.md").read_text()
    assert "| nano | model gpt-4.1-nano | 75.7% | 90.0% | 28/37 |" in markdown and "**BELOW THRESHOLD**" in markdown
    assert "## Cases that failed or differ (9 of 37)" in markdown and "| T-00011 | ✓  | ✗ category" in markdown
    html = (out / "eval_report.html").read_text()
    assert "BELOW THRESHOLD" in html and "<script" not in html
    assert json.loads((out / "eval_report.json").read_text())["variants"][1]["name"] == "nano"


def test_the_passing_variant_alone_exits_0_and_a_rerun_resumes_without_calls(project: Path) -> None:
    with ScriptedServer(Script.load(SCRIPT)) as server:
        code, first, _ = evaluate(project, server, "--variant", "baseline")
        assert code == 0 and [v["name"] for v in first["variants"]] == ["baseline"]
        calls = len(server.requests)
        code, again, _ = evaluate(project, server, "--variant", "baseline")
        assert code == 0 and len(server.requests) == calls  # every case was already done
        evaluate(project, server, "--variant", "baseline", "--restart")
        assert len(server.requests) == 2 * calls
    assert again["variants"][0]["passed"] == first["variants"][0]["passed"] == 37


def test_a_changed_prompt_is_not_resumed_from_the_old_results(project: Path) -> None:
    with ScriptedServer(Script.load(SCRIPT)) as server:
        evaluate(project, server, "--variant", "baseline")
        calls = len(server.requests)
        agent = project / "agents.d" / "triage.yaml"
        agent.write_text(agent.read_text().replace("You triage customer-support tickets.", "You triage support tickets."))
        evaluate(project, server, "--variant", "baseline")
        assert len(server.requests) == 2 * calls


def test_a_saved_baseline_shows_regressions_and_fixes(project: Path) -> None:
    with ScriptedServer(Script.load(SCRIPT)) as server:
        code, _, _ = evaluate(project, server, "--variant", "baseline", "--save-baseline")
    stored = project / "evals.d" / "baselines" / "triage_accuracy.json"
    assert code == 0 and json.loads(stored.read_text())["variants"][0]["pass_rate"] == 1.0
    worse = yaml.safe_load(SCRIPT.read_text())
    worse["rules"].insert(0, {"when": {"last_message": "(?i)vat"}, "reply": {"content": '{"category": "other", "urgency": "low", "summary": "Tax."}'}})
    with ScriptedServer(worse) as server:
        code, result, _ = evaluate(project, server, "--variant", "baseline", "--restart")
    (comparison,) = result["baseline"]["comparisons"]
    assert comparison["baseline_pass_rate"] == 1.0 and comparison["pass_rate"] == pytest.approx(34 / 37)
    assert comparison["regressions"] == ["T-00001", "T-00002", "T-00023"] and comparison["fixes"] == []
    assert code == 0  # 91.9% is still above the 90% threshold: regressions are reported, the gate is the threshold
    markdown = (project / "reports" / "evals" / "triage_accuracy" / "eval_report.md").read_text()
    assert "## Against the baseline" in markdown and "T-00001, T-00002, T-00023" in markdown and "(regressed)" in markdown


def test_a_batch_cap_stops_a_variant_and_the_cases_not_run_fail(project: Path) -> None:
    with ScriptedServer(Script.load(SCRIPT)) as server:
        code, result, _ = evaluate(project, server, "--variant", "baseline", "--max-cost-usd", "0.0002", "--concurrency", "1")
    variant = result["variants"][0]
    assert variant["stop_kind"] == "max_cost_usd" and variant["passed"] < 37 and code == 1
    not_run = [c for c in variant["results"] if c["status"] == "not_run"]
    assert not_run and all(not c["passed"] for c in not_run)


VARIANTS_EVAL = """
apiVersion: runner/v1
kind: Eval
name: overrides
task: triage_ticket
dataset: {path: cases.jsonl, id_column: id, checks_column: checks}
assert:
  - {path: category, equals: {column: expected}}
  - {path: summary, contains: {column: keyword}, ignore_case: true}
  - {max_latency_seconds: 60}
  - {json_schema: {type: object, required: [category, urgency, summary]}}
variants:
  - {name: prompt, system_prompt: "STRICT triage. Reply with JSON only.", temperature: 0.7}
  - {name: other_agent, agents: {triage: triage_alt}}
"""
ALT_AGENT = """
apiVersion: runner/v1
kind: Agent
name: triage_alt
model: {id: gpt-4.1-mini, max_tokens: 150}
system_prompt: "ALT triage agent."
caps: {max_steps: 3}
"""


def test_variants_override_the_prompt_temperature_and_agent(project: Path) -> None:
    (project / "evals.d" / "overrides.yaml").write_text(VARIANTS_EVAL)
    (project / "agents.d" / "triage_alt.yaml").write_text(ALT_AGENT)
    cases = [{"id": "a", "subject": "Refund", "body": "charged twice", "expected": "billing", "keyword": "MONEY", "checks": None},
             {"id": "b", "subject": "Hi", "body": "hello", "expected": "other", "keyword": "", "checks": [{"path": "urgency", "equals": "low"}]},
             {"id": "c", "subject": "Hi", "body": "hello", "expected": "", "keyword": "", "checks": "[{\"path\": \"urgency\", \"regex\": \"(\"}]"}]
    (project / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    reply = '{"category": "%s", "urgency": "low", "summary": "%s"}'
    script = {"rules": [
        {"when": {"system": "^STRICT"}, "reply": {"content": reply % ("billing", "Strict: money")}},
        {"when": {"system": "^ALT"}, "reply": {"content": reply % ("other", "alt")}},
    ]}
    with ScriptedServer(script) as server:
        done = runner(project, server, "eval", "overrides", "--json")
        bodies = [r.body for r in server.requests]
    assert done.returncode == 0, done.stderr
    prompt_calls = [b for b in bodies if b["messages"][0]["content"].startswith("STRICT")]
    assert len(prompt_calls) == 3 and {b["temperature"] for b in prompt_calls} == {0.7} and {b["model"] for b in prompt_calls} == {"gpt-4o-mini"}
    assert {b["model"] for b in bodies if b["messages"][0]["content"].startswith("ALT")} == {"gpt-4.1-mini"}
    result = variants(json.loads(done.stdout))
    prompt = {c["key"]: c for c in result["prompt"]["results"]}
    assert prompt["a"]["passed"] and not prompt["b"]["passed"]  # b: category billing, expected other
    assert next(ch for ch in prompt["c"]["checks"] if ch["label"] == "case checks")["passed"] is False
    assert "assertion 1/regex: invalid regular expression" in json.dumps(prompt["c"]["checks"])
    expected_cell = next(ch for ch in prompt["c"]["checks"] if ch["label"] == "equals category")
    assert expected_cell["passed"] is None  # an empty expected cell: not applicable to that case
    alt = {c["key"]: c for c in result["other_agent"]["results"]}
    assert alt["b"]["passed"] and not alt["a"]["passed"]  # the other agent answers as text: the path still reads its JSON
    assert {ch["label"]: ch["passed"] for ch in alt["a"]["checks"]}["contains summary"] is False


BAD_EVAL = """apiVersion: runner/v1
kind: Eval
name: bad
task: triage_tickt
dataset: {path: examples/evals/triage_labelled.csv, id_column: ident}
assert:
  - {path: category, equals: {column: expected_categry}}
  - {path: summary, regex: "(", contains: x}
  - {path: summary, regex: "("}
  - {path: category, equals: billing, tolerance: 0.5}
  - {max_cost_usd: 0.01, path: cost}
  - {json_schema: {type: 12}}
variants:
  - {name: a, agents: {nobody: triage}}
  - {name: a, agents: {triage: ghost}}
threshold: 1.5
"""


def test_validate_locates_every_problem_of_a_bad_eval(project: Path) -> None:
    (project / "evals.d" / "bad.yaml").write_text(BAD_EVAL)
    done = runner(project, None, "validate", "evals.d/bad.yaml")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines == ["evals.d/bad.yaml:16:12: error: /threshold: 1.5 is greater than the maximum of 1"]  # schema first
    (project / "evals.d" / "bad.yaml").write_text(BAD_EVAL.replace("threshold: 1.5", "threshold: 0.5"))
    lines = runner(project, None, "validate", "evals.d/bad.yaml").stdout.splitlines()
    wanted = [
        "evals.d/bad.yaml:4:7: error: /task: unknown task 'triage_tickt'. Did you mean 'triage_ticket'?",
        "evals.d/bad.yaml:5:64: error: /dataset/id_column: no column 'ident' in triage_labelled.csv (columns: id, subject,",
        "evals.d/bad.yaml:7:39: error: /assert/0/equals/column: no column 'expected_categry' in triage_labelled.csv. Did you mean 'expected_category'?",
        "evals.d/bad.yaml:8:5: error: /assert/1: an assertion needs exactly one of equals, contains, regex, json_schema, approx, status, "
        "max_cost_usd, max_latency_seconds; it has contains, regex",
        "evals.d/bad.yaml:9:28: error: /assert/2/regex: invalid regular expression: missing ), unterminated subpattern",
        "evals.d/bad.yaml:10:50: error: /assert/3/tolerance: tolerance applies to approx, not to equals",
        "evals.d/bad.yaml:11:32: error: /assert/4/path: max_cost_usd is about the run, not a value in its output: remove path",
        "evals.d/bad.yaml:12:19: error: /assert/5/json_schema: not a valid JSON Schema",
        "evals.d/bad.yaml:15:12: error: /variants/1/name: duplicate variant name 'a'",
        "evals.d/bad.yaml:15:32: error: /variants/1/agents/triage: unknown agent 'ghost'",
    ]
    assert len(lines) == len(wanted)
    for want in wanted:
        assert any(line.startswith(want) for line in lines), (want, lines)
    (project / "evals.d" / "bad.yaml").write_text(BAD_EVAL.replace("threshold: 1.5", "threshold: 0.5").replace("tickt", "ticket"))
    lines = runner(project, None, "validate", "evals.d/bad.yaml").stdout.splitlines()
    assert "evals.d/bad.yaml:14:24: error: /variants/0/agents/nobody: task 'triage_ticket' uses no agent 'nobody' (it uses: triage)" in lines


def test_unknown_eval_and_variant_exit_2_with_a_hint(project: Path) -> None:
    done = runner(project, None, "eval", "triage_acuracy")
    assert done.returncode == 2 and "unknown eval 'triage_acuracy'" in done.stderr and "triage_accuracy" in done.stderr
    done = runner(project, None, "eval", "triage_accuracy", "--variant", "nanoo")
    assert done.returncode == 2 and "no such variant" in done.stderr and "nano" in done.stderr
    (project / "evals.d" / "triage_accuracy.yaml").write_text(
        (project / "evals.d" / "triage_accuracy.yaml").read_text().replace("baseline: evals.d/baselines/triage_accuracy.json\n", "")
    )
    done = runner(project, None, "eval", "triage_accuracy", "--save-baseline")
    assert done.returncode == 2 and "--save-baseline" in done.stderr and "Traceback" not in done.stderr
