"""Input values a person (or a batch row) may send that only look like numbers: digits of other
scripts (Python's ``int`` reads "５" as 5), integers too large for the stores, and digit strings
longer than Python converts (a ``ValueError`` that used to end ``runner run`` with a traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config.coerce import coerce_input
from runner.config.specs import InputSpec
from runner.errors import InputError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("type_", "raw", "said"),
    [
        ("integer", "５", "expected an integer, got '５'"),
        ("integer", "٣", "expected an integer, got '٣'"),
        ("integer", "9" * 5000, "expected an integer, got '999"),
        ("integer", str(2**63), "expected an integer from -2^63 to 2^63-1"),
        ("integer", 2**70, "expected an integer from -2^63 to 2^63-1"),
        ("number", "１.５", "expected a finite number"),
        ("number", "9" * 5000, "expected a finite number"),
        ("date", "２０２６-０１-０１", "expected a date"),
    ],
)
def test_values_that_only_look_like_numbers_are_refused(type_: str, raw: object, said: str) -> None:
    with pytest.raises(InputError) as refused:
        coerce_input(InputSpec(name="v", type=type_), raw, source="--input")
    assert said in str(refused.value)


def test_the_int64_edges_are_kept_and_a_larger_number_is_a_float() -> None:
    assert coerce_input(InputSpec(name="v", type="integer"), str(2**63 - 1), source="s") == 2**63 - 1
    assert coerce_input(InputSpec(name="v", type="integer"), str(-(2**63)), source="s") == -(2**63)
    assert coerce_input(InputSpec(name="v", type="number"), "9" * 25, source="s") == float("9" * 25)


def test_a_5000_digit_input_is_a_usage_error_through_the_cli(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / "agents.d" / "a.yaml").write_text("apiVersion: runner/v1\nkind: Agent\nname: a\nmodel: {id: scripted}\n")
    (root / "tasks.d" / "t.yaml").write_text(
        "apiVersion: runner/v1\nkind: Task\nname: t\nagent: a\ninputs:\n  n: {type: integer}\ngoal: 'Count {{ inputs.n }}'\n"
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "runner", "run", "t", "-i", "n=" + "9" * 5000], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "input 'n': expected an integer" in done.stderr and "Traceback" not in done.stderr
