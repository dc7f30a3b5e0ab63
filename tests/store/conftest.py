"""The shared cap ledger the store's take-over and spender tests start from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.config.specs import Caps
from runner.store.cap_ledger import CapLedger
from runner.store.connect import open_database

NOW = "2026-01-01T00:00:00+00:00"


@pytest.fixture
def ledger(store_target: str | Path) -> Iterator[CapLedger]:
    """A cap ledger on each backend with scope ``k`` open at ``max_cost_usd=1.0``."""
    opened = CapLedger(open_database(store_target))
    opened.open("k", Caps(max_cost_usd=1.0), NOW)
    yield opened
    opened.close()
