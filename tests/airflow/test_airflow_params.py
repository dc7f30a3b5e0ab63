"""The example DAG's batch option params (runner.airflow.params) refuse at trigger time what the task would refuse."""

from __future__ import annotations

from typing import Any

import pytest

from runner.batch.options import OPTIONS
from runner.errors import UsageError
from tests.support.services import import_or_missing

import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

from runner.airflow.options import OPTION_NAMES  # noqa: E402
from runner.airflow.params import batch_option_params  # noqa: E402

NUMERIC = [n for n in OPTION_NAMES if OPTIONS[n].kind in ("integer", "number", "cap")]
PROBES = [-1, 0, 0.5, 1, 2, 100, 1024, 1025, 604_800, 604_801, 1_000_000, 1_000_001, 10**7]


def _param_takes(name: str, value: Any) -> bool:
    try:
        batch_option_params()[name].resolve(value=value)
    except Exception:  # Airflow's ParamValidationError
        return False
    return True


def _task_takes(name: str, value: Any) -> bool:
    try:
        OPTIONS[name].typed(value, name)
    except UsageError:
        return False
    return True


@pytest.mark.parametrize("name", NUMERIC)
def test_a_numeric_param_takes_exactly_what_the_task_takes(name: str) -> None:
    """A cap param holds the caps schema's bounds (max_tokens and row_max_steps at least 1,
    max_wall_seconds more than 0), so a trigger with a value the task refuses is refused."""
    disagree = [v for v in PROBES if _param_takes(name, v) != _task_takes(name, v)]
    assert disagree == [], f"{name}: the param and the task disagree on {disagree}"


def test_the_map_param_refuses_a_pair_without_a_column() -> None:
    assert _param_takes("map", ["subject=title"]) and not _param_takes("map", ["subject"])
