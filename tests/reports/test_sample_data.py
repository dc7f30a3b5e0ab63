"""examples/data/sales.csv: reproducible from scripts/make_sample_data.py, with its planted patterns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).parents[2]
SALES = ROOT / "examples" / "data" / "sales.csv"


@pytest.fixture(scope="module")
def sales() -> pd.DataFrame:
    return pd.read_csv(SALES, parse_dates=["date"])


def test_script_reproduces_the_committed_file(tmp_path: Path) -> None:
    out = tmp_path / "sales.csv"
    script = ROOT / "scripts" / "make_sample_data.py"
    result = subprocess.run(
        [sys.executable, script, "--out", out], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.startswith("wrote 9,712 rows to")
    assert out.read_bytes() == SALES.read_bytes()


def test_shape_and_columns(sales: pd.DataFrame) -> None:
    assert list(sales.columns) == [
        "date", "order_id", "region", "channel", "product_category", "units", "unit_price", "revenue", "cost", "returned",
    ]  # fmt: skip
    assert SALES.stat().st_size < 1_500_000
    assert sales["date"].min() == pd.Timestamp("2026-06-01") and sales["date"].max() == pd.Timestamp("2026-11-30")
    assert sales["date"].nunique() == 183
    assert set(sales["channel"]) == {"web", "store", "partner"}
    assert sales["region"].nunique() == 5 and sales["product_category"].nunique() == 6
    assert sales["returned"].dtype == bool
    assert ((sales["units"] * sales["unit_price"]).round(2) - sales["revenue"]).abs().max() < 0.011


def test_planted_patterns(sales: pd.DataFrame) -> None:
    daily = sales.groupby("date")["revenue"].sum()
    by_weekday = daily.groupby(pd.DatetimeIndex(daily.index).day_of_week).mean()
    assert by_weekday.idxmax() == 5 and by_weekday.idxmin() == 0  # Saturday busiest, Monday quietest
    assert daily["2026-11-27"] > 1.8 * daily["2026-11-01":"2026-11-26"].mean()  # Black Friday
    on_outage = sales[sales["date"] == "2026-10-14"]
    assert (on_outage["region"] == "West").sum() <= 2
    assert not ((sales["date"] == "2026-11-30") & (sales["channel"] == "partner")).any()
    assert sales.loc[sales["date"] == "2026-08-20", "unit_price"].max() > 1_000
