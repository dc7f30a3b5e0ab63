"""Flags of ``runner batch`` the live engine uses, with ``--via batch-api``: ``--concurrency``
applies (rows in flight, so at most that many rows' calls per round); ``--rpm`` and ``--tpm``
are refused with a usage error naming the flag (a provider batch has no per-minute rate), never
silently ignored -- also when the task's ``mode: batch_api`` chose the provider batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import (
    TRIAGE_SCRIPT,
    batch_inputs,
    chat_calls,
    records,
    row_of,
    tickets,
    triage,
    via_api,
)
from tests.support.project import copy_shipped

SCRIPT = TRIAGE_SCRIPT


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_shipped(tmp_path / "project")


def _refused(result: Any, flag: str, server: ScriptedServer, out: Path) -> None:
    assert result.returncode == 2, result.stderr
    assert flag in result.stderr and "per-minute rate" in result.stderr and "--via live" in result.stderr
    assert "Traceback" not in result.stderr and server.requests == [] and not out.exists()


@pytest.mark.parametrize("flag", ["--rpm", "--tpm"])
def test_a_rate_limit_with_batch_api_is_a_usage_error_naming_the_flag(project: Path, flag: str) -> None:
    source, out = tickets(project, 2), project / "out.jsonl"
    with ScriptedServer(SCRIPT) as server:
        _refused(triage(project, server, *via_api(source, out, flag, "60")), flag, server, out)


def test_both_rate_limits_are_named(project: Path) -> None:
    source, out = tickets(project, 2), project / "out.jsonl"
    with ScriptedServer(SCRIPT) as server:
        result = triage(project, server, *via_api(source, out, "--rpm", "60", "--tpm", "1000"))
        _refused(result, "--rpm, --tpm", server, out)


def test_a_rate_limit_is_refused_with_the_live_fallback_too(project: Path) -> None:
    source, out = tickets(project, 2), project / "out.jsonl"
    with ScriptedServer(SCRIPT) as server:
        _refused(triage(project, server, *via_api(source, out, "--batch-fallback", "live", "--rpm", "60")), "--rpm", server, out)


def test_a_rate_limit_is_refused_when_the_task_mode_chose_the_provider_batch(project: Path) -> None:
    task = project / "tasks.d" / "triage_ticket.yaml"
    task.write_text(task.read_text() + "mode: batch_api\n")
    source, out = tickets(project, 2), project / "out.jsonl"
    common = ("--input", str(source), "--id-column", "id", "--progress", "none", "--batch-poll-seconds", "0.01")
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        _refused(triage(project, server, *common, "--output", str(out), "--tpm", "1000"), "--tpm", server, out)
        live = triage(project, server, *common, "--output", str(out), "--via", "live", "--rpm", "600")  # live: applies
        assert live.returncode == 0, live.stderr
        assert len(chat_calls(server)) == 2 and server.batches.batches_created == 0


def test_concurrency_keeps_each_round_to_that_many_rows(project: Path) -> None:
    source, out = tickets(project, 5), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = triage(project, server, *via_api(source, out, "--concurrency", "2"))
        assert result.returncode == 0, result.stderr
        batches = batch_inputs(server)
        assert chat_calls(server) == []
    assert len(batches) >= 3 and all(1 <= len(lines) <= 2 for lines in batches)
    assert sorted(row_of(line) for lines in batches for line in lines) == [f"t{i}" for i in range(1, 6)]  # each row once
    assert {(r["status"], r["attempts"]) for r in records(out).values()} == {("done", 1)}


def test_without_concurrency_every_row_is_in_the_one_round(project: Path) -> None:
    source, out = tickets(project, 12), project / "out.jsonl"  # more rows than the live default of 8
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as server:
        result = triage(project, server, *via_api(source, out))
        assert result.returncode == 0, result.stderr
        (lines,) = batch_inputs(server)
    assert len(lines) == 12


def test_concurrency_zero_is_a_usage_error(project: Path) -> None:
    source, out = tickets(project, 1), project / "out.jsonl"
    with ScriptedServer(SCRIPT) as server:
        result = triage(project, server, *via_api(source, out, "--concurrency", "0"))
        assert server.requests == []
    assert result.returncode == 2 and "--concurrency" in result.stderr and "Traceback" not in result.stderr
