"""Data tools: tables persist as Parquet in the workspace; queries are structured, never eval'd."""

from __future__ import annotations

import json

import pytest

from runner.errors import ToolFailure
from runner.tools.registry import default_registry

pytestmark = pytest.mark.timeout(120)

CSV = "region,product,units,price\nEU,apple,10,1.5\nEU,pear,5,2.0\nUS,apple,7,1.25\nUS,plum,3,4.0\nAPAC,apple,1,1.0\n"


@pytest.fixture
def sales(workspace):
    (workspace / "data").mkdir()
    (workspace / "data" / "sales.csv").write_text(CSV)
    return "data/sales.csv"


async def test_load_table_reports_shape_columns_and_head(registry, ctx, sales, workspace):
    result = await registry.invoke("load_table", {"path": sales}, ctx)
    assert "Loaded table 'sales'" in result.content and "5 rows x 4 columns" in result.content
    assert result.data["columns"] == ["region", "product", "units", "price"]
    assert result.data["dtypes"]["units"] == "int64"
    assert result.data["head"][0] == {"region": "EU", "product": "apple", "units": 10, "price": 1.5}
    assert (workspace / ".tables" / "sales.parquet").is_file()


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet"])
async def test_load_table_other_formats(registry, ctx, workspace, fmt):
    import pandas as pd

    frame = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    path = workspace / f"data.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(frame.to_dict(orient="records")))
    elif fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in frame.to_dict(orient="records")))
    else:
        frame.to_parquet(path)
    result = await registry.invoke("load_table", {"path": f"data.{fmt}", "name": "t"}, ctx)
    assert result.data["rows"] == 2 and result.data["columns"] == ["a", "b"]


async def test_mixed_type_columns_are_kept_as_text(registry, ctx, workspace):
    (workspace / "mixed.json").write_text(json.dumps([{"a": 1, "b": {"x": 1}}, {"a": "two", "b": [1]}]))
    result = await registry.invoke("load_table", {"path": "mixed.json"}, ctx)
    assert result.data["rows"] == 2
    assert [row["a"] for row in result.data["head"]] == ["1", "two"]


async def test_tables_persist_across_registries(ctx, sales):
    await default_registry().invoke("load_table", {"path": sales}, ctx)
    result = await default_registry().invoke("describe_table", {"table": "sales"}, ctx)
    assert result.data["rows"] == 5
    units = next(row for row in result.data["statistics"] if row["column"] == "units")
    assert units["mean"] == pytest.approx(5.2)


async def test_query_filters_groups_sorts_and_saves(registry, ctx, sales):
    await registry.invoke("load_table", {"path": sales}, ctx)
    query = {
        "table": "sales",
        "filters": [
            {"column": "product", "op": "in", "value": ["apple", "pear"]},
            {"column": "units", "op": ">=", "value": 2},
        ],
        "group_by": ["region"],
        "aggregations": {"units": "sum", "price": "mean"},
        "sort_by": ["units_sum"],
        "descending": True,
        "save_as": "by_region",
    }
    result = await registry.invoke("query_table", query, ctx)
    assert result.data["records"] == [
        {"region": "EU", "units_sum": 15, "price_mean": 1.75},
        {"region": "US", "units_sum": 7, "price_mean": 1.25},
    ]
    assert "| region | units_sum | price_mean |" in result.content
    again = await registry.invoke("query_table", {"table": "by_region", "limit": 1, "columns": ["region"]}, ctx)
    assert again.data["records"] == [{"region": "EU"}]


async def test_query_contains_and_group_count(registry, ctx, sales):
    await registry.invoke("load_table", {"path": sales}, ctx)
    result = await registry.invoke(
        "query_table",
        {
            "table": "sales",
            "filters": [{"column": "product", "op": "contains", "value": "pl"}],
            "group_by": ["product"],
        },
        ctx,
    )
    assert result.data["records"] == [{"product": "apple", "count": 3}, {"product": "plum", "count": 1}]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"filters": [{"column": "nope", "op": "==", "value": 1}]}, "has no column 'nope'"),
        ({"filters": [{"column": "units", "op": "in", "value": 3}]}, "needs a list"),
        ({"filters": [{"column": "units", "op": "@import os", "value": 3}]}, "Input should be"),
        ({"filters": [{"column": "region", "op": "<", "value": 3}]}, "cannot compare"),
        ({"aggregations": {"region": "mean"}}, "cannot aggregate"),
        ({"save_as": "../escape"}, "invalid table name"),
    ],
)
async def test_query_mistakes_are_explained(registry, ctx, sales, query, message):
    await registry.invoke("load_table", {"path": sales}, ctx)
    with pytest.raises(ToolFailure, match=message):
        await registry.invoke("query_table", {"table": "sales", **query}, ctx)


async def test_unknown_table_lists_known_ones(registry, ctx, sales):
    await registry.invoke("load_table", {"path": sales}, ctx)
    with pytest.raises(ToolFailure, match=r"no table named 'sale' \(tables: sales\)"):
        await registry.invoke("describe_table", {"table": "sale"}, ctx)


@pytest.mark.parametrize("kind", ["line", "bar", "pie", "scatter"])
async def test_chart_writes_a_png_artifact(registry, ctx, sales, workspace, kind):
    await registry.invoke("load_table", {"path": sales}, ctx)
    y = "units" if kind == "pie" else ["units", "price"]
    result = await registry.invoke(
        "chart", {"table": "sales", "kind": kind, "x": "product", "y": y, "title": "Sales"}, ctx
    )
    assert result.artifacts == [f"charts/sales_{kind}.png"]
    assert (workspace / result.artifacts[0]).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


async def test_chart_filename_stays_under_charts(registry, ctx, sales, workspace):
    await registry.invoke("load_table", {"path": sales}, ctx)
    result = await registry.invoke(
        "chart", {"table": "sales", "kind": "bar", "x": "region", "y": "units", "filename": "../../etc/evil"}, ctx
    )
    assert result.artifacts == ["charts/evil.png"]
    assert (workspace / "charts" / "evil.png").is_file()
