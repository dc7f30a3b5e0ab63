"""``runner validate``: schema validation, then cross-reference checks."""

from __future__ import annotations

import os
from pathlib import Path

import click

from runner.cli.json_output import echo_json
from runner.cli.terminal import safe_line
from runner.config.data_checks import source_environment_problems
from runner.config.project import Project, display_path, find_root, load_project
from runner.errors import EXIT_CONFIG, EXIT_OK, Problem


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--root",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Project root (default: found from PATHS or the current directory).",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--sources", "check_sources", is_flag=True, help="Also connect to each SQL source and warn when its account can read the server's files.")
@click.pass_context
def validate(ctx: click.Context, paths: tuple[Path, ...], root: Path | None, fmt: str, check_sources: bool) -> None:
    """Validate PATHS (files or directories; default: the project's agents.d, tasks.d, tools.d, evals.d).

    Files are checked in the context of the whole project, so references to agents and
    tools defined elsewhere resolve. A SQL source URL in a variable (url_env, an Airflow
    connection) that a run would refuse is an error here too (its value never shown). Exit 0 when valid, 2 when not (warnings do not count).
    """
    root = (root or (find_root(paths[0]) if paths else Path.cwd())).resolve()
    project, problems = load_project(root, list(paths), use_cache=False)  # validate always checks everything
    problems += source_environment_problems(project, os.environ)
    if check_sources and not any(p.severity == "error" for p in problems):
        problems += _source_warnings(project)
    if paths:
        wanted = {display_path(p, root) for p in _expand(paths)}
        problems = [p for p in problems if p.file in wanted]
    errors = [p for p in problems if p.severity == "error"]
    under = _budgets_by_task(project) if not errors else {}
    if fmt == "json":
        shown = {"valid": not errors, "problems": [p.as_dict() for p in problems]}
        echo_json({**shown, "budgets": under} if under else shown)
    else:
        for problem in problems:
            click.echo(safe_line(problem.render()))
        for task, names in under.items():
            click.echo(safe_line(f"task {task}: budgets {', '.join(names) if names else '(none)'}"))
        count = (
            len(project.agents) + len(project.tasks) + len(project.tools) + len(project.evals) + len(project.budgets)
        )
        summary = f"{len(errors)} problem(s)" if errors else f"ok: {count} document(s) valid"
        click.echo(summary, err=True)
    ctx.exit(EXIT_CONFIG if errors else EXIT_OK)


def _source_warnings(project: Project) -> list[Problem]:
    """A warning for each SQL source whose account can read the server's files, or that cannot
    be reached to tell (named by the file and line that declare it)."""
    from runner.errors import ToolFailure
    from runner.tools.sql.privileges import server_file_access

    sources = {**project.sources, **{n: s for task in project.tasks.values() for n, s in task.sources.items()}}
    warnings = []
    for source in sources.values():
        try:
            why = server_file_access(source, project.root)
        except ToolFailure as error:
            why = f"could not connect to check its account: {error}"
        if why is not None:
            file, _, line = source.where.rpartition(":")
            at = int(line) if line.isdigit() else 1
            warnings.append(Problem(file or source.where, at, 1, "", f"source '{source.name}': {why}", severity="warning"))
    return warnings


def _budgets_by_task(project: Project) -> dict[str, list[str]]:
    """Task -> the budgets some call of it falls under (empty when the project has no budgets)."""
    if not project.budgets:
        return {}
    from runner.config.budgets import budgets_of_task

    return {name: [b.name for b in budgets_of_task(project, name)] for name in sorted(project.tasks)}


def _expand(paths: tuple[Path, ...]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        out.extend(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml")) if path.is_dir() else out.append(path)
    return out
