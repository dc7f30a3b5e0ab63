"""Every prompt the framework sends, as package data (``agent.yaml``, ``planning.yaml``).

Prompts are Jinja2 templates addressed by name. An agent's YAML overrides any of them under
``prompts:``; :class:`Prompts` resolves a name against those overrides, then the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

FILES = ("agent.yaml", "planning.yaml")


@cache
def defaults() -> dict[str, str]:
    """Every default prompt by name (names are unique across the files)."""
    import yaml  # only when a default prompt is first needed

    merged: dict[str, str] = {}
    for name in FILES:
        text = resources.files("runner.prompts").joinpath(name).read_text("utf-8")
        merged.update(yaml.safe_load(text))
    return merged


class Prompts:
    """The prompts one agent uses: its overrides first, then the defaults."""

    def __init__(self, overrides: Mapping[str, str] | None = None):
        self.overrides = dict(overrides or {})

    def text(self, name: str) -> str:
        return self.overrides.get(name, defaults()[name])

    def render(self, name: str, **values: Any) -> str:
        from runner.config.templates import render

        return render(self.text(name), values)
