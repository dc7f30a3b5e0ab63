"""Plain text and plain substitutions render without Jinja, exactly as Jinja renders them."""

from __future__ import annotations

import random
from typing import Any

import pytest

from runner.config.template_engine import render_template
from runner.config.template_types import MAX_RENDERED_CHARS, LocatedTemplate, Origin, TemplateError
from runner.config.templates import is_plain, render, substitute

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


# --- {{ name.key }} substitution ---------------------------------------------------------------

CONTEXT: dict[str, Any] = {
    "inputs": {
        "subject": "printer 7 is jammed",
        "n": 3,
        "ratio": 0.1,
        "big": 1e16,
        "flag": True,
        "nothing": None,
        "items": "a key named like a dict method",
        "_private": "hidden",
        "tags": ["a", "b"],
        "nested": {"deep": {"value": "found"}},
        "located": LocatedTemplate("a str subclass", Origin("t.yaml", 1, 1, "/x")),
        "unicode": "ünïcödé 🎉",
        "none": "named none",
    },
    "today": "2026-12-01",
    "run_id": "r-1",
    "previous": None,
    "steps": {"fetch": {"output": "rows: 5", "data": {"count": 5}}},
    "range": "shadows a Jinja global",
}
PIECES = [
    "Triage: ", "plain text ", "\n", " ", "{", "}", "}}", "{ {", "%", "#", "-",
    "{{ inputs.subject }}", "{{inputs.n}}", "{{ inputs.ratio }}", "{{ inputs.big }}", "{{ inputs.flag }}",
    "{{ inputs.nothing }}", "{{ inputs.items }}", "{{ inputs._private }}", "{{ inputs.tags }}",
    "{{ inputs.nested.deep.value }}", "{{ inputs.nested.deep }}", "{{ inputs.located }}", "{{ inputs.unicode }}",
    "{{ inputs.none }}", "{{ today }}", "{{ run_id }}", "{{ previous }}", "{{ steps.fetch.output }}",
    "{{ steps.fetch.data.count }}", "{{ range }}", "{{ true }}", "{{ none }}", "{{ missing }}",
    "{{ inputs.missing }}", "{{ inputs.subject.upper }}", "{{ inputs.subject | upper }}", "{{- inputs.n }}",
    "{{ inputs.n -}}", "{{ inputs['n'] }}", "{{ inputs.n + 1 }}", "{{\n inputs.n\t}}", "{{ inputs.n ", "{{{ inputs.n }}",
    "{{ inputs.n }}}", "{# c #}", "{% if true %}x{% endif %}", "\r\n", "{{ steps.fetch.data }}",
]


def _jinja(text: str) -> str | type[TemplateError]:
    try:
        return render_template(text, CONTEXT)
    except TemplateError:
        return TemplateError


def _ours(text: str) -> str | type[TemplateError]:
    try:
        return render(text, CONTEXT)
    except TemplateError:
        return TemplateError


@pytest.mark.slow(reason="every template rendered twice")
def test_every_template_renders_as_jinja_renders_it() -> None:
    chooser = random.Random(1818)
    substituted = 0
    for _ in range(3000):
        text = "".join(chooser.choice(PIECES) for _ in range(chooser.randrange(1, 6)))
        assert _ours(text) == _jinja(text), repr(text)
        substituted += substitute(text, CONTEXT) is not None and not is_plain(text)
    assert substituted > 300  # the fast path was taken often, and agreed each time


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Triage this ticket: {{ inputs.subject }}", "Triage this ticket: printer 7 is jammed"),
        ("{{inputs.n}} and {{ inputs.ratio }} and {{ inputs.flag }}", "3 and 0.1 and True"),
        ("{{ inputs.nothing }}|{{ previous }}", "None|None"),
        ("{{ inputs.nested.deep.value }} on {{ today }}\n", "found on 2026-12-01\n"),
        ("{{ range }}", "shadows a Jinja global"),
    ],
)
def test_substitution_needs_no_jinja(text: str, expected: str) -> None:
    assert substitute(text, CONTEXT) == expected == render_template(text, CONTEXT)


@pytest.mark.parametrize(
    "text",
    [
        "{{ inputs.items }}",  # Jinja reads the dict's method first
        "{{ inputs._private }}",
        "{{ inputs.tags }}",  # a list: Jinja's rendering decides
        "{{ inputs.located }}",
        "{{ inputs.subject | upper }}",
        "{{- inputs.n }}",
        "{{ true }}",
        "{{ inputs.none }}",
        "{{ missing }}",
        "{{ inputs.missing }}",
        "{{{ inputs.n }}",
        "a {{ inputs.n }} b {% if true %}c{% endif %}",
        "{{ inputs.n }}\r\n",
    ],
)
def test_anything_else_is_left_to_jinja(text: str) -> None:
    assert substitute(text, CONTEXT) is None


def test_a_substitution_over_the_size_cap_is_refused_by_jinja() -> None:
    context = {"inputs": {"text": "x" * MAX_RENDERED_CHARS}}
    assert substitute("{{ inputs.text }}!", context) is None
    with pytest.raises(TemplateError, match="more than 1000000 characters"):
        render("{{ inputs.text }}!", context)
