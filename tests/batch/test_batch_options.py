"""Every surface of a batch held to the one description of its options (runner.batch.options)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import click
import pytest

from runner.batch.options import BATCH_OPTIONS, OPTIONS, BatchOptions
from runner.batch.request import BatchRequest
from runner.config.specs import BatchApiLimits
from runner.errors import UsageError

CLI_ONLY = {"task", "input_path", "output_path", "journal_path", "restart", "estimate", "no_calls", "report_dir",
            "progress", "base_url", "root", "as_json"}  # fmt: skip
API_ONLY = {"task", "root", "input_path", "output_path", "resume", "journal_path", "store_path", "store_url", "report_dir",
            "model_base_url", "api_key", "progress", "options"}  # fmt: skip
# a value other than the default for each option, as a rendered template or an API keyword gives it
GIVEN = {
    "input_format": "csv", "output_format": "parquet", "map": ["a=b"], "id_column": "id", "concurrency": "3",
    "rpm": "60", "tpm": 6000, "max_attempts": 4, "stop_after_failures": "5", "max_cost_usd": "2.5", "max_tokens": 900,
    "max_wall_seconds": 60, "caps": {"max_steps": 7}, "row_max_cost_usd": 0.01, "row_max_steps": "3",
    "row_caps": '{"max_tool_calls": 2}', "keep_answers": "true", "limit": 5, "sample": 6, "seed": 7, "retry_failed": True,
    "keep_columns": "a,b", "no_cache": True, "dedupe": "yes", "durable": True, "model": "gpt-x", "via": "batch-api",
    "batch_fallback": "live", "batch_poll_seconds": "5", "batch_max_requests": 10, "batch_max_file_bytes": "1000",
}  # fmt: skip


def test_every_cli_flag_is_an_option_of_the_table_with_its_help_and_default() -> None:
    from runner.cli.batch import batch

    params = {p.name: p for p in batch.params}
    options = {o.name for o in BATCH_OPTIONS if o.cli}
    assert set(params) == options | CLI_ONLY, set(params) ^ (options | CLI_ONLY)
    for name in options:
        param, option = params[name], OPTIONS[name]
        assert isinstance(param, click.Option) and param.opts == [option.flag] and param.help == option.help, name
        if option.kind not in ("flag", "list"):
            assert param.default == option.default, name
        assert param.multiple == (option.kind == "list") and param.is_flag == (option.kind == "flag"), name


def test_the_api_takes_every_option_by_name_and_refuses_others_naming_them(tmp_path: Path) -> None:
    from runner.api import run_batch

    signature = inspect.signature(run_batch)
    assert set(signature.parameters) == API_ONLY  # the options themselves come from the table
    assert signature.parameters["options"].kind is inspect.Parameter.VAR_KEYWORD
    with pytest.raises(UsageError, match=r"run_batch: unknown option 'id_colum'. Did you mean 'id_column'\?"):
        run_batch("t", root=tmp_path, input_path=tmp_path / "in.csv", output_path=tmp_path / "o.jsonl", id_colum="id")
    with pytest.raises(UsageError, match=r"run_batch.concurrency: 0 is less than the minimum of 1"):
        run_batch("t", root=tmp_path, input_path=tmp_path / "in.csv", output_path=tmp_path / "o.jsonl", concurrency=0)


def test_the_table_lists_each_option_once_and_the_example_covers_them_all() -> None:
    assert len(OPTIONS) == len(BATCH_OPTIONS) and set(GIVEN) == set(OPTIONS)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_every_option_reaches_the_batch_request(name: str) -> None:
    """Given alone, each option changes the request a batch runs: none is typed and then dropped."""
    limits = BatchApiLimits()

    def request(options: BatchOptions) -> BatchRequest:
        return BatchRequest(input_path=Path("in.csv"), output_path=Path("o.jsonl"),
                            batch_limits=options.batch_limits(limits), **options.request_fields())  # fmt: skip

    assert request(BatchOptions.typed({name: GIVEN[name]})) != request(BatchOptions())


@pytest.mark.parametrize(("name", "where"), [(o.name, o.fanout) for o in BATCH_OPTIONS])
def test_the_airflow_options_are_the_options_with_a_fanout_rule(name: str, where: Any) -> None:
    from runner.airflow.options import OPTION_NAMES, check_option_names, typed_options

    if where is not None:
        assert name in OPTION_NAMES
        typed_options({name: GIVEN[name]})
        return
    assert name not in OPTION_NAMES
    with pytest.raises(UsageError, match=re.escape(f"options: '{name}' is not an option here: {OPTIONS[name].elsewhere}")):
        check_option_names({name: GIVEN[name]})


def test_a_cap_of_zero_is_given_not_dropped() -> None:
    assert BatchOptions.typed({"max_cost_usd": 0}).batch_caps.max_cost_usd == 0


@pytest.mark.parametrize("given", [{"batch_fallback": "live"}, {"batch_max_requests": 10}, {"batch_max_file_bytes": "1000"}])
def test_a_provider_batch_option_for_a_live_batch_is_refused_by_the_cli_and_the_api(
    given: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not ignored: the API takes these options since they come from the table, and refuses them as the CLI does."""
    from click.testing import CliRunner

    from runner.api import run_batch
    from runner.cli.batch import batch
    from runner.model.server import ScriptedServer
    from tests.support.project import copy_shipped

    root = copy_shipped(tmp_path / "project", ("agents.d", "tasks.d"))
    rows = root / "rows.jsonl"
    rows.write_text('{"id": "r1", "subject": "Crash", "body": "It crashes"}\n')
    (name, value), out = next(iter(given.items())), root / "out.jsonl"
    refused = f"{OPTIONS[name].flag} only applies with --via batch-api"
    with ScriptedServer({"fallback": {"content": "{}"}}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-api")
        with pytest.raises(UsageError, match=re.escape(refused)):
            run_batch("triage_ticket", root=root, input_path=rows, output_path=out, via="live", **given)
        result = CliRunner().invoke(batch, ["triage_ticket", "--root", str(root), "--input", str(rows), "--output",
                                            str(out), "--via", "live", OPTIONS[name].flag, str(value)])  # fmt: skip
        assert isinstance(result.exception, UsageError) and refused in str(result.exception), result.output
        assert server.requests == [] and not out.exists()
