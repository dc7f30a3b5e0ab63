"""Scripts for the test models: ordered rules that choose a reply for each request.

Shared by :class:`runner.model.server.ScriptedServer` (over HTTP) and
:class:`runner.model.scripted.ScriptedModel` (in process). For each request the first
rule whose matchers all match and that still has uses left wins; its use is consumed
(under a lock, so concurrent requests are safe). When no rule matches, the fallback
answers (by default a plain ``"OK"``); with ``fallback: null`` the request fails with
HTTP 400 / ``ModelError('bad_request')`` instead.

Rule format (YAML or JSON; a bare list is taken as ``rules``)::

    fallback: "Done."                 # a reply; a string is shorthand for {content: ...}
    tokenizer: estimate               # how usage is counted: estimate | o200k_base | cl100k_base | utf8_bytes
    models: [scripted]                # ids listed by GET /v1/models (server only)
    rules:
      - name: search-first            # optional; recorded with each request it answered
        when:                         # all given matchers must match (Python re.search)
          last_message: "capital of"  # content of the last user or tool message
          last_role: user             # role of the last message (exact)
          system: "geography"         # the system prompt
          any_message: "France"       # any message's content
          tools: "^web_search$"       # any offered tool's name
          model: "^gpt-"              # the request's model id
        times: 1                      # optional: at most this many uses
        reply:
          tool_calls:
            - {name: web_search, arguments: {query: "capital of France"}}
            - {name: broken, arguments: '{"query": '}   # raw string: malformed JSON on purpose
      - when: {last_role: tool}
        reply: {content: "Paris.", usage: {prompt_tokens: 120, completion_tokens: 3}}
      - times: 2
        reply: {fault: {status: 429, retry_after: 1}}  # also: body (str|dict), headers
      - reply: {fault: {status: 503}}
      - reply: {fault: {status: 500, billed: true}, usage: {completion_tokens: 100}}  # billed, then failed
      - reply: {invalid_json: true}                    # a 200 whose body is not JSON
      - reply: {hang_seconds: 30}                      # send nothing, then drop the connection
      - reply: {content: "slow", latency_seconds: 0.2, finish_reason: length}

Usage is counted from the request and reply text unless given: by default as the runner
estimates it (:mod:`runner.model.tokens`), so what is billed equals what was reserved;
with ``tokenizer`` set, as an honest endpoint with that tokenizer would count it
(:func:`runner.model.replies.usage_counter`). ``usage`` may override any of
``prompt_tokens``, ``completion_tokens``, ``cached_tokens``, ``cache_write_tokens``
(``prompt_tokens_details``), ``reasoning_tokens`` (``completion_tokens_details``).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runner.errors import ConfigError
from runner.model.replies import USAGE_TOKENIZERS, Reply, check_keys

_MATCHERS = ("last_message", "last_role", "system", "any_message", "tools", "model")
DEFAULT_FALLBACK = Reply(content="OK")


@dataclass(frozen=True)
class When:
    """Matchers over an OpenAI request body; ``None`` matches anything."""

    last_message: re.Pattern[str] | None = None
    last_role: str | None = None
    system: re.Pattern[str] | None = None
    any_message: re.Pattern[str] | None = None
    tools: re.Pattern[str] | None = None
    model: re.Pattern[str] | None = None

    @classmethod
    def from_obj(cls, obj: object, where: str) -> When:
        """Build from a mapping of matcher name to regex (``last_role``: a plain role)."""
        data = check_keys(obj or {}, _MATCHERS, where)
        for key, value in data.items():
            if not isinstance(value, str):
                raise ConfigError(f"{where}.{key}: expected a string, got {value!r}")
            if key != "last_role":
                try:
                    data[key] = re.compile(value)
                except re.error as exc:
                    raise ConfigError(f"{where}.{key}: invalid regex {value!r}: {exc}") from None
        return cls(**data)

    def matches(self, body: Mapping[str, Any]) -> bool:
        """Whether every given matcher matches ``body``."""
        messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
        last = next((m for m in reversed(messages) if m.get("role") in ("user", "tool")), {})
        system = "\n".join(_text(m) for m in messages if m.get("role") in ("system", "developer"))
        tool_names = [str((t.get("function") or {}).get("name", "")) for t in body.get("tools") or ()]
        checks = (
            (self.last_message, [_text(last)]),
            (self.system, [system]),
            (self.any_message, [_text(m) for m in messages]),
            (self.tools, tool_names),
            (self.model, [str(body.get("model") or "")]),
        )
        if self.last_role is not None and (not messages or messages[-1].get("role") != self.last_role):
            return False
        return all(pattern is None or any(pattern.search(t) for t in texts) for pattern, texts in checks)


@dataclass
class Rule:
    """``reply`` for requests matching ``when``, at most ``times`` times (``None``: no limit)."""

    reply: Reply
    when: When = field(default_factory=When)
    times: int | None = None
    name: str = ""

    @classmethod
    def from_obj(cls, obj: object, where: str) -> Rule:
        """Build from ``{name, when, times, reply}``."""
        data = check_keys(obj, ("name", "when", "times", "reply"), where)
        times = data.get("times")
        if times is not None and (not isinstance(times, int) or isinstance(times, bool) or times < 1):
            raise ConfigError(f"{where}.times: expected a positive integer, got {times!r}")
        if "reply" not in data:
            raise ConfigError(f"{where}: a rule needs a reply")
        return cls(
            reply=Reply.from_obj(data["reply"], f"{where}.reply"),
            when=When.from_obj(data.get("when"), f"{where}.when"),
            times=times,
            name=str(data.get("name") or ""),
        )


@dataclass(frozen=True)
class Match:
    """The outcome of :meth:`Script.next`: the rule's label, its reply, a call serial, and
    how the reply's usage is counted."""

    rule: str
    reply: Reply
    serial: int
    tokenizer: str = "estimate"


class NoRuleMatched(LookupError):
    """No rule matched and the script has no fallback."""


class Script:
    """Ordered rules plus a fallback; thread-safe, stateful (``times`` counters)."""

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        fallback: Reply | None = DEFAULT_FALLBACK,
        models: Iterable[str] = (),
        tokenizer: str = "estimate",
    ) -> None:
        _check_tokenizer(tokenizer, "script")
        self.rules = list(rules)
        self.fallback = fallback
        self.models = list(models) or ["scripted"]
        self.tokenizer = tokenizer
        self._used = [0] * len(self.rules)
        self._serial = 0
        self._lock = threading.Lock()

    @classmethod
    def from_obj(cls, obj: object, source: str = "script") -> Script:
        """Build from parsed YAML/JSON: ``{rules, fallback, models, tokenizer}`` or a list of rules."""
        allowed = ("rules", "fallback", "models", "tokenizer")
        data = check_keys({"rules": obj} if isinstance(obj, list) else obj, allowed, source)
        tokenizer = _check_tokenizer(data.get("tokenizer", "estimate"), source)
        rules = data.get("rules") or []
        if not isinstance(rules, list):
            raise ConfigError(f"{source}: rules: expected a list")
        has_fallback = "fallback" in data
        fallback = data.get("fallback")
        return cls(
            rules=[Rule.from_obj(rule, f"{source}: rules[{i}]") for i, rule in enumerate(rules)],
            fallback=(Reply.from_obj(fallback, f"{source}: fallback") if fallback is not None else None)
            if has_fallback
            else DEFAULT_FALLBACK,
            models=[str(m) for m in data.get("models") or ()],
            tokenizer=tokenizer,
        )

    @classmethod
    def load(cls, path: str | Path) -> Script:
        """Read a ``.yaml``/``.yml``/``.json`` script file."""
        try:
            text = Path(path).read_text(encoding="utf-8")
            data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read script: {exc}") from None
        return cls.from_obj(data, str(path))

    @classmethod
    def sequence(cls, *replies: object, fallback: Reply | None = DEFAULT_FALLBACK) -> Script:
        """Replies used once each, in order (a string is a content reply)."""
        return cls([Rule(Reply.from_obj(r, f"reply[{i}]"), times=1) for i, r in enumerate(replies)], fallback=fallback)

    def next(self, body: Mapping[str, Any]) -> Match:
        """Choose (and consume) the reply for ``body``; raises :class:`NoRuleMatched`."""
        with self._lock:
            self._serial += 1
            for index, rule in enumerate(self.rules):
                if (rule.times is None or self._used[index] < rule.times) and rule.when.matches(body):
                    self._used[index] += 1
                    return Match(rule.name or f"rules[{index}]", rule.reply, self._serial, self.tokenizer)
            if self.fallback is None:
                raise NoRuleMatched("no script rule matched the request and the script has no fallback")
            return Match("fallback", self.fallback, self._serial, self.tokenizer)

    def unused_rules(self) -> list[str]:
        """Labels of rules with a ``times`` limit not yet used up (handy at the end of a test)."""
        with self._lock:
            return [
                rule.name or f"rules[{i}]"
                for i, rule in enumerate(self.rules)
                if rule.times is not None and self._used[i] < rule.times
            ]


def _check_tokenizer(value: object, where: str) -> str:
    if value not in USAGE_TOKENIZERS:
        raise ConfigError(f"{where}: tokenizer: expected one of {', '.join(USAGE_TOKENIZERS)}, got {value!r}")
    return str(value)


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return content if isinstance(content, str) else ""
