"""report.md: the report as GitHub-flavoured Markdown, charts linked from ``artifacts/``."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

from runner.reports import narrative
from runner.reports.costs import COST_CHART_KEY
from runner.reports.tables import Table
from runner.reports.view import ReportView, StepDetail, build_view

STATUS_MARKS = {"completed": "✅", "failed": "❌", "capped": "⛔", "stuck": "🔁", "skipped": "⏭"}


def render_markdown(record: Mapping[str, Any], artifacts_rel: Mapping[str, str]) -> str:
    """The Markdown report of ``record``.

    ``artifacts_rel`` maps an artifact's record path (and ``COST_CHART_KEY``) to its path
    relative to the report directory; images without an entry are named but not linked.
    """
    view = build_view(record, with_cost_chart=COST_CHART_KEY in artifacts_rel)
    sections = [
        _header(view),
        _narrative(view),
        _section("Sources", [table(view.sources)] if view.sources else []),
        _key_tables(view),
        _charts(view, artifacts_rel),
        _changes(view),
        _plans(view),
        _steps(view),
        _costs(view, artifacts_rel),
        _caps(view),
        _section("Delivery", [table(view.deliveries)]) if view.deliveries else "",
        _section("Inputs", [table(view.inputs)] if view.inputs.rows else ["No inputs."]),
        _section(
            "Configuration",
            [f"Config hash: `{view.config_hash}`" if view.config_hash else "Config hash: not recorded."],
        ),
        _timings(view),
        _section("Step details", [_step_detail(step) for step in view.step_details]),
    ]
    return "\n\n".join(section for section in sections if section).rstrip() + "\n"


def table(data: Table) -> str:
    """A pipe table; numeric columns right-aligned, cells escaped for Markdown."""
    header = "| " + " | ".join(_cell(c) for c in data.columns) + " |"
    rule = "|" + "|".join("---:" if data.is_numeric(i) else "---" for i in range(len(data.columns))) + "|"
    rows = ["| " + " | ".join(_cell(c) for c in row) + " |" for row in data.rows]
    return "\n".join([header, rule, *rows])


def fenced(text: str, language: str = "") -> str:
    """``text`` in a code fence longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace("\r", "").replace("\n", " ")


def _inline(text: str) -> str:
    return " ".join(text.split()).replace("<", "&lt;")


def _literal(text: str) -> str:
    """A file name as Markdown shows it literally: characters with a meaning in Markdown escaped."""
    return re.sub(r"([\\`*_\[\]<>()#!|~&])", r"\\\1", " ".join(text.split()))


def _code(text: str) -> str:
    """``text`` as a code span, fenced with more backticks than it contains in a row."""
    text = " ".join(text.split())
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _target(report_path: str) -> str:
    """A link destination for a report-relative path (spaces, parentheses, ``#`` and ``?`` encoded)."""
    return quote(report_path, safe="/")


def _section(heading: str, parts: list[str]) -> str:
    body = "\n\n".join(part for part in parts if part)
    return f"## {heading}\n\n{body}" if body else ""


def _header(view: ReportView) -> str:
    mark = STATUS_MARKS.get(view.status, "")
    status = f"**Status: {mark} {view.status.upper()}** · exit code {view.exit_code}"
    if view.stop_reason:
        status += f" · stopped: {_inline(view.stop_reason)}"
    for warning in view.warnings:
        status += f"\n\n> **Warning:** {_inline(warning)}"
    for degraded in view.degraded:
        status += f"\n\n> **Degraded:** {_inline(degraded)}"
    facts = " · ".join(f"**{name}:** {value}" for name, value in view.facts)
    ids = f"Task `{view.task}` · run `{view.run_id}` · finished {view.finished}"
    return f"# {_inline(view.title)}\n\n{status}\n\n{ids}\n\n{facts}"


def _narrative(view: ReportView) -> str:
    story = view.narrative
    if story.text:
        body = narrative.to_markdown(story.text)
    elif story.fields:
        body = table(story.fields)
    elif story.json:
        body = fenced(story.json, "json")
    else:
        body = "_The run produced no final output._"
    return _section("Summary", [body])


def _key_tables(view: ReportView) -> str:
    parts = [
        "\n\n".join(
            p
            for p in (f"### {_inline(t.title)}", f"_{_inline(t.caption)}_" if t.caption else "", table(t), t.note)
            if p
        )
        for t in view.tables
    ]
    return _section("Key tables", parts)


def _image(key: str, caption: str, artifacts_rel: Mapping[str, str]) -> str:
    if key not in artifacts_rel:
        return f"_Chart {_code(key)} ({_inline(caption)}) was not copied into the report._"
    return f"![{_inline(caption)}]({_target(artifacts_rel[key])})\n\n_{_inline(caption)}_"


def _charts(view: ReportView, artifacts_rel: Mapping[str, str]) -> str:
    parts = [_image(chart.key, chart.caption, artifacts_rel) for chart in view.charts]
    files = [
        f"- [{_literal(path)}]({_target(artifacts_rel[path])})"
        if path in artifacts_rel
        else f"- {_code(path)} (not copied)"
        for path in view.files
    ]
    if files:
        parts.append("Other files:\n\n" + "\n".join(files))
    if view.artifact_problems:
        parts.append("Not copied into the report:\n\n" + "\n".join(f"- {_inline(p)}" for p in view.artifact_problems))
    return _section("Charts", parts)


def _changes(view: ReportView) -> str:
    changes = view.changes
    if changes is None:
        return ""
    parts = [f"Compared with run `{changes.previous_run_id}` (finished {changes.previous_finished_at})."]
    if changes.identical:
        parts.append("No changes.")
    if changes.fields:
        rows = [[c.name, c.before, c.after, c.delta] for c in changes.fields]
        parts.append(table(Table(["Field", "Previous", "This run", "Change"], rows, [False, True, True, True])))
    if changes.unchanged_fields:
        parts.append(f"{changes.unchanged_fields} other field(s) unchanged.")
    if changes.diff:
        parts.append(fenced("\n".join(changes.diff), "diff"))
    if changes.diff_truncated:
        parts.append(f"… {changes.diff_truncated} more diff line(s).")
    return _section("Changes since the previous run", parts)


def _plans(view: ReportView) -> str:
    parts = []
    for plan in view.plans:
        lines = [f"### {plan.heading}"]
        if plan.reason:
            lines.append(f"**Why:** {_inline(plan.reason)}")
        if plan.rationale:
            lines.append(f"**Rationale:** {_inline(plan.rationale)}")
        parts.append("\n\n".join([*lines, table(plan.steps)]))
    return _section("Plan", parts)


def _steps(view: ReportView) -> str:
    errors = [f"- `{step_id}`: {_inline(error)}" for step_id, error in view.step_errors]
    return _section("Steps", [table(view.steps), "**Errors:**\n\n" + "\n".join(errors) if errors else ""])


def _costs(view: ReportView, artifacts_rel: Mapping[str, str]) -> str:
    parts = [f"**Total: {view.total_cost}**"]
    if view.cost_by_agent.rows:
        parts += ["### By agent", table(view.cost_by_agent)]
    if view.cost_by_model.rows:
        parts += ["### By model", table(view.cost_by_model)]
    if view.cost_chart:
        parts.append(_image(view.cost_chart.key, view.cost_chart.caption, artifacts_rel))
    return _section("Cost", parts)


def _caps(view: ReportView) -> str:
    if not view.caps:
        return _section("Caps", ["No caps were set."])
    rows = [[u.label, u.limit, u.used, u.percent, u.state] for u in view.caps]
    return _section(
        "Caps", [table(Table(["Cap", "Limit", "Used", "Share", "State"], rows, [False, True, True, True, False]))]
    )


def _timings(view: ReportView) -> str:
    rows = [[bar.step, bar.status, bar.label] for bar in view.timeline]
    steps = table(Table(["Step", "Status", "Start · duration"], rows, [False, False, False])) if rows else ""
    return _section("Timings", [table(view.timings), steps])


def _step_detail(step: StepDetail) -> str:
    return "\n\n".join(_step_detail_parts(step))


def _step_detail_parts(step: StepDetail) -> Iterator[str]:
    yield f"### {_inline(step.heading)}"
    yield f"Status: {STATUS_MARKS.get(step.status, '')} {step.status}"
    if step.error:
        yield f"**Error:** {_inline(step.error)}"
    if step.output:
        yield fenced(step.output, "text")
    if step.data:
        yield "Data:\n\n" + fenced(step.data, "json")
    if step.tool_calls:
        yield table(step.tool_calls)
