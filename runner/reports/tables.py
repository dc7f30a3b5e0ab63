"""Tables as every report format shows them: formatted text cells plus alignment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.reports import formatting

MAX_ROWS = 50


@dataclass(frozen=True)
class Table:
    """A table ready to render: every cell is text; ``numeric`` columns are right-aligned.

    ``status_column`` is the index of a column holding a run/step status, which HTML shows
    as a colored badge.
    """

    columns: list[str]
    rows: list[list[str]]
    numeric: list[bool] = field(default_factory=list)
    title: str = ""
    caption: str = ""
    note: str = ""
    status_column: int | None = None

    def is_numeric(self, index: int) -> bool:
        """True when column ``index`` is right-aligned."""
        return index < len(self.numeric) and self.numeric[index]


def data_table(
    data: Mapping[str, Any],
    *,
    title: str = "",
    caption: str = "",
    max_rows: int = MAX_ROWS,
    styles: Mapping[str, Mapping[str, Any]] | None = None,
) -> Table:
    """A ``{"columns": [...], "rows": [[...]]}`` value (e.g. a tool step's data) as a Table.

    Columns whose non-null cells are all numbers are right-aligned. ``styles`` maps a column
    name to its declared label and format (``report.columns``). At most ``max_rows`` rows are
    kept; ``note`` says how many were left out.
    """
    names = [str(name) for name in data["columns"]]
    styles = styles or {}
    raw_rows: Sequence[Sequence[Any]] = data["rows"]
    kept = raw_rows[:max_rows]
    numeric = [_all_numbers(row[i] for row in raw_rows if i < len(row)) for i in range(len(names))]
    cells = [_column_cells([row[i] for row in kept], numeric[i], styles.get(name)) for i, name in enumerate(names)]
    rows = [list(row) for row in zip(*cells, strict=True)] if names else []
    left_out = len(raw_rows) - len(kept)
    note = f"Showing {len(rows):,} of {len(raw_rows):,} rows; all rows are in report.json." if left_out > 0 else ""
    columns = [str((styles.get(name) or {}).get("label") or name) for name in names]
    aligned = [numeric[i] and (styles.get(name) or {}).get("format") not in ("text", "date") for i, name in enumerate(names)]
    return Table(columns, rows, aligned, title=title, caption=caption, note=note)


def _column_cells(values: list[Any], numeric: bool, style: Mapping[str, Any] | None) -> list[str]:
    if style and style.get("format"):
        return [formatting.styled(value, style) for value in values]
    return formatting.number_column(values) if numeric else [formatting.cell(value) for value in values]


def key_value_table(values: Mapping[str, Any], *, title: str = "", key_header: str = "Name") -> Table:
    """A two-column table of names and values (inputs, flat structured outputs)."""
    rows = [[str(key), formatting.cell(value)] for key, value in values.items()]
    return Table([key_header, "Value"], rows, [False, False], title=title)


def _all_numbers(values: Any) -> bool:
    present = [value for value in values if value is not None]
    return bool(present) and all(formatting.is_number(value) for value in present)
