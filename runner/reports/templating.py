"""The Jinja environment of runner's HTML pages (the run report, ``runner stats --html``, the
eval report): one way to build it, so every page escapes alike.

Autoescape is on for every template loaded (they are all HTML, or CSS included into HTML);
``StrictUndefined`` makes a misspelt name an error instead of an empty string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined


def html_environment(package: str, **filters: Callable[..., Any]) -> Environment:
    """An environment loading ``package``'s ``templates`` folder, with ``filters`` added."""
    env = Environment(
        loader=PackageLoader(package, "templates"), autoescape=True, undefined=StrictUndefined, keep_trailing_newline=True
    )
    env.filters.update(filters)
    return env
