"""`runner batch` reruns that mean what they say (issue 24), through the CLI against a loopback server:
a changed configuration is refused with what changed and two ways on, trial runs count toward the full
run, --retry-failed, --keep-columns, and the forecast of --estimate."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer
from tests.support.project import REPO, copy_shipped, run_cli

pytestmark = pytest.mark.timeout(300)
TRIAGE = '{"category": "bug", "urgency": "high", "summary": "It crashes."}'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_shipped(tmp_path / "project", ("agents.d", "tasks.d"))
    with open(REPO / "examples/batch/tickets.csv", newline="") as src, open(root / "tickets.csv", "w", newline="") as dst:
        writer = csv.writer(dst)
        for i, row in enumerate(csv.reader(src)):
            if i > 12:
                break
            writer.writerow(row)
    return root


def batch(root: Path, server: ScriptedServer, *args: str, output: str = "out.jsonl"):
    return run_cli(root, server, "batch", "triage_ticket", "--input", "tickets.csv", "--output", output, "--id-column", "id",
                   "--progress", "none", *args)  # fmt: skip


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_changed_output_schema_is_refused_naming_it_and_each_way_on_does_what_it_says(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        assert batch(project, server).returncode == 0
        first = len(server.requests)
        assert first == 12
        agent = project / "agents.d/triage.yaml"
        agent.write_text(agent.read_text().replace("    summary: {type: string, maxLength: 300}",
                                                   "    summary: {type: string, maxLength: 300}\n    team: {type: string}"))
        refused = batch(project, server, output="out2.jsonl")
        assert refused.returncode == 2, refused.stderr
        assert "agents.d/triage.yaml: output_schema changed" in refused.stderr
        assert "--restart" in refused.stderr and "--keep-answers" in refused.stderr
        assert "Traceback" not in refused.stderr and len(server.requests) == first
        assert not (project / "out2.jsonl").exists()

        kept = batch(project, server, "--keep-answers", "--json", output="out2.jsonl")
        assert kept.returncode == 0, kept.stderr
        assert len(server.requests) == first  # the earlier answers, kept: nothing paid again
        summary = json.loads(kept.stdout)
        old = {r["fingerprint"] for r in records(project / "out.jsonl")}
        assert len(old) == 1 and {r["fingerprint"] for r in records(project / "out2.jsonl")} == old
        assert summary["fingerprint"] not in old and "answer(s) kept" in summary["notes"][0]

        again = batch(project, server, "--restart", "--json", output="out3.jsonl")
        assert again.returncode == 0, again.stderr
        assert len(server.requests) == 2 * first  # every row again, under the new configuration
        assert {r["fingerprint"] for r in records(project / "out3.jsonl")} == {json.loads(again.stdout)["fingerprint"]}
        model_changed = batch(project, server, "--model", "gpt-4o", output="out4.jsonl")
        assert model_changed.returncode == 2 and "agents.d/triage.yaml: model.id changed" in model_changed.stderr
        both = batch(project, server, "--restart", "--keep-answers", output="out4.jsonl")
        assert both.returncode == 2 and "give one" in both.stderr


def test_a_trial_then_the_full_run_pays_for_the_trial_rows_once(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        trial = batch(project, server, "--limit", "5", "--json")
        assert trial.returncode == 0, trial.stderr
        assert len(server.requests) == 5
        summary = json.loads(trial.stdout)
        assert summary["trial_rows"] == 5 and summary["rows_left_for_later"] == 7
        assert [r["row"] for r in records(project / "out.jsonl")] == [1, 2, 3, 4, 5]
        full = batch(project, server)
        assert full.returncode == 0, full.stderr
        assert len(server.requests) == 12  # the 5 trial rows were not paid for again
        assert len(records(project / "out.jsonl")) == 12


def test_a_sample_is_the_same_rows_for_the_same_seed(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        picked = []
        for journal in ("a.sqlite3", "b.sqlite3", "c.sqlite3"):
            seed = "1" if journal != "c.sqlite3" else "2"
            result = batch(project, server, "--sample", "4", "--seed", seed, "--journal", journal, output=f"{journal}.jsonl")
            assert result.returncode == 0, result.stderr
            picked.append([r["row"] for r in records(project / f"{journal}.jsonl")])
    assert len(picked[0]) == 4 and picked[0] == picked[1] and picked[0] != picked[2]


def test_retry_failed_runs_a_failed_row_once_more_and_the_summary_says_which_were_not(project: Path) -> None:
    script = {"rules": [{"when": {"last_message": "ORD-483340"}, "times": 1, "reply": {"fault": {"status": 400}}}],
              "fallback": {"content": TRIAGE}}  # fmt: skip
    with ScriptedServer(script) as server:
        first = batch(project, server)
        assert first.returncode == 1
        calls = len(server.requests)
        rerun = batch(project, server)
        assert rerun.returncode == 1 and len(server.requests) == calls  # skipped, but now with a word
        assert "not retried: 1 failed row(s): 1 failed as bad_request" in rerun.stdout and "--retry-failed" in rerun.stdout
        retried = batch(project, server, "--retry-failed")
        assert retried.returncode == 0, retried.stdout + retried.stderr
        assert len(server.requests) == calls + 1


def test_keep_columns_and_answers_in_their_own_csv_columns(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        result = batch(project, server, "--keep-columns", "priority,created_on", output="out.csv")
        assert result.returncode == 0, result.stderr
        every = batch(project, server, "--keep-columns", "all", output="all.jsonl")
        assert every.returncode == 0, every.stderr
        wrong = batch(project, server, "--keep-columns", "priorty", output="x.csv")
        assert wrong.returncode == 2 and "priorty not in tickets.csv" in wrong.stderr
    with open(project / "out.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["output.category"] == "bug" and rows[0]["output.summary"] == "It crashes."
    assert "output" not in rows[0] and rows[0]["input.priority"] == "high" and rows[0]["input.created_on"] == "2024-03-17"
    first = records(project / "all.jsonl")[0]
    assert first["input"]["subject"] == "Wrong VAT on invoice" and first["input"]["id"] == "T-00001"


def test_estimate_from_a_paid_sample_that_counts_toward_the_full_run(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        forecast = batch(project, server, "--estimate", "--sample", "4", "--json")
        assert forecast.returncode == 0, forecast.stderr
        assert len(server.requests) == 4
        figures = json.loads(forecast.stdout)
        low, expected, high = figures["total"]
        assert low <= expected <= high and figures["rows"] == 12 and figures["rows_to_run"] == 8
        assert figures["batch_api_total"] < expected
        text = batch(project, server, "--estimate", "--sample", "4")
        assert "cost per row" in text.stdout and "Batch API" in text.stdout and "flex" in text.stdout
        assert len(server.requests) == 4  # the same sample: already paid for
        capped = batch(project, server, "--estimate", "--sample", "4", "--max-cost-usd", "0.00001")
        assert capped.returncode == 3 and "does not fit" in capped.stdout
        full = batch(project, server, "--json")
        billed = json.loads(full.stdout)["cost_usd"]
        assert len(server.requests) == 12
        assert abs(expected - billed) <= 0.25 * billed


def test_estimate_without_calls_counts_the_prompts(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        forecast = batch(project, server, "--estimate", "--no-calls", "--rpm", "60", "--json")
        assert forecast.returncode == 0, forecast.stderr
        assert len(server.requests) == 0
        figures = json.loads(forecast.stdout)
        assert figures["method"] == "no-calls" and figures["rows_to_run"] == 12
        assert figures["output_tokens_per_row"] == 200 and figures["input_tokens_per_row"] > 50
        assert figures["seconds"] == 12.0  # 12 calls at 60 a minute
        no_calls_alone = batch(project, server, "--no-calls")
        assert no_calls_alone.returncode == 2 and "--estimate" in no_calls_alone.stderr


def test_dedupe_on_a_rerun_with_nothing_to_do_is_said_not_ignored(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        assert batch(project, server).returncode == 0
        rerun = batch(project, server, "--dedupe")
    assert rerun.returncode == 0 and "note: --dedupe: no row was left to run" in rerun.stdout


# --- defects seen on the way (issue 24) -------------------------------------------------------


def test_a_batch_refused_at_start_leaves_no_output_lock(project: Path) -> None:
    (project / "bad.csv").write_text("id,body\nT1,no subject column\n")
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        refused = run_cli(project, server, "batch", "triage_ticket", "--input", "bad.csv", "--output", "out.jsonl",
                          "--progress", "none")  # fmt: skip
        done = batch(project, server, output="good.jsonl")
    assert refused.returncode == 2 and "column 'subject'" in refused.stderr
    assert done.returncode == 0
    assert not list(project.glob(".*.lock"))  # neither the refused batch's nor the finished one's


def test_a_rerun_with_nothing_to_do_keeps_the_report_of_the_run_that_did_the_work(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        first = json.loads(batch(project, server, "--json").stdout)
        again = json.loads(batch(project, server, "--json").stdout)
    assert again["report_path"] == first["report_path"]
    report = json.loads(Path(first["report_path"]).with_suffix(".json").read_text())
    assert report["run"]["attempts_here"] == 12


def test_progress_of_a_resumed_batch_counts_what_earlier_runs_spent(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        capped = batch(project, server, "--max-cost-usd", "0.0004", "--concurrency", "1")
        assert capped.returncode == 3, capped.stderr
        resumed = batch(project, server, "--progress", "log", "--concurrency", "1")
    assert resumed.returncode == 0, resumed.stderr
    first_line = next(line for line in resumed.stderr.splitlines() if line.startswith("batch: "))
    assert "/12 rows" in first_line and "$0.0000 spent" not in first_line and "/12 rows" in first_line


def test_a_row_cap_names_the_next_calls_worst_case_and_by_how_much_it_would_pass(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        result = batch(project, server, "--row-max-cost-usd", "0.00005")
        assert len(server.requests) == 0
    error = records(project / "out.jsonl")[0]["error"]
    assert "cost_usd=0)" not in error
    assert "cap max_cost_usd=5e-05: the next call's worst case (cost_usd=" in error and "would pass it by" in error
    assert result.returncode == 1


def test_flags_that_would_do_nothing_are_refused_or_said(project: Path) -> None:
    with ScriptedServer({"fallback": {"content": TRIAGE}}) as server:
        seed_alone = batch(project, server, "--seed", "3")
        fresh = batch(project, server, "--keep-answers", "--limit", "1")
        assert len(server.requests) == 1
    assert seed_alone.returncode == 2 and "--seed only applies with --sample" in seed_alone.stderr
    assert fresh.returncode == 0 and "note: --keep-answers: a new journal, no earlier answers to keep" in fresh.stdout
