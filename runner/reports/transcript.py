"""A run's transcript made readable: for ``runner runs show ID --transcript`` and report.html.

Each model call resends the conversation so far; a turn shows only the messages its
conversation (one agent in one step and attempt) had not sent before, and says how many it
left out. The entries come from :meth:`runner.store.transcripts.TranscriptStore.read`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CUT_SHORT = "(no response recorded: the process ended while this call was in flight)"


@dataclass(frozen=True)
class Turn:
    """One model call or tool call as shown."""

    kind: str  # model | tool
    title: str
    messages: tuple[Mapping[str, Any], ...] = ()  # the messages this call sent first
    repeated: int = 0  # messages already shown with an earlier call
    tools: tuple[str, ...] = ()  # names of the tools offered
    response: str = ""  # the reply (model) or the output (tool), as text
    arguments: str = ""
    error: str | None = None


def turns(entries: Iterable[Mapping[str, Any]]) -> list[Turn]:
    """The entries as turns, earlier messages of each conversation left out."""
    sent: dict[tuple[Any, ...], list[str]] = {}
    shown: list[Turn] = []
    for entry in entries:
        if entry["kind"] == "tool":
            shown.append(_tool_turn(entry))
            continue
        key = (entry["attempt"], entry["step_id"], entry["agent"])
        digests = list(entry.get("message_digests") or [])
        before = sent.get(key, [])
        repeated = len(before) if digests[: len(before)] == before else 0
        sent[key] = digests
        shown.append(_model_turn(entry, repeated))
    return shown


def message_text(message: Mapping[str, Any] | None) -> str:
    """One message as ``[role] content`` with its tool calls (``None``: a pruned blob)."""
    if message is None:
        return "[missing] (this part of the transcript is no longer stored)"
    head = f"[{message.get('role', '?')}]"
    if message.get("tool_call_id"):
        head += f" (result of {message['tool_call_id']})"
    lines = [f"{head} {message.get('content') or ''}".rstrip()]
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        lines.append(f"  -> {function.get('name')}({function.get('arguments')}) id={call.get('id')}")
    return "\n".join(lines)


def as_text(entries: Iterable[Mapping[str, Any]]) -> str:
    """The whole transcript as plain text (not yet made safe for a terminal)."""
    parts: list[str] = []
    for turn in turns(entries):
        parts.append(f"=== {turn.title}")
        if turn.kind == "tool":
            parts += [f"arguments: {turn.arguments}", turn.response]
            continue
        if turn.repeated:
            parts.append(f"({turn.repeated} earlier messages, as sent before)")
        parts += [message_text(m) for m in turn.messages]
        if turn.tools:
            parts.append(f"tools offered: {', '.join(turn.tools)}")
        parts.append(f"--> {turn.response}" if turn.error is None else f"--> error: {turn.error}")
    return "\n".join(parts) + ("\n" if parts else "")


def _model_turn(entry: Mapping[str, Any], repeated: int) -> Turn:
    usage = entry.get("usage") or {}
    cached = f", {usage.get('cached_input_tokens')} cached" if usage.get("cached_input_tokens") else ""
    title = (
        f"model call {entry['seq']} · step {entry['step_id']} · agent {entry['agent']} · {entry.get('model')} · "
        f"{entry.get('status')} · {usage.get('input_tokens', 0)}+{usage.get('output_tokens', 0)} tokens{cached}"
    )
    names = tuple(str((t.get("function") or {}).get("name", "?")) for t in entry.get("tools") or [] if isinstance(t, Mapping))
    response = entry.get("response")
    if response is None and entry.get("status") == "reserved":  # written before the call was sent; never settled
        return Turn("model", title, tuple(entry["messages"][repeated:]), repeated, names, CUT_SHORT)
    return Turn(
        "model", title, tuple(entry["messages"][repeated:]), repeated, names,
        message_text(response) if response else "", error=entry.get("error") if response is None else None,
    )  # fmt: skip


def _tool_turn(entry: Mapping[str, Any]) -> Turn:
    title = (
        f"tool call {entry['seq']} · step {entry['step_id']} · agent {entry['agent']} · {entry.get('name')} · "
        f"{entry.get('status')} · {entry.get('output_chars', 0)} characters"
    )
    output = entry.get("output")
    text = output if isinstance(output, str) else ("[missing] (no longer stored)" if output is None else json.dumps(output))
    return Turn("tool", title, response=text, arguments=str(entry.get("arguments", "")))
