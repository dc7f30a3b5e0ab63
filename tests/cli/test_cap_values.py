"""Cap values from every door outside the YAML go through one parser: CLI flags (run, batch,
row caps), the Python API and Airflow-rendered strings. NaN, infinities, negatives and
non-numbers are refused with exit 2 and a message naming the flag or key.

Each rule of :mod:`runner.config.capvalues` is tested once, on the parser; each door (every
flag, the API, the mapping form) is tested once with a refused value: the parser does not
depend on where a value came from, and every flag goes through the same ``CapValue`` type."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from runner import api
from runner.cli import cli
from runner.cli.options import CAP_FLAGS, CapValue
from runner.config.capvalues import CapValueError, cap_bounds, coerce_cap, coerce_caps
from runner.config.specs import CAP_NAMES, Caps
from runner.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests/runs/project"
PROJECT = SOURCE  # a copy while this module's tests run (_copied_project): runs write state into their root


@pytest.fixture(autouse=True, scope="module")
def _copied_project(tmp_path_factory: pytest.TempPathFactory) -> None:
    global PROJECT
    PROJECT = shutil.copytree(SOURCE, tmp_path_factory.mktemp("cap_values") / "project")
RUN_FLAGS = [(name, "--" + name.replace("_", "-")) for name, _ in CAP_FLAGS]
BATCH_FLAGS = [("max_cost_usd", "--max-cost-usd"), ("max_tokens", "--max-tokens"),
               ("max_wall_seconds", "--max-wall-seconds"), ("max_cost_usd", "--row-max-cost-usd"),
               ("max_steps", "--row-max-steps")]  # fmt: skip
# one value per rule of the parser (capvalues.py): spelled-out non-finite numbers in any case and
# sign, overflow to infinity, text that is not a decimal number (empty, "None", a boolean word,
# hex, underscores, a comma, two dots, a non-ASCII numeral), negatives down to tiny ones
NOT_FINITE = ["NaN", "-inf", "+Infinity", "1e999"]
NOT_NUMBERS = ["abc", "", " ", "None", "true", "0x10", "1_000", "1,5", "1.2.3", "½"]
NEGATIVE = ["-1", "-1e-9"]
REFUSED = NOT_FINITE + NOT_NUMBERS + NEGATIVE
# the flags' wiring: each flag refuses a value (cycling through the rules, so each flag meets a different one)
FLAG_VALUES = ["nan", "-1", "abc", "inf", "None", "1e999", "0x10"]
ZERO_REFUSED = {"max_steps", "max_input_tokens", "max_output_tokens", "max_tokens", "max_wall_seconds"}


def invoke(*args: str, catch: bool = False) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=catch)


def batch_args(flag: str, value: str) -> list[str]:
    return ["batch", "sum", "--root", str(PROJECT), "--input", str(REPO / "pyproject.toml"), "--output", "out.jsonl",
            f"{flag}={value}"]  # fmt: skip


@pytest.mark.parametrize(("cap", "flag", "value"), [(*f, FLAG_VALUES[i % len(FLAG_VALUES)]) for i, f in enumerate(RUN_FLAGS)])
def test_run_refuses_bad_cap_values(cap: str, flag: str, value: str) -> None:
    result = invoke("run", "sum", "--root", str(PROJECT), f"{flag}={value}")
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}'" in result.output and "give " in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("cap", "flag", "value"), [(*f, FLAG_VALUES[i % len(FLAG_VALUES)]) for i, f in enumerate(BATCH_FLAGS)])
def test_batch_refuses_bad_cap_values_including_row_caps(cap: str, flag: str, value: str) -> None:
    result = invoke(*batch_args(flag, value))
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}'" in result.output


@pytest.mark.parametrize(("cap", "flag"), RUN_FLAGS + BATCH_FLAGS)
def test_zero_is_refused_where_it_would_forbid_every_call(cap: str, flag: str) -> None:
    args = batch_args(flag, "0") if (cap, flag) in BATCH_FLAGS else ["run", "sum", "--root", str(PROJECT), f"{flag}=0"]
    result = invoke(*args, catch=True)  # an accepted value goes on to the command, which then fails on its input
    if cap in ZERO_REFUSED:
        assert result.exit_code == 2 and "out of range" in result.output, result.output
    else:
        assert "Invalid value" not in result.output  # max_tool_calls=0: no tools; max_cost_usd=0: free models only
        assert result.exception is not None and "Invalid value" not in str(result.exception)


@pytest.mark.parametrize(("flag", "value"), [("--rpm", "nan"), ("--rpm", "0"), ("--tpm", "inf"), ("--tpm", "-1"), ("--tpm", "abc")])
def test_batch_rate_limits_refuse_non_finite_values(flag: str, value: str) -> None:
    result = invoke(*batch_args(flag, value))
    assert result.exit_code == 2 and f"Invalid value for '{flag}'" in result.output, result.output


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", "sum", "--max-cost-usd", "nan"], "--max-cost-usd"),
        (["batch", "sum", "--input", "pyproject.toml", "--output", "o.jsonl", "--row-max-steps", "-1"], "--row-max-steps"),
    ],
)
def test_the_real_cli_exits_2_naming_the_flag(argv: list[str], flag: str, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("x")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "runner", *argv], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert flag in result.stderr and "Traceback" not in result.stderr


# --------------------------------------------------------------------------- the parser itself


@pytest.mark.parametrize(
    ("cap", "value", "expected"),
    [
        ("max_cost_usd", "0.25", 0.25), ("max_cost_usd", " 1e-3 ", 0.001), ("max_cost_usd", 2, 2.0),
        ("max_cost_usd", "0", 0.0), ("max_cost_usd", "-0", 0.0), ("max_cost_usd", ".5", 0.5),
        ("max_steps", "10", 10), ("max_steps", 10.0, 10), ("max_steps", "1e3", 1000), ("max_steps", "+7", 7),
        ("max_tool_calls", "0", 0), ("max_tokens", 200000, 200000), ("max_wall_seconds", "0.5", 0.5),
    ],
)  # fmt: skip
def test_accepted_values(cap: str, value: object, expected: float) -> None:
    parsed = coerce_cap(cap, value)
    assert parsed == expected and type(parsed) is type(expected)
    assert str(parsed) != "-0.0"


@pytest.mark.parametrize(
    "value", [*REFUSED, float("nan"), float("inf"), -float("inf"), -1, True, False, [1], {"v": 1}, b"1", 10**400, -(10**400)]
)
def test_refused_values(value: object) -> None:
    """On ``max_cost_usd``, the cap that accepts the most (zero and fractions): the refusal is the value's."""
    with pytest.raises(CapValueError, match="; give "):
        coerce_cap("max_cost_usd", value)


@pytest.mark.parametrize("cap", CAP_NAMES)
def test_every_cap_refuses_negatives_and_non_numbers(cap: str) -> None:
    for value in ("-1", "nan", "abc"):
        with pytest.raises(CapValueError, match="; give "):
            coerce_cap(cap, value)


def test_bounds_come_from_the_yaml_schema_and_match_the_flag_types() -> None:
    assert coerce_cap("max_steps", "100000") == 100000
    with pytest.raises(CapValueError, match="out of range"):
        coerce_cap("max_steps", "100001")
    with pytest.raises(CapValueError, match="out of range"):
        coerce_cap("max_wall_seconds", 604801)
    with pytest.raises(CapValueError, match="whole number"):
        coerce_cap("max_tokens", "2.5")
    for name in CAP_NAMES:
        assert (CapValue(name).name == "integer") == cap_bounds(name).integer


def test_cap_value_type_names_the_flag_through_click() -> None:
    with pytest.raises(click.BadParameter, match="'nan' is not a finite number"):
        CapValue("max_cost_usd").convert("nan", None, None)


def test_coerce_caps_reads_airflow_rendered_strings() -> None:
    rendered = {"max_cost_usd": "0.50", "max_steps": "12", "max_wall_seconds": " 300 ", "max_tokens": None}
    assert coerce_caps(rendered) == Caps(max_cost_usd=0.5, max_steps=12, max_wall_seconds=300.0)
    assert coerce_caps(None) == Caps() and coerce_caps({}) == Caps()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_cost_usd": "nan"}, r"caps\.max_cost_usd: 'nan' is not a finite number"),
        ({"max_cost_usd": "None"}, r"caps\.max_cost_usd: 'None' is not a number \(to set no cap, leave it out\)"),
        ({"max_steps": "-3"}, r"caps\.max_steps: '-3' is out of range; give a whole number of model calls, at least 1"),
        ({"max_cost": 1}, r"caps: unknown cap 'max_cost'\. Did you mean 'max_cost_usd'\?"),
        ({"max_tokens": True}, r"caps\.max_tokens: True is a boolean"),
        (["max_steps", 3], r"caps: expected a mapping"),
    ],
)
def test_coerce_caps_errors_name_the_key_and_the_fix(values: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message) as info:
        coerce_caps(values)
    assert info.value.exit_code == 2


def test_the_python_api_refuses_bad_caps_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"caps\.max_cost_usd: 'inf' is not a finite number"):
        api.run_task("sum", root=PROJECT, inputs={"a": 1}, caps={"max_cost_usd": "inf"}, store_path=tmp_path / "s.db")
    with pytest.raises(UsageError, match=r"row_caps\.max_steps: '-1' is out of range"):
        api.run_batch("sum", root=PROJECT, input_path=REPO / "pyproject.toml", output_path=tmp_path / "o.jsonl",
                      row_caps={"max_steps": "-1"})  # fmt: skip
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "o.jsonl").exists()
