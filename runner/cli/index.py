"""``runner index [NAME ...]``: build or refresh knowledge base indexes ahead of a run."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import click

from runner.agent.embedding_meter import LedgerEmbeddingMeter, SpendTally, embedding_pricer
from runner.caps.budget import Budget
from runner.cli.options import CapValue
from runner.cli.terminal import safe_text
from runner.config.project import find_root, load_project_or_raise
from runner.config.specs import Caps
from runner.errors import EXIT_CAPPED, EXIT_FAILED, CapReached, ConfigError, did_you_mean
from runner.runs.options import RunOptions
from runner.runs.services import index_path, open_knowledge


@click.command()
@click.argument("names", nargs=-1)
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Project root (default: found from the current directory).")
@click.option("--base-url", help="Send embedding calls to this OpenAI-compatible endpoint (bases without their own base_url).")
@click.option("--max-cost-usd", type=CapValue("max_cost_usd"), help="US dollars the embedding calls may cost at most; a request that would pass it is not sent (exit 3).")
def index(names: tuple[str, ...], root: Path | None, base_url: str | None, max_cost_usd: float | None) -> int:
    """Build or refresh the indexes of knowledge bases NAMES (default: all).

    Unchanged files are skipped (by size, time and content hash); changed ones are
    re-chunked; removed ones are dropped. Runs refresh the bases they use the same way.
    Exit 1 when a source file could not be read (the others are indexed); exit 3 when the
    embedding calls would pass --max-cost-usd. What the embedding calls cost is printed.
    """
    project = load_project_or_raise((root or find_root(Path.cwd())).resolve())
    for name in names:
        if name not in project.knowledge:
            hint = did_you_mean(name, project.knowledge) or f"; known: {', '.join(sorted(project.knowledge)) or 'none'}"
            raise ConfigError(f"unknown knowledge base '{name}'{hint}")
    selected = list(names) or sorted(project.knowledge)
    if not selected:
        raise ConfigError("this project declares no knowledge base (kind: Knowledge, or knowledge: on an agent or task)")

    budget = Budget(Caps(max_cost_usd=max_cost_usd), scope="index")
    tally = SpendTally()

    def meter_for(name: str) -> LedgerEmbeddingMeter:
        spec = project.knowledge[name].embeddings
        model = spec.model if spec is not None else ""
        return LedgerEmbeddingMeter(budget, tally, embedding_pricer(project.prices, model), name)

    def spent() -> str:
        usage = tally.usage
        return f"embeddings: {tally.calls} call(s), {usage.input_tokens} tokens, ${usage.cost_usd:.6f}"

    async def build() -> int:
        failed = 0
        try:
            async with contextlib.AsyncExitStack() as stack:
                options = RunOptions(base_url_override=base_url)
                _, reports = await open_knowledge(project, selected, options, stack, meter_for=meter_for)
        except CapReached as cap:
            click.echo(safe_text(f"error: {cap}; the index is kept as far as it got ({spent()})"), err=True)
            return EXIT_CAPPED
        click.echo(spent(), err=True)
        for name in selected:
            report = reports[name]
            where = index_path(project.root, name).relative_to(project.root)
            click.echo(safe_text(f"{name}: {report.summary()} ({where})"))
            for problem in report.problems:
                click.echo(safe_text(f"{name}: error: {problem}"), err=True)
            failed += bool(report.problems)
        return EXIT_FAILED if failed else 0

    return asyncio.run(build())
