"""Shards and the merge through the real batch, the loopback model server and real journals (no Airflow).

The fan-out's merged output must be what ``runner batch`` writes for the same input: one record
per input row, the input's row numbers and ids, the same invalid rows for the same reasons.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.airflow.execution import run_batch_for_airflow
from runner.airflow.failures import rows_failure, rows_left
from runner.airflow.merge import MergedJournals, ShardOutputMissing, merge_fanout
from runner.airflow.options import typed_options
from runner.airflow.plan import FanoutPlan, ShardSpec, count_input_rows, plan_shards

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-airflow-merge-0123456789"
# A BOM, blank lines, a quoted newline, rows with identical inputs (distinct ids), an empty
# required cell (invalid), and a duplicate id two shards apart (invalid, as in `runner batch`).
TICKETS = (
    "\ufeffid,text\n"
    "T-1,alpha\n"
    "T-2,alpha\n"
    "\n"
    'T-3,"two\nlines"\n'
    "T-4,\n"
    "T-5,beta\n"
    "T-6,alpha\n"
    "T-1,gamma\n"
    "T-8,delta\n"
    "\n"
    "T-9,alpha\n"
)
SCRIPT = {"rules": [{"when": {"last_message": "beta"}, "reply": "label: B"}], "fallback": "label: other"}


def _fanout(project: Path, source: Path, server: Any, *, shards: int, options: dict[str, Any], try_number: int = 1,
            store_url: str | None = None) -> tuple[FanoutPlan, list[ShardSpec], dict[int, dict[str, Any]]]:
    plan = FanoutPlan("classify", project, source, project / "work", typed_options(options),
                      key="dag/run/fanout", store_url=store_url)  # fmt: skip
    proj, spec = plan.load()
    total, sha = count_input_rows(proj, spec, plan)
    specs = plan_shards(total, sha, num_shards=shards, shard_size=None)
    results = {}
    for shard in specs:
        request = plan.request(shard, try_number=try_number, model_base_url=server.base_url, api_key=KEY)
        results[shard.index] = {"index": shard.index, **run_batch_for_airflow("classify", root=project, request=request)}
    return plan, specs, results


def _merge(plan: FanoutPlan, shards: list[ShardSpec], results: dict[int, dict[str, Any]]) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    project, spec = plan.load()
    return merge_fanout(project, spec, plan, shards, results, batch_id="fanout-test",
                        output_path=plan.work / "merged.jsonl", report_dir=plan.work / "report")  # fmt: skip


def _cli_batch(project: Path, source: Path, server: Any, out: Path, *flags: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env.update(OPENAI_API_KEY=KEY, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "runner", "batch", "classify", "--input", str(source), "--output", str(out),
            "--base-url", server.base_url, "--root", str(project), "--progress", "none", "--journal",
            str(project / "cli.sqlite3"), *flags]  # fmt: skip
    subprocess.run(argv, env=env, check=False, capture_output=True, timeout=120)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("id_column", ["id", None])
def test_merged_output_is_what_runner_batch_writes(project: Path, scripted_server: Any, id_column: str | None) -> None:
    source = project / "tickets.csv"
    source.write_text(TICKETS, encoding="utf-8")
    flags = ("--id-column", id_column) if id_column else ()
    with scripted_server(SCRIPT) as server:
        _cli_batch(project, source, server, project / "cli.jsonl", *flags)
        plan, shards, results = _fanout(project, source, server, shards=3, options={"id_column": id_column})
    manifest, left, _ = _merge(plan, shards, results)
    keep = ("id", "row", "status", "output", "error", "error_kind")
    merged = [{k: r[k] for k in keep} for r in _lines(plan.work / "merged.jsonl")]
    cli = [{k: r[k] for k in keep} for r in _lines(project / "cli.jsonl")]
    assert merged == cli
    assert [r["row"] for r in merged] == list(range(1, 10))  # the input's numbering, not each shard's
    if id_column:
        assert [r["id"] for r in merged] == ["T-1", "T-2", "T-3", "T-4", "T-5", "T-6", "T-1", "T-8", "T-9"]
        assert [r["status"] for r in merged].count("invalid") == 2  # the empty text and the second T-1
    assert manifest["total"] == manifest["records"] == 9 and manifest["done"] == left.done
    assert left.not_done == left.failed + left.invalid + left.not_run > 0


def test_merged_report_is_the_batch_report(project: Path, scripted_server: Any) -> None:
    source = project / "tickets.csv"
    source.write_text(TICKETS, encoding="utf-8")
    with scripted_server(SCRIPT) as server:
        plan, shards, results = _fanout(project, source, server, shards=2, options={"id_column": "id"})
    manifest, left, report = _merge(plan, shards, results)
    written = json.loads((plan.work / "report" / "batch_report.json").read_text())
    assert written["rows"] == 9 and written["counts"]["done"] == 7 and written["counts"]["invalid"] == 2
    assert written["batch_id"] == "fanout-test" and written["task"] == "classify"
    assert written["input"]["path"] == str(source.resolve())
    assert written["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in results.values()))
    assert written["run"]["exit_code"] == 1 and written["errors_by_kind"]["input"]["count"] == 2
    assert [s["rows"] for s in written["shards"]] == [[1, 5], [6, 9]]
    assert manifest["report_path"].endswith("batch_report.md") and Path(manifest["report_path"]).is_file()
    message = rows_failure(report, left)
    assert message.startswith("2 of 9 row(s) not done (failed 0, invalid 2, not run 0): input: 2 (e.g. T-4, T-1:")


def test_a_retry_re_runs_rows_whose_attempts_were_used_up(project: Path, scripted_server: Any) -> None:
    source = project / "tickets.jsonl"
    source.write_text("".join(json.dumps({"text": f"ticket {i}"}) + "\n" for i in range(4)))
    script = {"rules": [{"when": {"last_message": "ticket 2"}, "times": 2, "reply": {"fault": {"status": 503}}}],
              "fallback": "label: ok"}  # fmt: skip
    options = {"max_attempts": 1}
    with scripted_server(script) as server:
        plan, shards, first = _fanout(project, source, server, shards=2, options=options, try_number=1)
        assert [(r["done"], r["failed"], r["retryable"]) for r in first.values()] == [(2, 0, 0), (1, 1, 1)]
        _, _, second = _fanout(project, source, server, shards=2, options=options, try_number=2)
        assert [(r["done"], r["failed"], r["retryable"]) for r in second.values()] == [(2, 0, 0), (1, 1, 1)]
        _, _, third = _fanout(project, source, server, shards=2, options=options, try_number=3)
        texts = [r.body["messages"][-1]["content"] for r in server.requests]
    assert [(r["done"], r["failed"]) for r in third.values()] == [(2, 0), (2, 0)]
    assert sum("ticket 2" in t for t in texts) == 3  # one attempt per try; try 3 got past the two faults
    assert len(texts) == 6, "rows done in an earlier try are not run again"
    manifest, left, _ = _merge(plan, shards, third)
    assert left.not_done == 0 and manifest["done"] == 4


def test_merge_refuses_missing_shard_outputs(project: Path, scripted_server: Any) -> None:
    source = project / "tickets.jsonl"
    source.write_text("".join(json.dumps({"text": f"ticket {i}"}) + "\n" for i in range(6)))
    with scripted_server({"fallback": "label: ok"}) as server:
        plan, shards, results = _fanout(project, source, server, shards=3, options={})
    with pytest.raises(ShardOutputMissing, match=r"shard-00001-of-00003 \(rows 3-4\): the shard task returned no result"):
        _merge(plan, shards, {i: r for i, r in results.items() if i != 1})
    plan.output_path(shards[2]).unlink()
    with pytest.raises(ShardOutputMissing, match=r"shard-00002-of-00003 \(rows 5-6\): its output .* is missing"):
        _merge(plan, shards, results)
    assert not (plan.work / "merged.jsonl").exists()


def test_merged_journals_refuse_rows_out_of_their_range(project: Path, scripted_server: Any) -> None:
    from runner.batch.file_batch import open_journal

    source = project / "tickets.jsonl"
    source.write_text("".join(json.dumps({"text": f"ticket {i}"}) + "\n" for i in range(4)))
    with scripted_server({"fallback": "label: ok"}) as server:
        plan, shards, _ = _fanout(project, source, server, shards=2, options={})
    proj, spec = plan.load()
    journal, _ = open_journal(proj, spec, plan.request(shards[1]))
    with journal:
        wrong = ShardSpec(1, 2, 3, 5, shards[1].input_sha256)  # claims one row more than the journal holds
        with pytest.raises(ShardOutputMissing, match=r"1 row\(s\) from row 5 on are not in its journal"):
            list(MergedJournals("b", [(wrong, journal)], {}).records())
        with pytest.raises(ShardOutputMissing, match="its journal has row 3 where row 1 belongs"):
            list(MergedJournals("b", [(ShardSpec(0, 1, 1, 2, ""), journal)], {}).records())
        assert rows_left(MergedJournals("b", [(shards[1], journal)], {})).done == 2


CALL = {"content": "label: ok", "usage": {"prompt_tokens": 20, "completion_tokens": 500}}  # 0.000303 USD at gpt-4o-mini


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_fanout_cost_cap_holds_across_shards_in_one_shared_scope(
    project: Path, scripted_server: Any, backend: str, request: pytest.FixtureRequest
) -> None:
    store_url = str(request.getfixturevalue("postgres_url")) if backend == "postgresql" else None
    source = project / "tickets.jsonl"
    source.write_text("".join(json.dumps({"id": f"T{i:02d}", "text": f"ticket {i}"}) + "\n" for i in range(12)))
    cap = 0.0025
    options = {"id_column": "id", "concurrency": 1, "max_cost_usd": cap}
    with scripted_server({"fallback": CALL}) as server:
        plan, shards, results = _fanout(project, source, server, shards=2, options=options, store_url=store_url)
        calls = len(server.requests)
    first, second = results[0], results[1]
    assert first["done"] == 6 and first["cost_usd"] > cap / 2  # more than an even split would have let it spend
    assert second["skipped"] > 0 and second["stop_kind"] == "max_cost_usd"
    spent = first["cost_usd"] + second["cost_usd"]
    assert spent <= cap and calls == first["done"] + second["done"]
    manifest, left, report = _merge(plan, shards, results)
    ledger = report["ledger"]
    assert ledger["scope"] == "fanout:dag/run/fanout" and ledger["caps"] == {"max_cost_usd": cap}
    assert ledger["spent"]["cost_usd"] == pytest.approx(spent) and ledger["spent"]["model_calls"] == calls
    assert ledger["reserved"]["cost_usd"] == pytest.approx(0, abs=1e-12) and ledger["reserved"]["model_calls"] == 0
    markdown = Path(manifest["report_path"]).read_text()
    assert "Batch caps, shared by every shard (ledger `fanout:dag/run/fanout`)" in markdown
    assert f"| max_cost_usd | ${cap:.6f} | ${spent:.6f} | $0.000000 |" in markdown.replace("  ", " ")
    assert left.not_run == second["skipped"] and [r["status"] for r in _lines(plan.work / "merged.jsonl")].count("done") == calls
    if store_url:
        assert not (plan.work / "journals").exists() and not (plan.work / "caps.sqlite3").exists()  # all in PostgreSQL
