"""The final output's Markdown, made safe: a small Markdown subset to escaped HTML.

Model output is untrusted. :func:`to_html` escapes every character of it and then adds only
tags of its own for a subset of Markdown: headings, paragraphs, bullet and numbered lists
(nested by indentation), pipe tables, fenced code, block quotes, rules, bold, italics,
strike-through and inline code. Raw HTML is shown as text; links and images become their
text (links show their address in parentheses), so the report loads nothing.

:func:`to_markdown` prepares the same text for report.md: headings are demoted below the
report's own and ``<`` outside code is written as ``&lt;`` so viewers do not render HTML.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from markupsafe import Markup, escape

HEADING_SHIFT = 2
MAX_SPAN = 300
"""Longest emphasis, link text or address recognised; longer ones stay plain text.

Bounding every pattern keeps matching linear in the length of the text, so a hostile
output cannot make rendering slow (no pattern here can backtrack without bound).
"""

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*))?$")
_ITEM = re.compile(r"^([ \t]*)([-*+]|\d{1,9}[.)])[ \t]+(.*)$")
_QUOTE = re.compile(r"[ \t]*>[ \t>]*")  # nested quotes are flattened into one
_TABLE_RULE_CELL = re.compile(r":?-+:?")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_CODE_SPAN = re.compile(r"(`+)(.{1,2000}?)\1")

_INLINE_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"!\[([^\]]{{0,{MAX_SPAN}}})\]\([^)\s]{{0,{MAX_SPAN}}}\)"), r"[image: \1]"),
    (re.compile(rf"\[([^\]]{{1,{MAX_SPAN}}})\]\(([^)\s]{{1,{MAX_SPAN}}})\)"), r"\1 (\2)"),
    (re.compile(rf"\*\*(?=\S)(.{{1,{MAX_SPAN}}}?)(?<=\S)\*\*"), r"<strong>\1</strong>"),
    (re.compile(rf"__(?=\S)(.{{1,{MAX_SPAN}}}?)(?<=\S)__"), r"<strong>\1</strong>"),
    (re.compile(rf"(?<![*\w])\*(?=\S)(.{{1,{MAX_SPAN}}}?)(?<=\S)\*(?![*\w])"), r"<em>\1</em>"),
    (re.compile(rf"(?<![_\w])_(?=\S)(.{{1,{MAX_SPAN}}}?)(?<=\S)_(?![_\w])"), r"<em>\1</em>"),
    (re.compile(rf"~~(?=\S)(.{{1,{MAX_SPAN}}}?)(?<=\S)~~"), r"<del>\1</del>"),
]


def to_html(text: str) -> Markup:
    """``text`` (Markdown) as safe HTML: everything escaped, only our own tags added."""
    return Markup("\n".join(_blocks(text.splitlines())))


def inline_html(text: str) -> str:
    """One line of Markdown as safe HTML (code spans, emphasis, links as text)."""
    parts, position = [], 0
    for match in _CODE_SPAN.finditer(text):
        parts.append(_emphasis(str(escape(text[position : match.start()]))))
        parts.append(f"<code>{escape(match.group(2).strip())}</code>")
        position = match.end()
    parts.append(_emphasis(str(escape(text[position:]))))
    return "".join(parts)


def to_markdown(text: str) -> str:
    """``text`` for report.md: headings demoted by two levels, ``<`` outside code escaped."""
    lines, fence = [], ""
    for line in text.splitlines():
        marker = _FENCE.match(line)
        if fence:
            fence = "" if marker and marker.group(1).startswith(fence) else fence
            lines.append(line)
        elif marker:
            fence = marker.group(1)
            lines.append(line)
        else:
            heading = _HEADING.match(line)
            if heading:
                level = min(len(heading.group(1)) + HEADING_SHIFT, 6)
                line = "#" * level + " " + _heading_text(heading.group(2))
            lines.append(_outside_code(line, lambda part: part.replace("<", "&lt;")))
    return "\n".join(lines)


def _outside_code(line: str, change: Callable[[str], str]) -> str:
    parts, position = [], 0
    for match in _CODE_SPAN.finditer(line):
        parts += [change(line[position : match.start()]), match.group(0)]
        position = match.end()
    return "".join([*parts, change(line[position:])])


def _emphasis(escaped: str) -> str:
    for pattern, replacement in _INLINE_RULES:
        escaped = pattern.sub(replacement, escaped)
    return escaped


def _blocks(lines: list[str]) -> Iterator[str]:
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            index += 1
            continue
        for reader in (_fenced, _heading, _rule, _table, _quote, _list, _paragraph):
            consumed, html = reader(lines, index)
            if consumed:
                yield html
                index += consumed
                break


def _fenced(lines: list[str], start: int) -> tuple[int, str]:
    marker = _FENCE.match(lines[start])
    if not marker:
        return 0, ""
    fence, end = marker.group(1), start + 1
    while end < len(lines) and not lines[end].strip().startswith(fence):
        end += 1
    code = "\n".join(lines[start + 1 : end])
    return min(end + 1, len(lines)) - start, f"<pre><code>{escape(code)}</code></pre>"


def _heading(lines: list[str], start: int) -> tuple[int, str]:
    match = _HEADING.match(lines[start])
    if not match:
        return 0, ""
    level = min(len(match.group(1)) + HEADING_SHIFT, 6)
    return 1, f"<h{level}>{inline_html(_heading_text(match.group(2)))}</h{level}>"


def _heading_text(raw: str | None) -> str:
    """The heading's text without an optional closing run of '#'."""
    text = (raw or "").strip()
    unclosed = text.rstrip("#")
    return unclosed.strip() if unclosed != text and (not unclosed or unclosed[-1] in " \t") else text


def _is_rule(line: str) -> bool:
    if len(line) - len(line.lstrip(" ")) > 3:
        return False
    compact = line.replace(" ", "").replace("\t", "")
    return len(compact) >= 3 and compact[0] in "-*_" and compact == compact[0] * len(compact)


def _rule(lines: list[str], start: int) -> tuple[int, str]:
    return (1, "<hr>") if _is_rule(lines[start]) else (0, "")


def _table(lines: list[str], start: int) -> tuple[int, str]:
    if "|" not in lines[start] or start + 1 >= len(lines):
        return 0, ""
    header, rule = _cells(lines[start]), _cells(lines[start + 1])
    if len(rule) != len(header) or not all(_TABLE_RULE_CELL.fullmatch(cell) for cell in rule):
        return 0, ""
    right = [cell.endswith(":") and not cell.startswith(":") for cell in rule]
    end = start + 2
    while end < len(lines) and "|" in lines[end] and lines[end].strip():
        end += 1

    def row(cells: list[str], tag: str) -> str:
        padded = (cells + [""] * len(header))[: len(header)]
        return (
            "<tr>"
            + "".join(_cell_html(tag, cell, i < len(right) and right[i]) for i, cell in enumerate(padded))
            + "</tr>"
        )

    body = "".join(row(_cells(line), "td") for line in lines[start + 2 : end])
    return end - start, f'<table class="data"><thead>{row(header, "th")}</thead><tbody>{body}</tbody></table>'


def _cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(line)]


def _cell_html(tag: str, text: str, right: bool) -> str:
    attribute = ' class="num"' if right else ""
    return f"<{tag}{attribute}>{inline_html(text)}</{tag}>"


def _quote(lines: list[str], start: int) -> tuple[int, str]:
    inner = []
    for line in lines[start:]:
        marker = _QUOTE.match(line)
        if not marker:
            break
        inner.append(line[marker.end() :])
    if not inner:
        return 0, ""
    return len(inner), "<blockquote>" + "\n".join(_blocks(inner)) + "</blockquote>"


def _list(lines: list[str], start: int) -> tuple[int, str]:
    items: list[tuple[int, str, list[str]]] = []
    end = start
    while end < len(lines) and lines[end].strip():
        match = _ITEM.match(lines[end])
        if match:
            tag = "ul" if match.group(2)[0] in "-*+" else "ol"
            items.append((len(match.group(1).expandtabs(4)), tag, [match.group(3)]))
        elif items and lines[end].startswith((" ", "\t")):
            items[-1][2].append(lines[end].strip())
        else:
            break
        end += 1
    return (end - start, _nested_list([(i, t, " ".join(words)) for i, t, words in items])) if items else (0, "")


def _nested_list(items: list[tuple[int, str, str]]) -> str:
    out: list[str] = []
    open_lists: list[tuple[int, str]] = []
    for indent, tag, text in items:
        if not open_lists or indent > open_lists[-1][0]:
            out.append(f"<{tag}>")
            open_lists.append((indent, tag))
        else:
            while len(open_lists) > 1 and indent < open_lists[-1][0]:
                out.append(f"</li></{open_lists.pop()[1]}>")
            if tag == open_lists[-1][1]:
                out.append("</li>")
            else:  # bullets turned into numbers (or back) at this level: a new list
                out.append(f"</li></{open_lists.pop()[1]}><{tag}>")
                open_lists.append((indent, tag))
        out.append(f"<li>{inline_html(text)}")
    out += [f"</li></{tag}>" for _, tag in reversed(open_lists)]
    return "".join(out)


def _paragraph(lines: list[str], start: int) -> tuple[int, str]:
    end = start + 1
    while end < len(lines) and lines[end].strip() and not _starts_block(lines, end):
        end += 1
    text = " ".join(line.strip() for line in lines[start:end])
    return end - start, f"<p>{inline_html(text)}</p>"


def _starts_block(lines: list[str], index: int) -> bool:
    line = lines[index]
    return bool(
        _FENCE.match(line)
        or _HEADING.match(line)
        or _is_rule(line)
        or _QUOTE.match(line)
        or _ITEM.match(line)
        or _table(lines, index)[0]
    )
