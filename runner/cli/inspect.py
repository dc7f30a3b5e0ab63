"""``runner schema`` and ``runner list``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from runner.cli.terminal import safe_line
from runner.config.project import load_project_or_raise


@click.command(name="schema")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Write <kind>.schema.json files here (default: list them).")
def schema_command(out_dir: Path | None) -> None:
    """Write the JSON Schemas (Draft 2020-12) that define the configuration language."""
    from runner.config.schema import SCHEMA_NAMES, exported_schema
    from runner.config.schema import schema as schema_document

    if out_dir is None:
        for name in SCHEMA_NAMES:
            click.echo(f"{name}.schema.json  {schema_document(name).get('title', '')}")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in SCHEMA_NAMES:
        (out_dir / f"{name}.schema.json").write_text(json.dumps(exported_schema(name), indent=2) + "\n")
    click.echo(f"wrote {len(SCHEMA_NAMES)} schemas to {out_dir}")


schema = schema_command  # the name the CLI looks up


@click.command(name="list")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".", help="Project root.")
def list_(root: Path) -> None:
    """List the project's agents, tasks, tools (built-in and custom) and knowledge bases."""
    from runner.tools.builtins import builtin_names

    project = load_project_or_raise(root)
    click.echo("agents:")
    for agent in project.agents.values():
        click.echo(safe_line(f"  {agent.name:<24} {agent.model.id:<20} {agent.description[:60]}"))
    click.echo("tasks:")
    for task in project.tasks.values():
        kind = "pipeline" if task.pipeline else f"agent {task.agent}"
        click.echo(safe_line(f"  {task.name:<24} {kind:<20} {task.description[:60]}"))
    click.echo("tools:")
    for name in builtin_names():
        click.echo(f"  {name:<24} built-in")
    for tool in project.tools.values():
        click.echo(safe_line(f"  {tool.name:<24} {tool.type:<20} {tool.source}"))
    if project.knowledge:
        click.echo("knowledge:")
    for base in project.knowledge.values():
        click.echo(safe_line(f"  {base.name:<24} {base.search_mode:<20} {', '.join(base.sources)[:60]}"))
