"""The fast tier: which tests are ``slow``, decided from what a test uses, not from a list.

``tests/conftest.py`` marks a test ``slow`` (``pytest -m "not slow"`` is the fast tier) when it

* uses PostgreSQL: a fixture of :mod:`tests.postgres`, or a parameter whose case is ``"postgresql"``;
* runs Airflow's ``dag.test()`` (the ``airflow_db`` fixture), a deployment (``airflow_deploy``)
  or a seeded SQL server (``postgres``);
* drives a browser (``browser``) or the embedded model (``local_model``);
* starts a process: the test function, a fixture it uses, or a function or class of the test
  suite either of them names (followed transitively) refers to the ``subprocess`` module,
  ``asyncio.create_subprocess_exec`` or the suite's :func:`~tests.support.project.run_cli`.

The walk reads code objects' names, so a helper that starts a process is found wherever it
lives in ``tests/``. Processes started inside ``runner`` itself (the sandbox, an MCP server)
are not seen: the few suites where they dominate, and in-process tests that run for seconds
(patterns and templates run to their time limits), carry ``@pytest.mark.slow(reason=...)``.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

SLOW_MARKERS = ("browser", "local_model", "airflow_deploy", "postgres")
SLOW_FIXTURES = {"postgres_server": "PostgreSQL", "airflow_db": "Airflow dag.test()"}
PROCESS_NAMES = frozenset({"subprocess", "Popen", "run_cli", "create_subprocess_exec", "create_subprocess_shell"})


def slow_reason(item: pytest.Item) -> str | None:
    """Why ``item`` is not in the fast tier, or ``None`` when it is."""
    for name in SLOW_MARKERS:
        if item.get_closest_marker(name):
            return name
    fixtures = set(getattr(item, "fixturenames", ()))
    for name, reason in SLOW_FIXTURES.items():
        if name in fixtures:
            return reason
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(value == "postgresql" for value in callspec.params.values()):
        return "PostgreSQL"  # the postgresql case of a backend parameter (it asks for postgres_url when it runs)
    if any(_starts_processes(function) for function in _functions_of(item)):
        return "starts processes"
    return None


def _functions_of(item: pytest.Item) -> Iterator[object]:
    """The test function and the functions of the fixtures it uses."""
    yield getattr(item, "function", None)
    info = getattr(item, "_fixtureinfo", None)
    for definitions in (info.name2fixturedefs.values() if info is not None else ()):
        for definition in definitions:
            yield definition.func


@cache
def _starts_processes(target: object) -> bool:
    code = getattr(inspect.unwrap(target), "__code__", None) if callable(target) else None  # type: ignore[arg-type]
    if code is None:
        return False
    scope = getattr(inspect.unwrap(target), "__globals__", {})  # type: ignore[arg-type]
    return any(_code_starts_processes(code, scope, seen=set()))


def _code_starts_processes(code: types.CodeType, scope: dict[str, object], seen: set[object]) -> Iterator[bool]:
    if code in seen:
        return
    seen.add(code)
    yield not PROCESS_NAMES.isdisjoint(code.co_names)
    for constant in code.co_consts:  # nested functions, lambdas and comprehensions
        if isinstance(constant, types.CodeType):
            yield from _code_starts_processes(constant, scope, seen)
    for name in code.co_names:
        for function in _suite_functions(scope.get(name)):
            yield from _code_starts_processes(function.__code__, function.__globals__, seen)


def _suite_functions(value: object) -> Iterator[types.FunctionType]:
    """``value`` (or its methods, for a class) when the test suite defines it."""
    if isinstance(value, type):
        for member in vars(value).values():
            member = getattr(member, "__func__", member)  # static and class methods
            if isinstance(member, property):
                member = member.fget
            if isinstance(member, types.FunctionType) and _in_suite(member):
                yield member
        return
    function = inspect.unwrap(value) if callable(value) else None  # type: ignore[arg-type]
    if isinstance(function, types.FunctionType) and _in_suite(function):
        yield function


def _in_suite(function: types.FunctionType) -> bool:
    return Path(function.__code__.co_filename).is_relative_to(TESTS)
