"""``runner report RUN_ID``: re-render a run's report from the run store."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from runner.cli.runs import open_store, resolve_run_id
from runner.cli.terminal import safe_line
from runner.core.report_formats import DEFAULT_FORMATS, NAMES
from runner.errors import RunnerError, UsageError


@click.command()
@click.argument("run_id")
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=Path), help="Run store (SQLite) path.")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".", help="Project root.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Output directory (default: the run's report directory).")
@click.option("--format", "formats", multiple=True, type=click.Choice(NAMES), help=f"Formats (default: {', '.join(DEFAULT_FORMATS)}).")
def report(run_id: str, store_path: Path | None, root: Path, out_dir: Path | None, formats: tuple[str, ...]) -> None:
    """Re-render the report of RUN_ID (Markdown, HTML, JSON; PDF, Excel on request) from the run store."""
    from runner.reports.writer import write_report
    from runner.runs.workspace import default_workspace

    store = open_store(store_path, root)
    run_id = resolve_run_id(store, run_id)
    run = store.run(run_id)
    assert run is not None
    if not run["record_json"]:
        raise UsageError(f"run {run_id} has no record yet (status {run['status']}); it may still be running")
    record = json.loads(run["record_json"])
    target = out_dir or _default_target(root, run, run_id)
    workspace = default_workspace(root.resolve(), run_id)
    written = write_report(
        record, target, workspace if workspace.is_dir() else None,
        formats=formats or DEFAULT_FORMATS, secrets=_secrets(root), transcript=store.transcripts.read(run_id),
    )  # fmt: skip
    for path in written.values():
        click.echo(safe_line(path))


def _default_target(root: Path, run: Any, run_id: str) -> Path:
    """The run's report directory (or ``reports/<task>/<run id>``); when it is in the project,
    no link in it may lead out (its files are rewritten)."""
    from runner.local_state import confined_tree

    base = root.resolve()
    target = base / run["report_dir"] if run["report_dir"] else base / "reports" / run["task"] / run_id
    if target.is_relative_to(base):
        confined_tree(target, base, "the run's report", "give the report another place (--out DIR)")
    return target


def _secrets(root: Path) -> list[str]:
    """The keys the project's agents and tools name, as a run of it would redact them;
    when the project cannot be read, at least the standard variable."""
    from runner.config.project import load_project
    from runner.runs.options import RunOptions
    from runner.runs.secrets import known_secrets

    try:
        return known_secrets(load_project(root)[0], RunOptions())
    except (RunnerError, OSError, ValueError):
        key = os.environ.get("OPENAI_API_KEY", "")
        return [key] if len(key) >= 6 else []
