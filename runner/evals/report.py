"""An eval's report: Markdown, HTML and JSON, from one view of the results.

The per-case diff table lists the cases some variant failed, the variants disagree on, or
that regressed against the baseline (at most ``MAX_DIFF_ROWS``; the JSON has every case).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment

from runner.evals.results import CaseResult, EvalResult, VariantResult
from runner.files import write_text_atomic
from runner.reports.formatting import rate, seconds, usd
from runner.reports.templating import html_environment

MAX_DIFF_ROWS = 200


@dataclass(frozen=True)
class DiffRow:
    """One case across the variants: per variant, passed or not and why."""

    key: str
    cells: tuple[tuple[bool | None, str], ...]  # (passed, what to show); passed None: not run by that variant
    regressed: bool


def write_reports(result: EvalResult, out_dir: Path) -> dict[str, Path]:
    """``eval_report.md``, ``eval_report.html`` and ``eval_report.json`` in ``out_dir``."""
    paths = {"markdown": out_dir / "eval_report.md", "html": out_dir / "eval_report.html", "json": out_dir / "eval_report.json"}
    write_text_atomic(paths["markdown"], render_markdown(result))
    write_text_atomic(paths["html"], render_html(result))
    write_text_atomic(paths["json"], json.dumps(result.as_dict(), indent=2, ensure_ascii=False, default=str) + "\n")
    return paths


def diff_rows(result: EvalResult) -> tuple[list[DiffRow], int]:
    """The rows of the diff table, and how many cases there are in all."""
    regressed = {key for c in result.comparisons for key in c.regressions}
    by_variant = [{case.key: case for case in v.cases} for v in result.variants]
    keys = list(dict.fromkeys(case.key for v in result.variants for case in v.cases))
    rows = []
    for key in keys:
        cases = [found.get(key) for found in by_variant]
        outcomes = {c.passed for c in cases if c is not None}
        if outcomes == {True} and key not in regressed:
            continue
        rows.append(DiffRow(key, tuple(_cell(c) for c in cases), key in regressed))
    return rows, len(keys)


def verdict(variant: VariantResult) -> str:
    if variant.below_threshold:
        return "BELOW THRESHOLD"
    if variant.capped:
        return f"stopped by a cap ({variant.stop_kind})"
    return "ok" if variant.threshold is not None else "no threshold"


def changes_text(variant: VariantResult) -> str:
    parts = []
    for key, value in variant.changes.items():
        if key == "agents":
            parts += [f"agent {old} → {new}" for old, new in value.items()]
        elif key == "system_prompt":
            parts.append(f"system prompt ({len(value)} chars)")
        else:
            parts.append(f"{key} {value}")
    return ", ".join(parts) or "as configured"


def render_markdown(result: EvalResult) -> str:
    lines = [f"# Eval {result.eval} — task {result.task}", "",
             f"Dataset `{result.dataset}`, {len(result.variants[0].cases) if result.variants else 0} cases; {result.created_at}.", ""]
    lines += ["## Variants", "", "| variant | changes | pass rate | threshold | passed | cost | $/case | latency p50 | p95 | verdict |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for v in result.variants:
        lines.append(f"| {_md(v.name)} | {_md(changes_text(v))} | {rate(v.pass_rate)} | {rate(v.threshold)} | "
                     f"{v.passed}/{len(v.cases)} | {usd(v.cost_usd)} | {usd(v.cost_per_case)} | {seconds(v.latency(50))} | "
                     f"{seconds(v.latency(95))} | **{verdict(v)}** |")
        if v.stop_reason:
            lines.append(f"|  | stopped: {_md(v.stop_reason)} |  |  |  |  |  |  |  |  |")
    lines += ["", "## Checks", "", "| check | " + " | ".join(_md(v.name) for v in result.variants) + " |",
              "|---|" + "---:|" * len(result.variants)]
    rates = [v.check_rates() for v in result.variants]
    for label in dict.fromkeys(label for r in rates for label in r):
        lines.append(f"| {_md(label)} | " + " | ".join(_ratio(r.get(label)) for r in rates) + " |")
    lines += ["", *_baseline_markdown(result), "", *_diff_markdown(result)]
    return "\n".join(lines).rstrip() + "\n"


def _baseline_markdown(result: EvalResult) -> list[str]:
    if result.baseline_path is None:
        return ["## Baseline", "", "No baseline declared (`baseline:` in the eval, or `--baseline PATH`)."]
    if result.baseline_missing:
        return ["## Baseline", "", f"No baseline at `{result.baseline_path}` yet: `runner eval {result.eval} --save-baseline` writes one."]
    lines = ["## Against the baseline", "", f"`{result.baseline_path}`", "",
             "| variant | pass rate | was | $/case | was | p95 | was | regressions | fixes |", "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for c in result.comparisons:
        lines.append(f"| {_md(c.variant)} | {rate(c.pass_rate)} | {rate(c.baseline_pass_rate)} | {usd(c.cost_per_case)} | "
                     f"{usd(c.baseline_cost_per_case)} | {seconds(c.latency_p95)} | {seconds(c.baseline_latency_p95)} | "
                     f"{_md(_keys(c.regressions))} | {_md(_keys(c.fixes))} |")
    if not result.comparisons:
        lines.append("| (no variant of the same name in the baseline) |  |  |  |  |  |  |  |  |")
    return lines


def _diff_markdown(result: EvalResult) -> list[str]:
    rows, total = diff_rows(result)
    lines = [f"## Cases that failed or differ ({len(rows)} of {total})", ""]
    if not rows:
        return [*lines, "Every variant passed every case."]
    lines += ["| case | " + " | ".join(_md(v.name) for v in result.variants) + " |", "|---|" + "---|" * len(result.variants)]
    for row in rows[:MAX_DIFF_ROWS]:
        mark = " (regressed)" if row.regressed else ""
        lines.append(f"| {_md(row.key)}{mark} | " + " | ".join(_md(_mark(p) + " " + text) for p, text in row.cells) + " |")
    if len(rows) > MAX_DIFF_ROWS:
        lines += ["", f"… {len(rows) - MAX_DIFF_ROWS} more in eval_report.json."]
    return lines


def render_html(result: EvalResult) -> str:
    rows, total = diff_rows(result)
    return _environment().get_template("eval.html.j2").render(
        r=result, variants=[(v, verdict(v), changes_text(v), v.check_rates()) for v in result.variants],
        labels=list(dict.fromkeys(label for v in result.variants for label in v.check_rates())),
        rows=rows[:MAX_DIFF_ROWS], more=max(len(rows) - MAX_DIFF_ROWS, 0), total=total,
    )


def _cell(case: CaseResult | None) -> tuple[bool | None, str]:
    if case is None:
        return None, "not in this variant"
    if case.passed:
        return True, ""
    return False, "; ".join(f"{c.label}: {c.detail}" for c in case.failed)[:300]


@cache
def _environment() -> Environment:
    return html_environment("runner.evals", pct=rate, usd=usd, secs=seconds, ratio=_ratio, keys=_keys)


def _md(text: Any) -> str:
    """Text safe in a Markdown table cell: no pipes or line breaks, no HTML."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def _mark(passed: bool | None) -> str:
    return "✓" if passed else "–" if passed is None else "✗"


def _ratio(value: tuple[int, int] | None) -> str:
    return "–" if not value else f"{value[0]}/{value[1]}"


def _keys(keys: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(keys[:10])
    return (shown + f" (+{len(keys) - 10})" if len(keys) > 10 else shown) or "none"
