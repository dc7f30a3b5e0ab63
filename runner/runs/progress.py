"""A run's events as a readable account, one line per event, with the cost so far: what
``runner run`` prints (:class:`runner.cli.render.HumanLog`) and what an Airflow task logs
(:mod:`runner.airflow.progress`). The caller makes the event's text safe for its medium first.
"""

from __future__ import annotations

from typing import Any

from runner.core.usage import cache_hit_rate


class ProgressLines:
    """Turns run events into lines (``None``: an event not shown), summing cost and tokens."""

    def __init__(self) -> None:
        self.cost = 0.0
        self.tokens = 0

    def line(self, e: dict[str, Any]) -> str | None:
        """The line for event ``e``, or ``None``."""
        kind = e["event"]
        if kind == "notice":
            return f"note: {e['message']}"
        if kind == "run_started":
            resumed = f", resuming (attempt {e['attempt']}; reusing {', '.join(e['resumed_steps'])})" if e.get("resumed_steps") else ""
            return f"run {e['run_id']} started: task {e['task']}{resumed}"
        if kind == "step_started":
            who = e.get("agent") or e.get("tool")
            return f"[{e['step']}] {e['kind']} step started ({who})"
        if kind == "model_call":
            self.cost += e["cost_usd"]
            self.tokens += e["input_tokens"] + e["output_tokens"]
            what = f"{e['tool_calls']} tool call(s)" if e["tool_calls"] else "answer"
            if e["status"] != "ok":
                what = f"error: {e['error']}"
            return (
                f"[{e['step_id']}] think #{e['seq']} {e['model']}: {what} "
                f"({e['input_tokens']}+{e['output_tokens']} tok, {e['latency_seconds']:.2f}s) "
                f"| spent ${self.cost:.4f}, {self.tokens} tok"
            )
        if kind == "tool_call":
            args = e["arguments"] if len(e["arguments"]) <= 80 else e["arguments"][:77] + "..."
            excerpt = e["output_excerpt"].replace("\n", " ")[:100]
            return f"[{e['step_id']}]   act {e['name']}({args}) -> {e['status']}: {excerpt}"
        if kind == "plan":
            state = "valid" if e["valid"] else f"invalid: {'; '.join(e['problems'][:2])}"
            steps = e["plan"].get("steps", []) if isinstance(e["plan"], dict) else []
            return f"plan (attempt {e['attempt']}, {len(steps)} steps): {state}"
        if kind == "step_finished":
            error = f": {e['error']}" if e.get("error") else ""
            cost = f", ${e['cost_usd']:.4f}" if e["cost_usd"] else ""
            return f"[{e['step']}] {e['status']} in {e['duration_seconds']}s{cost}{error}"
        if kind == "step_reused":
            return f"[{e['step']}] reused from an earlier attempt ({e['status']})"
        if kind == "delivery":
            return _delivery_line(e)
        if kind == "run_finished":
            hit = cache_hit_rate(e["input_tokens"], e.get("cached_input_tokens") or 0)
            cached = f" ({100 * hit:.1f}% of input from the prompt cache)" if hit else ""
            return (
                f"run {e['run_id']} {e['status']} (exit {e['exit_code']}): {e['model_calls']} model call(s), "
                f"{e['tool_calls']} tool call(s), {e['input_tokens'] + e['output_tokens']} tokens{cached}, ${e['cost_usd']:.6f}, "
                f"{e['duration_seconds']}s" + (f"\n  reason: {e['error']}" if e.get("error") else "")
            )
        return None


def _delivery_line(e: dict[str, Any]) -> str:
    """``delivery email (ops@x via smtp.x:587): delivered`` or ``...: FAILED (auth): ...``."""
    where = f" ({e['target']})" if e.get("target") else ""
    if e["status"] == "delivered":
        note = " in an earlier attempt, not sent again" if e.get("earlier_attempt") else ""
        return f"delivery {e['name']}{where}: delivered{note}"
    return (
        f"delivery {e['name']}{where}: FAILED ({e.get('error_kind')}): {e.get('error')}"
        f"\n  the report is written; re-run with --run-id {e['run_id']} to re-deliver what failed (exit code 5)"
    )
