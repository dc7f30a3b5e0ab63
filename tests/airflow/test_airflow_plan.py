"""Fan-out options, each shard's share, shard ranges and paths (no Airflow needed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from runner.airflow.options import typed_options
from runner.airflow.plan import FanoutPlan, ShardSpec, plan_shards, run_work_dir
from runner.batch.options import BatchOptions
from runner.config.specs import Caps
from runner.errors import UsageError
from runner.locations import location

# What "{{ params.x }}" renders natively (render_template_as_native_obj) for the example DAG's defaults.
RENDERED_DEFAULTS = {
    "input_format": None, "output_format": None, "map": [], "id_column": None, "concurrency": None, "rpm": None,
    "tpm": None, "max_attempts": 2, "stop_after_failures": None, "max_cost_usd": None, "max_tokens": None,
    "max_wall_seconds": None, "row_max_cost_usd": None, "row_max_steps": None, "durable": False, "model": None,
}  # fmt: skip


def test_rendered_defaults_are_the_cli_defaults() -> None:
    # concurrency: the CLI names no number (8 rows live, every row in a provider batch); a fan-out is live
    assert typed_options(RENDERED_DEFAULTS).request_fields() == BatchOptions().request_fields()
    assert typed_options({**RENDERED_DEFAULTS, "concurrency": 8}) == BatchOptions({"max_attempts": 2, "concurrency": 8})


def test_every_cli_batch_option_is_taken() -> None:
    options = typed_options(
        {**RENDERED_DEFAULTS, "input_format": "csv", "output_format": "parquet", "map": '["subject=title"]',
         "id_column": "id", "concurrency": "3", "rpm": "60", "tpm": "6000", "max_attempts": "4",
         "stop_after_failures": "5", "max_cost_usd": "2.5", "max_tokens": "9000", "max_wall_seconds": "600",
         "row_max_cost_usd": "0.01", "row_max_steps": "3", "durable": "True", "model": "gpt-x"}
    )  # fmt: skip
    fields = options.request_fields()
    assert {k: fields[k] for k in ("format", "output_format", "mapping", "id_column", "concurrency", "requests_per_minute",
                                   "tokens_per_minute", "max_attempts", "stop_after_failures", "durable", "model_override")} == {
        "format": "csv", "output_format": "parquet", "mapping": ("subject=title",), "id_column": "id", "concurrency": 3,
        "requests_per_minute": 60.0, "tokens_per_minute": 6000.0, "max_attempts": 4, "stop_after_failures": 5,
        "durable": True, "model_override": "gpt-x"}
    assert options.batch_caps == Caps(max_cost_usd=2.5, max_tokens=9000, max_wall_seconds=600.0)
    assert options.row_caps == Caps(max_cost_usd=0.01, max_steps=3)


def test_caps_mappings_tighten_the_flat_caps() -> None:
    options = typed_options({"caps": {"max_cost_usd": "1", "max_steps": 50}, "max_cost_usd": 3})
    assert options.batch_caps == Caps(max_cost_usd=1.0, max_steps=50)
    options = typed_options({"row_caps": '{"max_tool_calls": 2, "max_cost_usd": null}', "row_max_steps": "4"})
    assert options.row_caps == Caps(max_tool_calls=2, max_steps=4)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_cost_usd": "nan"}, "options.max_cost_usd: 'nan' is not a finite number"),
        ({"max_cost_usd": "None"}, "options.max_cost_usd: 'None' is not a number (to set no cap, leave it out)"),
        ({"row_max_cost_usd": "-1"}, "options.row_max_cost_usd: '-1' is out of range"),
        ({"rpm": "None"}, "options.rpm: expected a number, got 'None'"),
        ({"concurrency": "0"}, "options.concurrency: 0 is less than the minimum of 1"),
        ({"max_attempts": "two"}, "options.max_attempts: expected an integer"),
        ({"input_format": "xlsx"}, "options.input_format: 'xlsx' is not one of csv, jsonl, parquet"),
        ({"map": "[1]"}, "options.map: expected a list of text items"),
        ({"id_colum": "id"}, "unknown option 'id_colum'. Did you mean 'id_column'?"),
    ],
)
def test_bad_options_are_refused_by_name(values: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        typed_options(values)


def test_a_shard_shares_the_rates_and_reserves_the_summed_caps_in_one_shared_scope(tmp_path: Path) -> None:
    options = BatchOptions({"max_cost_usd": 1.0, "max_tokens": 3, "max_wall_seconds": 60.0, "rpm": 120.0})
    share = options.shard_share(4)
    assert share.batch_caps == options.batch_caps  # not divided: the shards share one scope
    assert share["rpm"] == 30.0 and share["tpm"] is None  # a rate is per process
    assert options.shard_share(1) == options
    work = run_work_dir(tmp_path, "dag", "manual__1", "fanout")
    plan = FanoutPlan("t", tmp_path, tmp_path / "in.csv", work, options, key="dag/abc/fanout")
    shards = plan_shards(8, "x", num_shards=4, shard_size=None)
    requests = [plan.request(shard) for shard in shards]
    assert {r.shared_scope for r in requests} == {plan.shared_scope()}  # one scope for every shard
    scope = requests[0].shared_scope
    assert scope is not None and scope.key == "fanout:dag/abc/fanout" and scope.caps == options.batch_caps
    assert scope.sqlite_path == work / "caps.sqlite3"  # without a PostgreSQL store: next to the journals
    assert all(r.batch_caps == Caps(max_wall_seconds=60.0) for r in requests)  # each shard keeps its wall clock
    assert FanoutPlan("t", tmp_path, tmp_path / "in.csv", work, BatchOptions()).shared_scope() is None
    assert plan.request().shared_scope is None  # the whole-input request (counting rows) spends nothing


def test_a_fanout_computed_again_has_new_journals_and_a_fresh_shared_scope(tmp_path: Path) -> None:
    """A shard's generation names its journal; the split's generation, carried on each shard, its cap scope."""
    from dataclasses import replace

    work = run_work_dir(tmp_path, "dag", "manual__1", "fanout")
    plan = FanoutPlan("t", tmp_path, tmp_path / "in.csv", work, BatchOptions({"max_cost_usd": 1.0}), key="dag/abc/fanout")
    shard = replace(plan_shards(4, "x", num_shards=2, shard_size=None)[1], split_generation=3)
    assert ShardSpec.from_xcom(shard.as_xcom()) == shard
    older = {k: v for k, v in shard.as_xcom().items() if k != "gen"}  # pushed before generations: the first
    assert ShardSpec.from_xcom(older).split_generation == 1
    with pytest.raises(UsageError, match="not a shard"):
        ShardSpec.from_xcom({**shard.as_xcom(), "gen": 0})
    scope = plan.request(shard).shared_scope
    assert scope is not None and scope.key == "fanout:dag/abc/fanout/g3"
    assert plan.journal_path(shard).name == "shard-00001-of-00002.sqlite3"
    assert plan.for_generation(2).journal_path(shard).name == "shard-00001-of-00002-g2.sqlite3"
    assert plan.for_generation(2).request(shard).journal_path == plan.for_generation(2).journal_path(shard)
    assert plan.successes() == work / "split" and plan.successes(shard) == work / "shards" / "shard-00001-of-00002"


def test_with_a_postgresql_store_journals_and_the_ledger_are_named_by_the_dag_run(tmp_path: Path) -> None:
    options = BatchOptions({"caps": Caps(max_cost_usd=1.0)})
    plan = FanoutPlan("t", tmp_path, tmp_path / "in.csv", location("memory://bucket/work"), options,
                      key="dag/abc/fanout", store_url="postgresql://runner@db/runner")  # fmt: skip
    shard = plan_shards(8, "x", num_shards=2, shard_size=None)[1]
    request = plan.request(shard)
    assert str(request.output_path) == "memory://bucket/work/outputs/shard-00001-of-00002.jsonl"
    assert request.journal_path == Path("dag/abc/fanout/shard-00001-of-00002")
    assert request.store_url == "postgresql://runner@db/runner"
    assert request.shared_scope is not None and request.shared_scope.sqlite_path is None
    without = FanoutPlan("t", tmp_path, tmp_path / "in.csv", run_work_dir("memory://bucket/work", "d", "r", "f"), options)
    with pytest.raises(UsageError, match="PostgreSQL store"):
        without.request(shard)


@pytest.mark.parametrize(
    ("rows", "num", "size", "ranges"),
    [
        (10, 3, None, [(1, 4), (5, 7), (8, 10)]),
        (2, 8, None, [(1, 1), (2, 2)]),  # never an empty shard
        (7, None, 3, [(1, 3), (4, 5), (6, 7)]),  # at most 3 a shard, balanced
        (9, None, None, [(1, 3), (4, 5), (6, 7), (8, 9)]),  # default: 4 shards
        (0, 3, None, []),
    ],
)
def test_shards_cover_every_row_once(rows: int, num: int | None, size: int | None, ranges: list[tuple[int, int]]) -> None:
    shards = plan_shards(rows, "abc", num_shards=num, shard_size=size)
    assert [(s.first_row, s.last_row) for s in shards] == ranges
    assert sum(s.rows for s in shards) == rows
    assert all(s.count == len(shards) and s.input_sha256 == "abc" for s in shards)
    assert [ShardSpec.from_xcom(s.as_xcom()) for s in shards] == shards


def test_shard_specs_from_xcom_are_checked() -> None:
    with pytest.raises(UsageError, match="not a shard from the split task"):
        ShardSpec.from_xcom({"index": 0})
    with pytest.raises(UsageError, match="not a shard from the split task"):
        ShardSpec.from_xcom({"index": "0", "count": 1, "first_row": 1, "last_row": 1, "input_sha256": ""})
    with pytest.raises(UsageError, match="not a shard from the split task"):
        ShardSpec.from_xcom({"index": 0, "count": 1, "first_row": 3, "last_row": 2, "input_sha256": ""})
    with pytest.raises(UsageError, match="not both"):
        plan_shards(3, "", num_shards=1, shard_size=1)


def test_paths_are_per_dag_run_and_fanout_and_the_same_for_every_try(tmp_path: Path) -> None:
    work = run_work_dir(tmp_path, "dag", "manual__1", "fanout")
    assert work == run_work_dir(tmp_path, "dag", "manual__1", "fanout")
    assert work != run_work_dir(tmp_path, "dag", "manual__2", "fanout")
    assert work != run_work_dir(tmp_path, "dag", "manual__1", "other")
    plan = FanoutPlan("t", tmp_path, tmp_path / "in.csv", work, BatchOptions({"max_attempts": 3}))
    shard = plan_shards(10, "x", num_shards=2, shard_size=None)[1]
    first, retry = plan.request(shard, try_number=1), plan.request(shard, try_number=2)
    assert first.journal_path == retry.journal_path == work / "journals" / "shard-00001-of-00002.sqlite3"
    assert first.rows == (6, 10) and first.input_path == tmp_path / "in.csv"
    assert (first.max_attempts, retry.max_attempts) == (3, 6)  # attempts per Airflow try
    assert plan.merged_output_path(None) == work / "output.jsonl"
    assert plan.merged_output_path("/x/out.csv") == Path("/x/out.csv")
