"""``runner run TASK``: one headless run. Never reads stdin."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from runner.cli.json_output import json_text
from runner.cli.options import EndpointURL, LocationType, ModelId, caps_from_flags, caps_options, parse_inputs
from runner.cli.terminal import safe_line, safe_text
from runner.config.project import find_root, load_project_or_raise
from runner.core.report_formats import by_opening_order
from runner.locations import Location
from runner.runs.options import RunOptions


@click.command()
@click.argument("task")
@click.option("--input", "-i", "inputs", multiple=True, metavar="NAME=VALUE", help="A task input (repeatable).")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Project root (default: found from TASK or the current directory).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON Lines event stream on stdout instead of a readable log.")
@click.option("--model", type=ModelId(), help="Use this model id for every agent in this run.")
@click.option("--base-url", type=EndpointURL(), help="Send model calls to this OpenAI-compatible endpoint.")
@click.option("--run-id", help="Run id; an existing id resumes that run without redoing completed steps.")
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=Path), help="Run store, an SQLite file (default: $RUNNER_STORE_URL when set, else .runner/runs.sqlite3).")
@click.option("--reports-dir", type=LocationType(), help="Where reports go: a directory or a URL such as s3://bucket/reports (default: <root>/reports).")
@click.option("--no-report", is_flag=True, help="Do not write a report.")
@click.option("--no-cache", is_flag=True, help="Bypass the result cache (cache: {ttl} in the YAML): every call goes to the endpoint or tool.")
@caps_options
def run(
    task: str, inputs: tuple[str, ...], root: Path | None, as_json: bool, model: str | None, base_url: str | None,
    run_id: str | None, store_path: Path | None, reports_dir: Location | None, no_report: bool, no_cache: bool,
    **caps: Any,
) -> None:
    """Run TASK (a name, or a path like tasks.d/daily_report.yaml) once, headless.

    Exit codes: 0 completed, 1 failed, 2 configuration or usage error, 3 stopped by a cap, 4 stuck,
    5 completed but a report delivery failed, 130 interrupted.
    """
    from runner.cli.render import HumanLog, JsonLines
    from runner.model.factory import check_endpoints
    from runner.runs.execute import execute_task

    root = (root or find_root(Path(task) if task.endswith((".yaml", ".yml")) else Path.cwd())).resolve()
    project = load_project_or_raise(root)
    spec = project.task_for(task)
    check_endpoints(project, spec, model_override=model, base_url_override=base_url)
    sink = JsonLines() if as_json else HumanLog()
    options = RunOptions(
        run_id=run_id, caps=caps_from_flags(caps), store_path=store_path, reports_dir=reports_dir,
        write_report=not no_report, model_override=model, base_url_override=base_url, events=sink,
        use_cache=not no_cache,
    )
    result = asyncio.run(execute_task(project, spec, parse_inputs(inputs), options))
    if not as_json:
        if result.report_dir:
            shown = by_opening_order(spec.report.formats)
            files = [f.file for f in shown if (result.report_dir / f.file).is_file()]
            also = f" (also {', '.join(files[1:])})" if files[1:] else ""
            if files:
                click.echo(safe_line(f"report: {result.report_dir / files[0]}{also}"), err=True)
        output = result.output  # for a person: control characters shown as escapes (--json is exact)
        if output is not None:
            click.echo(safe_text(output if isinstance(output, str) else json_text(output)))
    raise click.exceptions.Exit(result.exit_code)
