"""report.html: self-contained, escaped, with every section."""

from __future__ import annotations

import base64
import re
from datetime import datetime
from html.parser import HTMLParser
from typing import Any

import pytest
from jinja2 import nodes

from runner.reports.html import TEMPLATE, environment, render_html

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
HOSTILE = "<script>alert(1)</script>"
BREAKOUT = "\"' onmouseover=alert(1) x=\"><script>alert(1)</script><img src=x onerror=alert(1)>"
"""Text that leaves an element or a quoted attribute if it is not escaped."""
ATTRIBUTES = {"lang", "charset", "name", "content", "http-equiv", "class", "id", "href", "src", "alt", "style", "title", "open"}
"""Every attribute the page's own markup uses: an escape that fails shows as another one."""


class Tags(HTMLParser):
    """Every start tag with its attributes."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def named(self, name: str) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.tags if tag == name]


@pytest.fixture
def html(record: dict[str, Any]) -> str:
    return render_html(record, {"charts/revenue.png": PNG})


def test_self_contained(html: str) -> None:
    tags = Tags(html)
    urls = [value or "" for _, attrs in tags.tags for name, value in attrs.items() if name in ("src", "href", "srcset")]
    assert urls, "expected in-page links and images"
    assert all(url.startswith(("#", "data:image/")) for url in urls), urls
    assert not tags.named("script") and not tags.named("link") and not tags.named("iframe")
    assert not re.search(r"https?://", " ".join(u for u in urls))
    assert "@import" not in html and "url(" not in html
    images = [attrs["src"] or "" for attrs in tags.named("img")]
    assert len(images) == 2  # the workspace chart and the cost-by-step chart
    assert base64.b64decode(images[0].split(",", 1)[1]) == PNG
    assert all(src.startswith("data:image/png;base64,") for src in images)
    csp = [attrs for attrs in tags.named("meta") if attrs.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in (csp[0]["content"] or "")


def test_hostile_text_is_escaped_everywhere(record: dict[str, Any]) -> None:
    record["final_output"] = f"# Hi\n\n{HOSTILE}\n\n**{HOSTILE}**\n\n| a |\n|---|\n| {HOSTILE} |"
    record["title"] = HOSTILE
    record["stop_reason"] = HOSTILE
    record["inputs"]["note"] = HOSTILE
    record["tables"]["query_sales"]["rows"][0][0] = HOSTILE
    record["tables"]["query_sales"]["caption"] = HOSTILE
    record["artifacts"][0]["caption"] = '"><img src=x onerror=alert(1)>'
    record["plan"]["rationale"] = HOSTILE
    record["steps"][0]["output"] = HOSTILE
    page = render_html(record, {"charts/revenue.png": PNG})
    assert HOSTILE not in page
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "onerror=alert(1)>" not in page
    assert not Tags(page).named("script")
    assert len(Tags(page).named("img")) == 2


def test_sections_and_tables(html: str) -> None:
    ids = [attrs["id"] for tag, attrs in Tags(html).tags if tag == "section"]
    assert ids == [
        "summary",
        "tables",
        "charts",
        "changes",
        "plan",
        "steps",
        "cost",
        "caps",
        "inputs",
        "timings",
        "details",
    ]
    assert html.count("<table") >= 10
    assert '<td class="num">52,310.50</td>' in html
    assert '<span class="badge big completed">completed</span>' in html
    assert '<span class="badge failed">failed</span>' in html
    assert "<h3>Daily sales: Sunday 29 November 2026</h3>" in html  # the narrative, demoted below the report's h2
    assert "<figcaption>chart_revenue: Chart daily revenue by region over 30 days</figcaption>" in html
    assert '<span class="add">+Revenue was **$184,220**' in html


def test_missing_chart_and_failed_run(record: dict[str, Any]) -> None:
    record.update(status="capped", exit_code=3, stop_reason="max_cost_usd of $0.0300 reached")
    page = render_html(record, {})
    assert "Chart <code>charts/revenue.png</code> was not copied into the report." in page
    assert '<p class="callout capped"><strong>Stopped:</strong> max_cost_usd of $0.0300 reached</p>' in page


def test_no_cost_chart_with_one_costed_step(record: dict[str, Any]) -> None:
    for step in record["steps"][1:]:
        step["usage"]["cost_usd"] = 0.0
    assert len(Tags(render_html(record, {"charts/revenue.png": PNG})).named("img")) == 1


def _spoiled(value: Any) -> Any:
    """``value`` with ``BREAKOUT`` appended to every string but timestamps (which must parse)."""
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            return value + BREAKOUT
        return value
    if isinstance(value, dict):
        return {key: _spoiled(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_spoiled(item) for item in value]
    return value


def _transcript() -> list[dict[str, Any]]:
    model = {
        "kind": "model", "seq": 1, "attempt": 1, "step_id": "query_sales", "agent": "analyst", "model": "gpt-4o-mini",
        "status": "ok", "message_digests": ["a", "b"], "usage": {"input_tokens": 10, "output_tokens": 2},
        "messages": [{"role": "system", "content": "be brief"}, {"role": "tool", "tool_call_id": "c1", "content": "x" * 25_000}],
        "tools": [{"function": {"name": "run_sql"}}], "response": {"role": "assistant", "content": "done"},
    }  # fmt: skip
    failed = {**model, "seq": 2, "message_digests": ["a", "b", "c"], "response": None, "error": "the server refused"}
    tool = {"kind": "tool", "seq": 3, "step_id": "query_sales", "agent": "analyst", "name": "run_sql", "status": "ok",
            "arguments": {"sql": "select 1"}, "output": "1 row"}  # fmt: skip
    return [model, failed, tool]


def test_every_text_of_the_record_and_transcript_is_escaped(record: dict[str, Any]) -> None:
    """Not only the fields a test thought of: every string of the record and of a transcript
    ends in markup that would open a tag or an attribute, and none does."""
    record["inputs"] = {f"name{BREAKOUT}": "value"}
    transcript = [{**_spoiled(entry), "kind": entry["kind"]} for entry in _transcript()]
    page = render_html(_spoiled(record), {f"charts/revenue.png{BREAKOUT}": PNG}, transcript)
    tags = Tags(page)
    assert not tags.named("script") and len(tags.named("img")) == 2  # the record's chart and the cost chart
    assert {name for _, attrs in tags.tags for name in attrs} <= ATTRIBUTES
    assert "<script" not in page and "onerror=alert(1)>" not in page
    assert page.count("&lt;script&gt;") > 100
    assert re.search(r"\[cut at 20000 of 25,?\d{3} characters", page)  # a long transcript part is cut, as before


def test_the_template_escapes_everything_it_prints() -> None:
    """Autoescape is on and the template never turns it off: no ``|safe``, no
    ``{% autoescape false %}``. Trusted markup (the narrative) is built in Python as Markup."""
    env = environment()
    assert env.autoescape is True
    source, _, _ = env.loader.get_source(env, TEMPLATE)  # type: ignore[union-attr]
    tree = env.parse(source)
    assert not [f.name for f in tree.find_all(nodes.Filter) if f.name in ("safe", "forceescape")]
    assert not list(tree.find_all(nodes.EvalContextModifier))  # {% autoescape %} blocks
    assert not [n for n in tree.find_all(nodes.Name) if n.name in ("Markup", "markup")]
