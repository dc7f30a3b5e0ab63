"""``runner stats`` as text for a terminal (one table per dimension, then each task's trend)."""

from __future__ import annotations

from collections.abc import Iterator

from runner.stats.compute import Stats, Summary

COLUMNS = ("RUNS", "OK%", "MEDIAN", "P95", "$/ITEM", "TOK/ITEM", "TOOL FAIL%", "STATUS MIX / CAPS")


def render_text(stats: Stats) -> str:
    since, until = (t.replace("+00:00", "Z") for t in stats.window.iso())
    lines = [f"runs started {since} .. {until}" + (f", task {stats.task}" if stats.task else "")]
    if not stats.tasks:
        return lines[0] + "\nno runs in this window (`runner runs` lists what the store holds; try a longer --since)"
    for title, rows, unit in (("TASK", stats.tasks, "run"), ("AGENT", stats.agents, "step"),
                              ("MODEL", stats.models, "call"), ("TOOL", stats.tools, "call")):
        if rows:
            lines += ["", *_table(title, unit, rows)]
            if title == "TASK":
                lines += list(_changes(stats))
    for task, points in stats.trends.items():
        lines += ["", f"trend of {task} (by {stats.bucket}): runs, ok%, $/run, tokens/run, p95"]
        for p in points:
            lines.append(f"  {p.start.replace('+00:00', 'Z'):<22} {p.runs:>5} {_pct(p.success_rate):>7} "
                         f"{_usd(p.cost_per_run):>11} {_num(p.tokens_per_run):>9} {_secs(p.duration_p95):>8}")
    if stats.budget_warnings:
        lines += ["", f"BUDGET WARNINGS ({len(stats.budget_warnings)})"]
        lines += [f"  {w['at'][:19]}Z {w['message']}: run {w['run_id']} ({w['task']}){_delivered(w)}" for w in stats.budget_warnings]
    return "\n".join(lines)


def _delivered(warning: dict[str, object]) -> str:
    """``; delivered: email, webhook; failed: copy`` from a warning's delivery outcomes."""
    outcomes = warning.get("deliveries") or []
    assert isinstance(outcomes, list)
    parts = [f"{status}: {', '.join(o['name'] for o in outcomes if o.get('status') == status)}"
             for status in ("delivered", "failed") if any(o.get("status") == status for o in outcomes)]  # fmt: skip
    return "; " + "; ".join(parts) if parts else ""


def _table(title: str, unit: str, rows: list[Summary]) -> list[str]:
    header = f"{title:<24} " + " ".join(f"{c.replace('ITEM', unit.upper()):>11}" for c in COLUMNS[:-1]) + f"  {COLUMNS[-1]}"
    lines = [header]
    for s in rows:
        mix = ", ".join(f"{k} {v}" for k, v in s.statuses.items())
        caps = ("; caps: " + ", ".join(f"{k} {v}" for k, v in s.cap_hits.items())) if s.cap_hits else ""
        lines.append(
            f"{s.name[:24]:<24} {s.count:>11} {_pct(s.success_rate):>11} {_secs(s.duration_median):>11} "
            f"{_secs(s.duration_p95):>11} {_usd(s.cost_per):>11} {_num(s.tokens_per):>11} "
            f"{_pct(s.tool_failure_rate):>11}  {mix}{caps}{_token_parts(s)}"
        )
    return lines


def _token_parts(summary: Summary) -> str:
    """``; reasoning 1,234 tokens; cache writes 800 tokens`` when the group's models reasoned
    (part of its output tokens) or wrote to the prompt cache (part of its input tokens)."""
    parts = [(label, count) for label, count in (("reasoning", summary.reasoning_tokens), ("cache writes", summary.cache_write_tokens)) if count]
    return "".join(f"; {label} {count:,} tokens" for label, count in parts)


def _changes(stats: Stats) -> Iterator[str]:
    length = _length(stats)
    for task in stats.tasks:
        parts = []
        for metric, label, show in (("runs", "runs", str), ("cost_per", "$/run", _usd), ("tokens_per", "tokens/run", _num),
                                    ("success_rate", "ok%", _pct), ("duration_p95", "p95", _secs)):
            now, before, ratio = stats.change(task, metric)
            if before is not None:
                parts.append(f"{label} {show(before)} -> {show(now)}" + (f" (x{ratio:.2f})" if ratio is not None else ""))
        yield f"  {task.name} vs the {length} before: " + (" · ".join(parts) if parts else "no runs then")


def _length(stats: Stats) -> str:
    seconds = int(stats.window.length.total_seconds())
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"
