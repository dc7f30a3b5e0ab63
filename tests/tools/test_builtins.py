"""Happy paths and refusals of the small built-ins: python, shell, calculator, current_time, terminate."""

from __future__ import annotations

import math

import pytest

from runner.errors import ToolFailure
from runner.tools.builtins.calculator import evaluate

pytestmark = pytest.mark.timeout(60)


async def test_python_runs_code_in_the_workspace(registry, ctx, workspace):
    (workspace / "input.txt").write_text("3 4 5")
    code = "nums = [int(x) for x in open('input.txt').read().split()]\nprint(sum(nums))\nopen('out.txt', 'w').write('done')"
    result = await registry.invoke("python", {"code": code}, ctx)
    assert "exit code 0" in result.content and "12" in result.content
    assert result.data["stdout"] == "12\n"
    assert (workspace / "out.txt").read_text() == "done"


async def test_python_errors_are_failures_with_the_traceback(registry, ctx):
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("python", {"code": "raise ValueError('boom')"}, ctx)
    assert "exit code 1" in str(failure.value) and "ValueError: boom" in str(failure.value)


async def test_shell_runs_commands_in_the_workspace(registry, ctx, workspace):
    (workspace / "a.txt").write_text("one two three\n")
    result = await registry.invoke("shell", {"command": "wc -w < a.txt && pwd"}, ctx)
    assert result.data["stdout"].split() == ["3", "/workspace"]


async def test_timeout_setting_overrides_the_wall_clock_limit(registry, make_ctx):
    ctx = make_ctx(settings={"shell": {"timeout_seconds": 1}})
    with pytest.raises(ToolFailure, match="wall-clock limit of 1s"):
        await registry.invoke("shell", {"command": "sleep 30"}, ctx)


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 // 2 + 7 % 2", 4),
        ("-3 ** 2", -9),
        ("2 ** 10", 1024),
        ("10 / 4", 2.5),
        ("sqrt(16) + log(e) + factorial(5)", 125.0),
        ("round(pi, 3)", 3.142),
        ("max(1, 5, 3) - min(4, 2)", 3),
        ("atan2(1, 1) * 4", math.pi),
    ],
)
def test_calculator_evaluates_arithmetic(expression, value):
    assert evaluate(expression) == pytest.approx(value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('id')", "unsupported"),
        ("(1).__class__", "unsupported"),
        ("open('x')", "unsupported"),
        ("[1, 2]", "unsupported"),
        ("'a' * 3", "unsupported"),
        ("9 ** 9 ** 9", "too large"),
        ("2 ** 100000", "too large"),
        ("factorial(100000)", "factorial needs"),
        ("1 / 0", "division by zero"),
        ("10.0 ** 400", "cannot evaluate"),
        ("sqrt(-1)", "cannot evaluate"),
        ("lambda: 1", "unsupported"),
        ("1 +", "not a valid expression"),
        ("-" * 400 + "1", None),
    ],
)
def test_calculator_refuses_anything_else(expression, message):
    if message is None:
        assert evaluate(expression) == 1
        return
    with pytest.raises(ToolFailure, match=message):
        evaluate(expression)


async def test_calculator_tool(registry, ctx):
    result = await registry.invoke("calculator", {"expression": "2 ** 0.5"}, ctx)
    assert result.data["value"] == pytest.approx(math.sqrt(2))


async def test_current_time_in_a_time_zone(registry, ctx):
    result = await registry.invoke("current_time", {"timezone": "Asia/Tokyo"}, ctx)
    assert result.data["iso"].endswith("+09:00")
    with pytest.raises(ToolFailure, match="unknown time zone"):
        await registry.invoke("current_time", {"timezone": "Mars/Olympus"}, ctx)


async def test_terminate_carries_the_answer(registry, ctx):
    assert registry.get("terminate").terminates
    result = await registry.invoke("terminate", {"answer": "42"}, ctx)
    assert result.content == "42"
    assert result.data == {"answer": "42", "status": "success"}
    failed = await registry.invoke("terminate", {"answer": "could not", "status": "failure"}, ctx)
    assert failed.data["status"] == "failure"
