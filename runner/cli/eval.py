"""``runner eval NAME``: an eval's variants over its labelled cases; exit 1 when a variant's
pass rate is below its threshold, so CI and Airflow can gate on it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runner.cli.json_output import echo_json, json_text
from runner.cli.options import CapValue, FiniteFloatRange, caps_from_flags
from runner.cli.terminal import echo_line as echo
from runner.config.project import find_root, load_project_or_raise
from runner.errors import EXIT_INTERRUPTED, UsageError, did_you_mean

if TYPE_CHECKING:
    from runner.config.evals import EvalSpec
    from runner.config.project import Project
    from runner.evals.results import EvalResult


@click.command("eval")
@click.argument("name")
@click.option("--variant", "variants", multiple=True, metavar="NAME", help="Run only this variant (repeatable).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), help="Where results go (default: reports/evals/NAME).")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False, path_type=Path), help="Compare with this stored result (default: the eval's baseline).")
@click.option("--save-baseline", is_flag=True, help="Store this result as the baseline (after comparing with the old one).")
@click.option("--restart", is_flag=True, help="Discard the variants' journals and run every case again (default: resume).")
@click.option("--no-cache", is_flag=True, help="Bypass the result cache (cache: {ttl} in the YAML): every call goes to the endpoint or tool.")
@click.option("--concurrency", type=click.IntRange(1, 1024), help="Cases in flight at once (default: the eval's, else 8).")
@click.option("--rpm", type=FiniteFloatRange(min=0, min_open=True), help="Model requests per minute, shared by all cases.")
@click.option("--tpm", type=FiniteFloatRange(min=0, min_open=True), help="Model tokens per minute, shared by all cases.")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=2, show_default=True, help="Attempts per case.")
@click.option("--max-cost-usd", type=CapValue("max_cost_usd"), help="Cap per variant: total US dollars (tightens the eval's).")
@click.option("--max-tokens", type=CapValue("max_tokens"), help="Cap per variant: total tokens.")
@click.option("--max-wall-seconds", type=CapValue("max_wall_seconds"), help="Cap per variant: wall-clock seconds.")
@click.option("--base-url", help="Send model calls to this OpenAI-compatible endpoint.")
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=Path), help="Run store (SQLite) path.")
@click.option("--progress", type=click.Choice(["auto", "bar", "log", "none"]), default="none", show_default=True)
@click.option("--root", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Project root.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def eval_(name: str, variants: tuple[str, ...], out_dir: Path | None, baseline_path: Path | None, save_baseline: bool,
          restart: bool, no_cache: bool, concurrency: int | None, rpm: float | None, tpm: float | None, max_attempts: int,
          max_cost_usd: float | None, max_tokens: int | None, max_wall_seconds: float | None, base_url: str | None,
          store_path: Path | None, progress: str, root: Path | None, as_json: bool) -> None:
    """Run the eval NAME (evals.d/): every variant over its dataset, every case checked.

    Writes eval_report.md / .html / .json; exit codes: 0 every variant at or above its
    threshold, 1 a variant below it, 2 configuration or usage error, 3 a cap stopped a
    variant, 130 interrupted (rerun to resume).
    """
    from runner.evals.dataset import baseline_target_problem
    from runner.evals.report import write_reports
    from runner.evals.run import EvalRequest, run_eval
    from runner.local_state import confined_tree

    root = (root or find_root(Path(name) if name.endswith((".yaml", ".yml")) else Path.cwd())).resolve()
    project = load_project_or_raise(root)
    spec = _eval_named(project, name)
    target = baseline_path or spec.baseline
    if save_baseline and target is None:
        raise UsageError(f"--save-baseline: eval '{spec.name}' declares no baseline: add baseline: PATH to it, or pass --baseline PATH")
    if save_baseline and (why := baseline_target_problem(spec, root, baseline_path)) is not None:
        raise UsageError(f"--save-baseline: {spec.source}: /baseline: {why}")
    out = out_dir or confined_tree(root / "reports" / "evals" / spec.name, root, "eval results", "give the eval another place (--out DIR)")
    request = EvalRequest(
        out_dir=out, variants=variants, restart=restart, concurrency=concurrency, max_attempts=max_attempts,
        caps=caps_from_flags({"max_cost_usd": max_cost_usd, "max_tokens": max_tokens, "max_wall_seconds": max_wall_seconds}),
        requests_per_minute=rpm, tokens_per_minute=tpm, base_url_override=base_url, store_path=store_path,
        progress=progress, baseline_path=baseline_path, use_cache=not no_cache,
    )
    try:
        result = asyncio.run(run_eval(project, spec, request))
    except KeyboardInterrupt:
        click.echo("interrupted: rerun the same command to resume", err=True)
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
    paths = write_reports(result, out)
    if save_baseline and target is not None:
        from runner.files import write_text_atomic

        write_text_atomic(target, json_text(result.as_dict(), warn=False) + "\n")
    _show(result, paths, target if save_baseline else None, as_json)
    raise click.exceptions.Exit(result.exit_code)


def _eval_named(project: Project, name: str) -> EvalSpec:
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        found = [e for e in project.evals.values() if project.document("Eval", e.name).path.resolve() == path.resolve()]
        if found:
            return found[0]
        raise UsageError(f"{name}: no Eval document in this file (or it is outside {project.root})")
    spec = project.evals.get(name)
    if spec is None:
        listed = f" (evals: {', '.join(project.evals) or 'none; add one to evals.d/'})"
        raise UsageError(f"unknown eval '{name}'{did_you_mean(name, project.evals) or listed}")
    return spec


def _show(result: EvalResult, paths: dict[str, Path], saved: Path | None, as_json: bool) -> None:
    from runner.evals.report import changes_text, verdict

    if as_json:
        echo_json(result.as_dict())
        return
    echo(f"eval {result.eval} (task {result.task}, {result.dataset})")
    for v in result.variants:
        rate = "-" if v.pass_rate is None else f"{v.pass_rate * 100:.1f}%"
        bar = "" if v.threshold is None else f" (threshold {v.threshold * 100:.1f}%)"
        echo(f"  {v.name:<20} {rate:>7} pass{bar}, {v.passed}/{len(v.cases)} cases, ${v.cost_usd:.6f}: {verdict(v)}  [{changes_text(v)}]")
    for c in result.comparisons:
        was = "-" if c.baseline_pass_rate is None else f"{c.baseline_pass_rate * 100:.1f}%"
        echo(f"  vs baseline {c.variant}: was {was}; {len(c.regressions)} regressed, {len(c.fixes)} fixed")
    echo(f"report: {paths['markdown']} (also eval_report.html, eval_report.json)")
    if saved is not None:
        echo(f"baseline saved: {saved}")
