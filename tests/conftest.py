"""Suite-wide guards: no test reaches a real model endpoint or a shared database by accident.

The environment's OpenAI variables are removed for every test; tests that need an endpoint
start the loopback server (``runner.model.server.ScriptedServer``) and set them explicitly.
``RUNNER_STORE_URL`` is removed too: tests that run on PostgreSQL get their own database
from the fixtures in :mod:`tests.postgres`.

Two hooks shape the run: every test that needs PostgreSQL, Airflow's ``dag.test()``, a browser,
the embedded model or a process of its own is marked ``slow`` (:mod:`tests.support.tiers`;
``pytest -m "not slow"`` is the fast tier), and a test marked with
:func:`tests.support.services.requires` is skipped without its service, or failed under CI.
A watchdog (:mod:`tests.support.watchdog`) ends the run with every thread's stack if a test
outlives its timeout: a hang fails CI at once, with the place, instead of at CI's limit.
"""

from __future__ import annotations

import signal
from collections.abc import Generator

import pytest

from tests.support import watchdog
from tests.support.services import check_marked
from tests.support.tiers import slow_reason

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # Started as a background job of a non-interactive shell (`cmd &` in a script): SIGINT is
    # ignored, and every process the tests start would inherit that, so the tests that interrupt
    # a runner with Ctrl-C would wait on one that cannot hear it. Python's own handler here is
    # reset to the default in each child, as in a terminal.
    signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = ["tests.postgres"]
_WATCHDOG_FD = pytest.StashKey[int]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        reason = slow_reason(item)
        if reason is not None:
            item.add_marker(pytest.mark.slow(reason=reason))


def pytest_runtest_setup(item: pytest.Item) -> None:
    check_marked(item)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_WATCHDOG_FD] = watchdog.stderr_copy()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    watchdog.arm(item, item.config.stash[_WATCHDOG_FD])
    try:
        return (yield)
    finally:
        watchdog.disarm()


@pytest.fixture(autouse=True)
def no_real_model_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def no_shared_store(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RUNNER_STORE_URL", "RUNNER_STORE_CONN_ID", "RUNNER_REPORTS_DIR", "RUNNER_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
