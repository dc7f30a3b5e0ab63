"""Context policy: keep tool outputs and history within the agent's budget.

Long tool outputs are truncated with a note that says how much was cut. Before the
history would exceed ``max_history_tokens`` (default: most of the model's context window),
the oldest tool results in the middle of the conversation are compacted to one-line
notes; the system prompt, the goal and the latest messages are always kept whole.
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
