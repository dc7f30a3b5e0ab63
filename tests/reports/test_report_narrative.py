"""The safe Markdown subset: structure is kept, nothing from the text becomes HTML."""

from __future__ import annotations

import re
import time

import pytest

from runner.reports.narrative import to_html, to_markdown


def test_subset_becomes_html() -> None:
    html = to_html(
        "# Title\n\nSome **bold**, *italic*, ~~old~~ and `code`.\n\n- a\n- b\n  - nested\n1. one\n\n"
        "| k | v |\n|---|--:|\n| x | 1 |\n\n> quoted\n\n```\nx < y\n```\n\n---"
    )
    assert "<h3>Title</h3>" in html
    assert "<strong>bold</strong>" in html and "<em>italic</em>" in html and "<del>old</del>" in html
    assert "<code>code</code>" in html
    assert "<ul><li>a</li><li>b<ul><li>nested</li></ul></li></ul>" in html
    assert "</ul><ol><li>one</li></ol>" in html
    assert '<th>k</th><th class="num">v</th>' in html and '<td class="num">1</td>' in html
    assert "<blockquote><p>quoted</p></blockquote>" in html
    assert "<pre><code>x &lt; y</code></pre>" in html
    assert "<hr>" in html


def test_raw_html_links_and_images_stay_text() -> None:
    hostile = (
        '<script>alert(1)</script>\n\n<img src=x onerror="alert(2)">\n\n'
        "[click](javascript:alert(3)) ![pic](https://evil.example/p.png)\n\n"
        "**<b onmouseover=alert(4)>x</b>**\n\n| <i>h</i> |\n|---|\n| <svg/onload=alert(5)> |"
    )
    html = str(to_html(hostile))
    tags = set(re.findall(r"<\s*/?\s*([a-zA-Z0-9]+)", html))
    assert tags <= {"p", "strong", "table", "thead", "tbody", "tr", "th", "td"}
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert set(re.findall(r"<[a-zA-Z]+(\s[^>]*)>", html)) <= {' class="data"'}  # no attribute from the text
    assert "click (javascript:alert(3))" in html
    assert "[image: pic]" in html


def test_markdown_demotes_headings_and_neutralises_html_outside_code() -> None:
    text = "# Top\n## Sub\n<script>x</script> and `<kept>`\n```\n# not a heading <kept>\n```"
    assert to_markdown(text).splitlines() == [
        "### Top",
        "#### Sub",
        "&lt;script>x&lt;/script> and `<kept>`",
        "```",
        "# not a heading <kept>",
        "```",
    ]


@pytest.mark.parametrize("unit", ["*a ", "_a ", "**a", "[a](", "![a](", "`a", "~~a", "|a", "> ", " ", "- "])
def test_hostile_input_renders_in_linear_time(unit: str) -> None:
    text = unit * 20_000
    started = time.perf_counter()
    to_html(text)
    to_markdown(text)
    assert time.perf_counter() - started < 5, "a pattern backtracks without bound"
