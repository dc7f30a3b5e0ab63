"""A provider's stored answer, whatever its protocol: a Chat Completions ``chat.completion``
(OpenAI, Azure, compatible servers) or an Anthropic Messages ``message``.

A provider batch's answers are kept as the provider sent them (redacted,
:mod:`runner.store.provider_answers`); each names its own kind in its body (``"type":
"message"`` for Anthropic's), so a resumed run parses what it stored without knowing which
endpoint answered.
"""

from __future__ import annotations

from collections.abc import Mapping

from runner.model.base import ModelResponse
from runner.model.wire import parse_completion


def parse_answer(body: object) -> ModelResponse:
    """The response a stored answer holds; :class:`~runner.model.wire.InvalidResponse` when none."""
    if isinstance(body, Mapping) and body.get("type") == "message":
        from runner.model.anthropic_wire import parse_message

        return parse_message(body)
    return parse_completion(body)
