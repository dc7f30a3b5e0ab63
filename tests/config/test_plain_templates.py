"""Plain text renders to itself without Jinja, exactly as Jinja would have rendered it."""

from __future__ import annotations

import random

import pytest

from runner.config.template_engine import render_template
from runner.config.templates import MAX_RENDERED_CHARS, LocatedTemplate, Origin, TemplateError, is_plain, render

ALPHABET = ["{", "}", "%", "#", "-", "+", "\n", "\r", "\t", " ", "a", "é", "\u2028", "\x00", "$", "\\", "'", '"', "{{ x }}"]


def test_every_plain_text_renders_as_jinja_renders_it() -> None:
    chooser = random.Random(18)
    plain = 0
    for _ in range(4000):
        text = "".join(chooser.choice(ALPHABET) for _ in range(chooser.randrange(0, 14)))
        if is_plain(text):
            plain += 1
            assert render(text, {}) == render_template(text, {}) == text, repr(text)
        else:
            assert any(marker in text for marker in ("{{", "{%", "{#", "\r"))
    assert plain > 500


@pytest.mark.parametrize(
    "text",
    [
        "What is (3 + 4) * 6, and then that plus 8?",
        "",
        "ends with a newline\n",
        "\n\nleading newlines",
        "braces { } and } { alone, 100% sure, #1",
        "a } } b %} #}",
        "unicode: ünïcödé 🎉 and a line separator\u2028here",
        "{ {not a template} }",
    ],
)
def test_plain_text_is_returned_as_it_is(text: str) -> None:
    assert is_plain(text)
    assert render(text, {"inputs": {}}) == text == render_template(text, {"inputs": {}})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello {{ name }}", "Hello Ada"),
        ("{# a comment #}kept", "kept"),
        ("{% if true %}yes{% endif %}", "yes"),
        ("line one\r\nline two", "line one\nline two"),  # Jinja normalises newlines
        ("{{- ' trimmed' }}", " trimmed"),
    ],
)
def test_text_with_template_syntax_or_carriage_returns_goes_through_jinja(text: str, expected: str) -> None:
    assert not is_plain(text)
    assert render(text, {"name": "Ada"}) == expected


def test_a_located_plain_template_renders_to_a_plain_string() -> None:
    located = LocatedTemplate("no syntax here", Origin("tasks.d/t.yaml", 3, 7, "/goal"))
    rendered = render(located, {})
    assert rendered == "no syntax here" and type(rendered) is str


def test_plain_text_over_the_size_cap_is_still_refused_with_its_place() -> None:
    located = LocatedTemplate("x" * (MAX_RENDERED_CHARS + 1), Origin("tasks.d/t.yaml", 3, 7, "/goal"))
    assert not is_plain(located)
    with pytest.raises(TemplateError, match=r"tasks.d/t.yaml:3:7: .*more than 1000000 characters"):
        render(located, {})


def test_an_undefined_variable_is_still_an_error() -> None:
    with pytest.raises(TemplateError, match="undefined variable"):
        render("{{ missing }}", {})
