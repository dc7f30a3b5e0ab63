"""``runner stats``: runs, success rate, durations, cost, tokens, tool failures and cap hits per
task, agent, model and tool over a time window, with trends and the window before."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli.json_output import echo_json
from runner.cli.terminal import echo_line


@click.command()
@click.option("--since", default="7d", show_default=True, help="Start of the window: 30m, 24h, 7d, 4w back from now, or a date (2026-11-30).")
@click.option("--until", help="End of the window (default: now), same forms as --since.")
@click.option("--task", help="Only runs of this task.")
@click.option("--by", "bucket", type=click.Choice(["hour", "day", "week"]), help="Trend buckets (default: from the window's length).")
@click.option("--json", "as_json", is_flag=True, help="Print the stats as JSON.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), help="Also write an HTML page with trend charts here.")
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=Path), help="Run store (SQLite) path.")
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), default=".", help="Project root.")
def stats(since: str, until: str | None, task: str | None, bucket: str | None, as_json: bool, html_path: Path | None,
          store_path: Path | None, root: Path) -> None:
    """How runs went over a time window (default: the last 7 days), compared with the window before.

    Answers questions like "did cost per report double this week?":
    runner stats --since 7d --task daily_report
    """
    from runner.cli.runs import open_store
    from runner.files import write_text_atomic
    from runner.stats.compute import compute_stats
    from runner.stats.window import parse_window

    window = parse_window(since, until)
    store = open_store(store_path, root)
    try:
        result = compute_stats(store, window, bucket, task)  # type: ignore[arg-type]  # click.Choice gives a Bucket
    finally:
        store.close()
    if html_path is not None:
        from runner.stats.page import render_page

        write_text_atomic(html_path, render_page(result))
    if as_json:
        echo_json(result.as_dict())
    else:
        from runner.stats.render import render_text

        for line in render_text(result).splitlines():
            echo_line(line)
        if html_path is not None:
            echo_line(f"page: {html_path}")
