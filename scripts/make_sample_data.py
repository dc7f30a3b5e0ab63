"""Generate examples/data/sales.csv: six months of synthetic daily order lines.

Deterministic (numpy ``default_rng`` with a fixed seed): running it twice gives the same file.
The data has what a daily sales report should notice:

- an upward trend (about +25% over the period) and weekly seasonality (weekends busiest);
- promotions: a summer sale (2026-07-15..17) and Black Friday / Cyber weekend (2026-11-27..30);
- anomalies: a slipped decimal point on 2026-08-20 (Electronics on the web, unit_price x10),
  a West region outage on 2026-10-14 (about 90% of its orders missing), an Apparel returns
  spike on 2026-11-18, and no partner orders at all on 2026-11-30 (a late feed).

Usage: ``python scripts/make_sample_data.py [--out PATH] [--seed N]``
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np

FIRST_DAY = date(2026, 6, 1)
LAST_DAY = date(2026, 11, 30)
SEED = 20261130
BASE_ORDERS_PER_DAY = 27
TREND = 0.25
COLUMNS = [
    "date",
    "order_id",
    "region",
    "channel",
    "product_category",
    "units",
    "unit_price",
    "revenue",
    "cost",
    "returned",
]

REGIONS = {"North": 0.26, "South": 0.22, "East": 0.20, "West": 0.20, "Central": 0.12}
CHANNELS = {"web": 0.50, "store": 0.35, "partner": 0.15}
WEEKDAY_FACTOR = (0.88, 0.90, 0.94, 1.00, 1.10, 1.28, 1.15)  # Monday .. Sunday


@dataclass(frozen=True)
class Category:
    """A product category: typical price, share of lines, cost ratio and return rate."""

    name: str
    share: float
    price: float
    cost_ratio: float
    return_rate: float


CATEGORIES = (
    Category("Electronics", 0.16, 189.0, 0.78, 0.05),
    Category("Home", 0.20, 46.0, 0.58, 0.03),
    Category("Apparel", 0.24, 34.0, 0.45, 0.09),
    Category("Beauty", 0.14, 22.0, 0.40, 0.02),
    Category("Sports", 0.14, 61.0, 0.55, 0.04),
    Category("Toys", 0.12, 27.0, 0.50, 0.03),
)

PROMOTIONS = {  # day -> (demand multiplier, price discount)
    date(2026, 7, 15): (1.55, 0.15),
    date(2026, 7, 16): (1.70, 0.15),
    date(2026, 7, 17): (1.45, 0.15),
    date(2026, 11, 27): (2.60, 0.25),
    date(2026, 11, 28): (1.90, 0.20),
    date(2026, 11, 29): (1.75, 0.20),
    date(2026, 11, 30): (1.95, 0.20),
}
PRICE_SLIP_DAY = date(2026, 8, 20)
WEST_OUTAGE_DAY = date(2026, 10, 14)
RETURNS_SPIKE_DAY = date(2026, 11, 18)
PARTNER_FEED_LATE_DAY = date(2026, 11, 30)


def days() -> Iterator[date]:
    """Every day from FIRST_DAY to LAST_DAY inclusive."""
    day = FIRST_DAY
    while day <= LAST_DAY:
        yield day
        day += timedelta(days=1)


def expected_orders(day: date) -> float:
    """Mean number of orders on ``day``: trend x weekday x promotion."""
    progress = (day - FIRST_DAY).days / (LAST_DAY - FIRST_DAY).days
    multiplier = PROMOTIONS.get(day, (1.0, 0.0))[0]
    return BASE_ORDERS_PER_DAY * (1 + TREND * progress) * WEEKDAY_FACTOR[day.weekday()] * multiplier


def order_lines(rng: np.random.Generator, day: date, first_order: int) -> tuple[list[list[object]], int]:
    """The order lines of one day, and the next free order number."""
    rows: list[list[object]] = []
    order_number = first_order
    for _ in range(rng.poisson(expected_orders(day))):
        region = str(rng.choice(list(REGIONS), p=list(REGIONS.values())))
        channel = str(rng.choice(list(CHANNELS), p=list(CHANNELS.values())))
        order_number += 1
        if _dropped(rng, day, region, channel):
            continue
        for _ in range(int(rng.geometric(0.6))):
            rows.append(_line(rng, day, f"SO-{order_number:07d}", region, channel))
    return rows, order_number


def _dropped(rng: np.random.Generator, day: date, region: str, channel: str) -> bool:
    if day == WEST_OUTAGE_DAY and region == "West":
        return bool(rng.random() < 0.9)
    return day == PARTNER_FEED_LATE_DAY and channel == "partner"


def _line(rng: np.random.Generator, day: date, order_id: str, region: str, channel: str) -> list[object]:
    category = CATEGORIES[rng.choice(len(CATEGORIES), p=[c.share for c in CATEGORIES])]
    units = 1 + int(rng.poisson(0.25 if category.name == "Electronics" else 0.7))
    discount = PROMOTIONS.get(day, (1.0, 0.0))[1]
    unit_price = round(category.price * float(rng.lognormal(0.0, 0.32)) * (1 - discount), 2)
    if day == PRICE_SLIP_DAY and category.name == "Electronics" and channel == "web":
        unit_price = round(unit_price * 10, 2)
    revenue = round(units * unit_price, 2)
    cost = round(revenue / (1 - discount) * category.cost_ratio * float(rng.uniform(0.95, 1.05)), 2)
    return_rate = 0.35 if day == RETURNS_SPIKE_DAY and category.name == "Apparel" else category.return_rate
    returned = "true" if rng.random() < return_rate else "false"
    return [
        day.isoformat(),
        order_id,
        region,
        channel,
        category.name,
        units,
        f"{unit_price:.2f}",
        f"{revenue:.2f}",
        f"{cost:.2f}",
        returned,
    ]


def generate(out: Path, seed: int = SEED) -> int:
    """Write the CSV to ``out`` and return the number of rows."""
    rng = np.random.default_rng(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    count, order_number = 0, 1_000_000
    with out.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream, lineterminator="\n")
        writer.writerow(COLUMNS)
        for day in days():
            rows, order_number = order_lines(rng, day, order_number)
            writer.writerows(rows)
            count += len(rows)
    return count


def main() -> None:
    """Command line: write the sample data and say how much."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "examples" / "data" / "sales.csv"
    )
    parser.add_argument("--seed", type=int, default=SEED)
    arguments = parser.parse_args()
    rows = generate(arguments.out, arguments.seed)
    print(f"wrote {rows:,} rows to {arguments.out} ({arguments.out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
