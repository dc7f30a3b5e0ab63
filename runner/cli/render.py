"""Rendering run events for a person (one line each, with cost so far) or as JSON Lines.

Event text comes from models and tools: the readable log shows control characters as escapes
(:mod:`runner.cli.terminal`); JSON Lines keep every value exact.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from runner.cli.terminal import json_for_terminal, safe_line
from runner.core.usage import cache_hit_rate


class JsonLines:
    """Each event as one JSON object per line on stdout (machine-readable)."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stdout

    def __call__(self, event: dict[str, Any]) -> None:
        self.stream.write(json_for_terminal(json.dumps(event, default=str, ensure_ascii=False)) + "\n")
        self.stream.flush()


class HumanLog:
    """A readable account of what the agent does and what it has cost so far (stderr)."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.cost = 0.0
        self.tokens = 0

    def __call__(self, event: dict[str, Any]) -> None:
        line = self._line(_one_line_values(event))
        if line:
            self.stream.write(line + "\n")
            self.stream.flush()

    def _line(self, e: dict[str, Any]) -> str | None:
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


def _one_line_values(value: Any) -> Any:
    """The event with every text made safe for one terminal line (numbers and structure kept)."""
    if isinstance(value, str):
        return safe_line(value)
    if isinstance(value, dict):
        return {key: _one_line_values(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_one_line_values(item) for item in value]
    return value
