"""Built-in ``calculator``: arithmetic over a whitelist of ``ast`` nodes, never ``eval``.

Numbers, ``+ - * / // % **``, parentheses, unary signs, a few constants and common
``math`` functions. Sizes are bounded so an expression cannot exhaust memory or CPU:
integers stay under :data:`MAX_INT_BITS` bits and ``factorial`` under :data:`MAX_FACTORIAL`.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from runner.errors import ToolFailure
from runner.tools.base import ToolResult, tool

MAX_EXPRESSION_CHARS = 500
MAX_INT_BITS = 4096
MAX_FACTORIAL = 1000
Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}  # fmt: skip
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _factorial(n: Number) -> int:
    if not float(n).is_integer() or not 0 <= n <= MAX_FACTORIAL:
        raise ToolFailure(f"factorial needs an integer from 0 to {MAX_FACTORIAL}, got {n}")
    return math.factorial(int(n))


_FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs, "round": round, "min": min, "max": max,
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log10": math.log10, "log2": math.log2,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos,
    "atan": math.atan, "atan2": math.atan2, "sinh": math.sinh, "cosh": math.cosh,
    "tanh": math.tanh, "hypot": math.hypot, "degrees": math.degrees, "radians": math.radians,
    "floor": math.floor, "ceil": math.ceil, "factorial": _factorial,
}  # fmt: skip


@tool(blocking=False)  # bounded arithmetic, no I/O: no thread needed
def calculator(expression: str) -> ToolResult:
    """Evaluate an arithmetic expression exactly as written and return the number.

    Supports + - * / // % ** and parentheses, the constants pi, e and tau, and the
    functions abs, round, min, max, sqrt, exp, log, log10, log2, sin, cos, tan, asin,
    acos, atan, atan2, sinh, cosh, tanh, hypot, degrees, radians, floor, ceil, factorial.

    Args:
        expression: The expression, e.g. "(3 + 4) * 2 ** 10 / sqrt(16)".
    """
    value = evaluate(expression)
    return ToolResult(content=f"{expression} = {value!r}", data={"value": value})


def evaluate(expression: str) -> Number:
    """Evaluate ``expression`` (see the module docstring); ToolFailure on anything else."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolFailure(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise ToolFailure(f"not a valid expression: {error.msg}") from None
    try:
        return _eval(tree.body)
    except ZeroDivisionError:
        raise ToolFailure("division by zero") from None
    except (OverflowError, ValueError, TypeError) as error:
        raise ToolFailure(f"cannot evaluate '{expression}': {error}") from None
    except RecursionError:
        raise ToolFailure("expression is nested too deeply") from None


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is not None:
            return _bounded(function(*(_eval(arg) for arg in node.args)))
    raise ToolFailure(f"unsupported element in expression: {ast.unparse(node)!r}")


def _check_power(base: Number, exponent: Number) -> None:
    if not (isinstance(base, int) and isinstance(exponent, int)):
        return  # float powers overflow to an error instead of growing
    if exponent > 0 and abs(base) > 1 and (abs(base).bit_length() - 1) * exponent > MAX_INT_BITS:
        raise ToolFailure(f"result of {base} ** {exponent} is too large (over {MAX_INT_BITS} bits)")


def _bounded(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolFailure(f"unsupported value {value!r}")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolFailure(f"intermediate result too large (over {MAX_INT_BITS} bits)")
    return value
