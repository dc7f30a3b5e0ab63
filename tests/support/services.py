"""Tests that need a service the machine may lack: skipped with the reason, failed under CI.

A developer without PostgreSQL, bubblewrap, Chromium, Airflow, the embedded model or Arize
Phoenix still runs the rest of the suite; CI (``$CI`` set, as CI systems do) installs every one
of them (``.ci/run``), so there a missing service -- or one of our own modules that no longer
imports -- is a failure, never a silent skip.

* :func:`missing` - in a test or fixture: skip, or fail under CI;
* :func:`import_or_missing` - ``pytest.importorskip`` with that rule;
* :func:`requires` - a marker for a condition known at collection (``@requires(has_bwrap, "...")``).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

MARKER = "needs_service"


def under_ci() -> bool:
    """Whether the tests run under CI: ``$CI`` set to anything but empty, ``0`` or ``false``."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(reason: str) -> NoReturn:
    """Skip the current test (or module, at collection) because a service is missing; fail under CI."""
    if under_ci():
        pytest.fail(f"{reason} (CI installs every service: a missing one is a failure)", pytrace=False)
    pytest.skip(reason)


def import_or_missing(name: str, reason: str | None = None) -> ModuleType:
    """The module ``name``, or :func:`missing` when it cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"{reason or f'{name} is not installed'} ({exc})")


def requires(available: bool, reason: str) -> pytest.MarkDecorator:
    """A marker: the test runs when ``available``; otherwise it is skipped, or failed under CI
    (``tests/conftest.py`` applies it before the test's fixtures are set up)."""
    return getattr(pytest.mark, MARKER)(available=available, reason=reason)


def check_marked(item: pytest.Item) -> None:
    """Apply the :func:`requires` markers of ``item`` (called from ``pytest_runtest_setup``)."""
    for mark in item.iter_markers(MARKER):
        if not mark.kwargs["available"]:
            missing(mark.kwargs["reason"])
