"""Context policy: keep tool outputs and history within the agent's budget.

Long tool outputs are truncated with a note that says how much was cut. Before the
history would exceed ``max_history_tokens`` (default: most of the model's context window),
the older middle of the conversation is summarised by the model (``context.summarize``:
see :func:`summary_span`; the loop makes that call, reserved like any other) and/or the
oldest tool results in the middle are compacted to one-line notes; the system prompt, the
goal and the latest messages are always kept whole.
"""

from __future__ import annotations

import math
from dataclasses import replace

from runner.config.specs import AgentSpec
from runner.model.base import Message
from runner.prompts import Prompts


def truncate_output(text: str, max_chars: int, prompts: Prompts | None = None) -> str:
    """``text`` cut to ``max_chars`` with a note naming how much was dropped."""
    if len(text) <= max_chars:
        return text
    head = text[: max_chars * 3 // 4]
    tail = text[-(max_chars // 4) :]
    dropped = len(text) - len(head) - len(tail)
    note = (prompts or Prompts()).render("truncated_note", dropped=dropped)
    return f"{head}\n{note}\n{tail}"


def history_budget(agent: AgentSpec) -> int:
    """Tokens the history may take: the configured limit, else 75% of the context window
    minus the completion budget."""
    if agent.context.max_history_tokens is not None:
        return agent.context.max_history_tokens
    return max(int(agent.model.context_window * 0.75) - agent.model.max_tokens, 512)


def approx_text_tokens(text: str | None) -> int:
    """A typical token count for sizing the history: one per 3 ASCII characters, one per
    other character. Not a bound: caps reserve with :mod:`runner.model.tokens`, which never
    errs low; compacting by that bound would cut history 3-4x earlier than needed."""
    if not text:
        return 0
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 3) + (len(text) - ascii_chars)


def message_tokens(message: Message) -> int:
    tokens = 4 + approx_text_tokens(message.content)
    for call in message.tool_calls:
        tokens += approx_text_tokens(call.name) + approx_text_tokens(call.arguments) + 4
    return tokens


def compact(messages: list[Message], budget_tokens: int, keep_last: int, prompts: Prompts | None = None) -> list[Message]:
    """Replace the oldest middle tool results with short notes until the history fits.

    Messages are never removed (tool-call / tool-result pairing must stay intact for the
    API); only the content of old tool results shrinks.
    """
    total = sum(message_tokens(m) for m in messages)
    if total <= budget_tokens:
        return messages
    out = list(messages)
    protected_from = max(len(out) - keep_last, 2)
    # oldest first; the recent messages only if that was not enough; never the newest result
    for i in [*range(2, protected_from), *range(protected_from, len(out) - 1)]:
        message = out[i]
        if message.role != "tool" or message.content is None or message.compacted:
            continue
        note = (prompts or Prompts()).render("compacted_note", chars=len(message.content))
        total -= message_tokens(message)
        out[i] = replace(message, content=note, compacted=True)
        total += message_tokens(out[i])
        if total <= budget_tokens:
            break
    return out


def summary_span(messages: list[Message], budget_tokens: int, keep_last: int, head: int) -> tuple[int, int] | None:
    """The messages a summary should replace when the history is over budget: from ``head``
    (after the system prompt, examples and goal) to before the last ``keep_last``, never
    parting a tool result from the call that asked for it. ``None`` when the history fits
    or too little could be summarised."""
    if sum(message_tokens(m) for m in messages) <= budget_tokens:
        return None
    end = max(len(messages) - keep_last, head)
    while end > head and end < len(messages) and messages[end].role == "tool":
        end -= 1  # the cut may not fall between an assistant's tool calls and their results
    return (head, end) if end - head >= 2 else None


MAX_TRANSCRIPT_MESSAGE_CHARS = 4000


def transcript(messages: list[Message]) -> str:
    """Messages as plain text for a summary request (long ones cut)."""
    lines: list[str] = []
    for message in messages:
        text = (message.content or "")[:MAX_TRANSCRIPT_MESSAGE_CHARS]
        calls = "; ".join(f"called {c.name}({c.arguments[:500]})" for c in message.tool_calls)
        label = f"{message.role} ({message.name})" if message.name else message.role
        lines.append(f"[{label}] " + " ".join(part for part in (text, calls) if part))
    return "\n".join(lines)
