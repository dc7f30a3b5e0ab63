"""report.xlsx: the report's tables as worksheets (openpyxl), numbers kept as numbers.

One sheet per table (named after its title), headers from the declared column labels, and
each column's declared format as an Excel number format, so a reader can sort, sum and
chart the figures. A first sheet says what the report is (title, status, run, inputs).
Text that starts with ``=`` is stored as text, never as a formula (no formula injection).
Characters XML 1.0 cannot hold (BEL, ESC and the other C0 controls but tab and newline) are
written as visible ``\\xHH`` escapes: a cell from a database or a page never stops the workbook.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Mapping
from typing import Any

from runner.reports import formatting

_SHEET_CHARS = re.compile(r"[\[\]:*?/\\\x00-\x1f\x7f]")
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")  # what openpyxl refuses in a cell
_CURRENCY_FORMATS = {"USD": '"$"#,##0', "EUR": '"€"#,##0', "GBP": '"£"#,##0', "JPY": '"¥"#,##0'}


def workbook_bytes(record: Mapping[str, Any]) -> bytes:
    """The .xlsx file of ``record``'s tables."""
    from openpyxl import Workbook
    from openpyxl.styles import Font

    book = Workbook()
    about = book.active
    about.title = "Report"
    rows = [
        ("Report", record.get("title") or record["task"]),
        ("Status", record["status"]),
        ("Run", record["run_id"]),
        ("Finished", formatting.timestamp(record.get("finished_at"))),
        *((f"Input: {k}", formatting.cell(v)) for k, v in (record.get("inputs") or {}).items()),
    ]
    for row in rows:
        about.append([_safe(v) for v in row])
    about.column_dimensions["A"].width = 18
    about.column_dimensions["B"].width = 60
    about["A1"].font = Font(bold=True)
    _as_text(about)
    styles = record.get("columns") or {}
    used: set[str] = {"Report"}
    for step_id, table in (record.get("tables") or {}).items():
        _add_sheet(book, _sheet_name(str(table.get("title") or formatting.humanize(step_id)), used), table, styles)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def _add_sheet(book: Any, name: str, table: Mapping[str, Any], styles: Mapping[str, Mapping[str, Any]]) -> None:
    from openpyxl.styles import Alignment, Font
    from openpyxl.utils import get_column_letter

    sheet = book.create_sheet(name)
    columns = [str(c) for c in table["columns"]]
    sheet.append([_safe(str((styles.get(c) or {}).get("label") or c)) for c in columns])
    for row in table["rows"]:
        sheet.append([_value(value, styles.get(column) or {}) for column, value in zip(columns, row, strict=False)])
    for index, column in enumerate(columns, start=1):
        letter = get_column_letter(index)
        number_format = _number_format(styles.get(column) or {})
        if number_format:
            for cell in sheet[letter][1:]:
                cell.number_format = number_format
        header = sheet[f"{letter}1"]
        header.font = Font(bold=True)
        header.alignment = Alignment(horizontal="center")
        width = max([len(str(header.value))] + [len(formatting.cell(r[index - 1])) for r in table["rows"][:200] if index - 1 < len(r)])
        sheet.column_dimensions[letter].width = min(max(width + 3, 10), 60)
    sheet.freeze_panes = "A2"
    _as_text(sheet)


def _value(value: Any, style: Mapping[str, Any]) -> Any:
    if style.get("format") == "date" and isinstance(value, str):
        try:
            return dt.date.fromisoformat(value[:10])
        except ValueError:
            return _safe(value)
    if isinstance(value, dict | list):
        return _safe(formatting.cell(value))
    return _safe(value)


def _number_format(style: Mapping[str, Any]) -> str | None:
    kind = style.get("format")
    decimals = style.get("decimals")
    decimals = formatting.DEFAULT_DECIMALS.get(str(kind), 2) if decimals is None else int(decimals)
    fraction = "." + "0" * decimals if decimals else ""
    if kind == "currency":
        base = _CURRENCY_FORMATS.get(str(style.get("currency") or "USD"), f'"{style.get("currency")} "#,##0')
        return base + fraction
    if kind == "percent":
        return "0" + fraction + "%"
    if kind == "integer":
        return "#,##0"
    if kind == "number":
        return "#,##0" + fraction
    if kind == "date":
        return "yyyy-mm-dd"
    return None


def _safe(value: Any) -> Any:
    """``value`` as a cell can hold it: text without characters XML cannot carry."""
    if isinstance(value, str):
        return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", value)
    return value


def _as_text(sheet: Any) -> None:
    """openpyxl stores a string starting with ``=`` as a formula: store it as the string it is."""
    for row in sheet.iter_rows():
        for cell in row:
            if cell.data_type == "f":
                cell.data_type = "s"


def _sheet_name(title: str, used: set[str]) -> str:
    base = _SHEET_CHARS.sub(" ", title).strip()[:31] or "Table"
    name, n = base, 2
    while name.lower() in {u.lower() for u in used}:
        suffix = f" ({n})"
        name, n = base[: 31 - len(suffix)] + suffix, n + 1
    used.add(name)
    return name
