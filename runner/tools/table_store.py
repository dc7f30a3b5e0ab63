"""Named tables of a run, kept as Parquet files in the workspace (``.tables/<name>.parquet``).

State lives in the workspace, not in the process: tables survive between calls, across
processes and into the report. pandas is imported only when a table is touched.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import ToolFailure
from runner.tools.paths import list_workspace_files, read_workspace_file, write_workspace_file

if TYPE_CHECKING:
    import pandas as pd

TABLES_DIR = ".tables"
TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
MAX_TABLE_BYTES = 512 * 1024 * 1024
MAX_PARQUET_CELLS = 50_000_000
"""Rows x columns a Parquet file may declare before the runner decodes it."""
_MAX_CELL_CHARS = 60


def table_path(name: str) -> str:
    """The workspace-relative file of table ``name`` (the name is checked)."""
    if not TABLE_NAME.match(name):
        raise ToolFailure(f"invalid table name '{name}': use letters, digits, '_' or '-' (start with a letter)")
    return f"{TABLES_DIR}/{name}.parquet"


def table_names(workspace: Path) -> list[str]:
    """Names of the tables saved in ``workspace``."""
    try:
        entries = list_workspace_files(workspace, TABLES_DIR, recursive=False)
    except ToolFailure:
        return []
    return [
        e.path.rsplit("/", 1)[-1].removesuffix(".parquet")
        for e in entries
        if e.kind == "file" and e.path.endswith(".parquet")
    ]


def save_table(workspace: Path, name: str, frame: pd.DataFrame, *, quota_bytes: int | None = None) -> pd.DataFrame:
    """Store ``frame`` as table ``name``; return the frame as stored (mixed columns as text)."""
    path = table_path(name)
    frame = frame.copy()
    frame.columns = [str(c) for c in frame.columns]
    try:
        data = _parquet_bytes(frame)
    except (TypeError, ValueError):
        # Mixed-type columns (e.g. numbers and strings from JSON) cannot be stored as
        # Parquet; keep them as text rather than failing the call.
        mixed = frame.select_dtypes(include="object").columns
        frame[mixed] = frame[mixed].astype(str)
        data = _parquet_bytes(frame)
    write_workspace_file(workspace, path, data, quota_bytes=quota_bytes)
    return frame


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def load_table(workspace: Path, name: str) -> pd.DataFrame:
    """Table ``name`` as a DataFrame; ToolFailure naming the known tables if missing."""
    path = table_path(name)
    try:
        data = read_workspace_file(workspace, path, MAX_TABLE_BYTES)
    except ToolFailure:
        known = ", ".join(table_names(workspace)) or "none yet; use load_table first"
        raise ToolFailure(f"no table named '{name}' (tables: {known})") from None
    try:
        return read_parquet(data, path)
    except ToolFailure as failure:
        raise ToolFailure(f"table '{name}' cannot be read ({failure}); load it again with load_table") from None


def read_parquet(data: bytes, path: str) -> pd.DataFrame:
    """A Parquet file from the workspace (sandboxed code may have written it) as a DataFrame.

    Its footer is checked before anything is decoded: run-length and dictionary encoding let a
    file of 700 KB hold 200 million rows, which would take gigabytes of the runner's memory.
    """
    import pandas as pd
    import pyarrow.parquet as pq

    try:
        metadata = pq.ParquetFile(io.BytesIO(data)).metadata
        cells = metadata.num_rows * max(metadata.num_columns, 1)
        decoded = sum(
            metadata.row_group(g).column(c).total_uncompressed_size
            for g in range(metadata.num_row_groups) for c in range(metadata.row_group(g).num_columns)
        )  # fmt: skip
        if cells > MAX_PARQUET_CELLS or decoded > MAX_TABLE_BYTES:
            raise ToolFailure(
                f"{path} holds {metadata.num_rows:,} rows x {metadata.num_columns} columns ({decoded:,} bytes decoded); "
                f"tables are limited to {MAX_PARQUET_CELLS:,} cells and {MAX_TABLE_BYTES:,} bytes"
            )
        return pd.read_parquet(io.BytesIO(data))
    except ToolFailure:
        raise
    except Exception as error:  # not a Parquet file, or a damaged one
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ToolFailure(f"{path} is not a readable Parquet file: {first}") from None


def require_columns(frame: pd.DataFrame, columns: list[str], table: str) -> None:
    """ToolFailure listing the table's columns if any of ``columns`` is missing."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ToolFailure(
            f"table '{table}' has no column {', '.join(repr(c) for c in missing)}; "
            f"columns: {', '.join(map(str, frame.columns))}"
        )


def records(frame: pd.DataFrame, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` rows as JSON-able dicts (NaN -> null, dates -> ISO strings)."""
    return json.loads(frame.head(limit).to_json(orient="records", date_format="iso"))


def dtypes(frame: pd.DataFrame) -> dict[str, str]:
    """Column name -> pandas dtype name."""
    return {str(column): str(dtype) for column, dtype in frame.dtypes.items()}


def to_markdown(frame: pd.DataFrame, max_rows: int = 20) -> str:
    """A GitHub-flavoured markdown table of the first ``max_rows`` rows."""
    shown = frame.head(max_rows)
    header = [str(c) for c in shown.columns]
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    for row in shown.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(value) for value in row) + " |")
    if len(frame) > max_rows:
        lines.append(f"\n[{len(frame) - max_rows} more rows not shown]")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    text = "" if _is_missing(value) else str(value)
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= _MAX_CELL_CHARS else text[: _MAX_CELL_CHARS - 1] + "…"


def _is_missing(value: Any) -> bool:
    try:
        return bool(value != value)  # NaN and NaT are not equal to themselves
    except (TypeError, ValueError):
        return False
