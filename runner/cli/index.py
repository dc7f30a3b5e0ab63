"""``runner index [NAME ...]``: build or refresh knowledge base indexes ahead of a run."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import click

from runner.cli.terminal import safe_text
from runner.config.project import find_root, load_project_or_raise
from runner.errors import EXIT_FAILED, ConfigError, did_you_mean
from runner.runs.options import RunOptions
from runner.runs.services import index_path, open_knowledge


@click.command()
@click.argument("names", nargs=-1)
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), help="Project root (default: found from the current directory).")
@click.option("--base-url", help="Send embedding calls to this OpenAI-compatible endpoint (bases without their own base_url).")
def index(names: tuple[str, ...], root: Path | None, base_url: str | None) -> int:
    """Build or refresh the indexes of knowledge bases NAMES (default: all).

    Unchanged files are skipped (by size, time and content hash); changed ones are
    re-chunked; removed ones are dropped. Runs refresh the bases they use the same way.
    Exit 1 when a source file could not be read (the others are indexed).
    """
    project = load_project_or_raise((root or find_root(Path.cwd())).resolve())
    for name in names:
        if name not in project.knowledge:
            hint = did_you_mean(name, project.knowledge) or f"; known: {', '.join(sorted(project.knowledge)) or 'none'}"
            raise ConfigError(f"unknown knowledge base '{name}'{hint}")
    selected = list(names) or sorted(project.knowledge)
    if not selected:
        raise ConfigError("this project declares no knowledge base (kind: Knowledge, or knowledge: on an agent or task)")

    async def build() -> int:
        failed = 0
        async with contextlib.AsyncExitStack() as stack:
            _, reports = await open_knowledge(project, selected, RunOptions(base_url_override=base_url), stack)
        for name in selected:
            report = reports[name]
            where = index_path(project.root, name).relative_to(project.root)
            click.echo(safe_text(f"{name}: {report.summary()} ({where})"))
            for problem in report.problems:
                click.echo(safe_text(f"{name}: error: {problem}"), err=True)
            failed += bool(report.problems)
        return EXIT_FAILED if failed else 0

    return asyncio.run(build())
