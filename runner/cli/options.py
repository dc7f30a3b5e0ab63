"""Flags shared by ``run`` and ``batch``: caps and inputs; ``batch``'s options as flags."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from runner.config.specs import CAP_NAMES, Caps
from runner.endpoints import shown_url
from runner.errors import UsageError

if TYPE_CHECKING:
    from runner.batch.options import BatchOption

CAP_FLAGS = (
    ("max_steps", "Model calls at most (1 or more)."),
    ("max_tool_calls", "Tool calls at most (0: none)."),
    ("max_input_tokens", "Prompt tokens at most (1 or more)."),
    ("max_output_tokens", "Completion tokens at most (1 or more)."),
    ("max_tokens", "Prompt + completion tokens at most (1 or more)."),
    ("max_cost_usd", "US dollars at most (0: free models only)."),
    ("max_wall_seconds", "Wall-clock seconds at most (more than 0)."),
)


class CapValue(click.ParamType):
    """A cap flag's value, parsed by :func:`runner.config.capvalues.coerce_cap` (the same
    rules as the API and Airflow): NaN, infinities, negative and non-numbers are refused,
    with exit 2 and a message naming the flag."""

    def __init__(self, cap: str) -> None:
        self.cap = cap
        self.name = "integer" if cap in ("max_steps", "max_tool_calls") or cap.endswith("tokens") else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from runner.config.capvalues import CapValueError, coerce_cap

        try:
            return coerce_cap(self.cap, value)
        except CapValueError as exc:
            self.fail(str(exc), param, ctx)


class LocationType(click.ParamType):
    """A local path, or a URL of a filesystem fsspec knows (``s3://bucket/out.jsonl``): see :mod:`runner.locations`."""

    name = "path|url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from runner.locations import location

        try:
            return location(value)
        except UsageError as exc:
            self.fail(str(exc), param, ctx)


class FiniteFloatRange(click.FloatRange):
    """A float range that also refuses NaN and infinities (``FloatRange`` lets them through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class EndpointURL(click.ParamType):
    """An ``http(s)://host[:port]/path`` endpoint (``--base-url``); anything else is refused
    before a call is made, not discovered as a connection error after paying for retries."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from urllib.parse import urlsplit

        text = str(value).strip()
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018  (raises ValueError for a bad port)
        except ValueError as exc:
            self.fail(f"{shown_url(text)!r} is not a URL ({exc}); give e.g. http://localhost:11434/v1", param, ctx)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self.fail(f"{shown_url(text)!r}: give an http:// or https:// URL with a host, e.g. http://localhost:11434/v1", param, ctx)
        return text


class ModelId(click.ParamType):
    """A model id (``--model``): not empty, no whitespace or control characters."""

    name = "model"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if not text or any(ch.isspace() or not ch.isprintable() for ch in text) or len(text) > 200:
            self.fail(f"{value!r} is not a model id; give one such as gpt-4o-mini (no spaces)", param, ctx)
        return text


def caps_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--max-steps`` ... ``--max-wall-seconds``; they only tighten the YAML's caps."""
    for name, help_ in reversed(CAP_FLAGS):
        flag = "--" + name.replace("_", "-")
        command = click.option(flag, name, type=CapValue(name), help=help_ + " Tightens the YAML caps for this run.")(command)
    return command


def batch_flags(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add a flag for every batch option of :data:`runner.batch.options.BATCH_OPTIONS` that has one
    (its name with dashes; the command gets it under the option's name)."""
    from runner.batch.options import BATCH_OPTIONS

    for option in reversed([o for o in BATCH_OPTIONS if o.cli]):
        shown = option.default not in (None, ()) and option.kind != "flag"
        kwargs: dict[str, Any] = {"help": option.help, "metavar": option.metavar, "show_default": shown}
        if option.kind == "flag":
            kwargs["is_flag"] = True
        elif option.kind == "list":
            kwargs["multiple"] = True
        else:
            kwargs.update(type=_flag_type(option), default=option.default)
        command = click.option(option.flag, option.name, **kwargs)(command)
    return command


def _flag_type(option: BatchOption) -> click.ParamType:
    """The Click type that checks a batch option's value (the same bounds :meth:`BatchOption.typed` holds)."""
    if option.kind == "choice":
        return click.Choice(option.choices)
    if option.kind == "model":
        return ModelId()
    if option.kind == "cap":
        assert option.cap is not None
        return CapValue(option.cap)
    if option.kind == "integer":
        return click.IntRange(*option.integer_bounds) if option.integer_bounds != (None, None) else click.INT
    if option.kind == "number":
        return FiniteFloatRange(min=0 if option.positive else option.minimum, min_open=option.positive)
    return click.STRING


def caps_from_flags(values: dict[str, Any]) -> Caps:
    """The caps given on the command line (others in ``values`` are ignored), already
    parsed by :class:`CapValue`."""
    return Caps(**{k: v for k, v in values.items() if v is not None and k in CAP_NAMES})


def parse_inputs(pairs: tuple[str, ...]) -> dict[str, str]:
    """``NAME=VALUE`` pairs; values stay strings until coerced to the declared types."""
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--input {pair!r}: write NAME=VALUE")
        if name in values:
            raise UsageError(f"--input {name} given twice")
        values[name.strip()] = value
    return values
