"""Claude through the native Messages API, as a real ``runner`` process against the strict
Anthropic server: the shipped triage task live and through Message Batches (``--via
batch-api``: batch prices, split by the limits, resumed after ``kill -9`` without a second
batch or bill). Every body sent is checked against the anthropic package's own types."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.model.anthropic_server import AnthropicServer
from runner.model.batch_endpoints import BatchBehaviour
from tests.cli.anthropic_project import (
    ANTHROPIC_KEY,
    LIVE_COST,
    SCRIPT,
    TRIAGE,
    anthropic_env,
    checked_requests,
    claude_project,
    records,
    runner,
    tickets,
    triage_agent,
)
from tests.support.project import copy_shipped

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return claude_project(tmp_path / "project")


def _via_api(source: Path, out: Path, *extra: str) -> list[str]:
    return ["batch", "triage_ticket", "--input", str(source), "--output", str(out), "--id-column", "id", "--via", "batch-api",
            "--batch-poll-seconds", "0.01", "--progress", "none", *extra]  # fmt: skip


def test_the_triage_task_runs_live_on_claude_with_only_the_anthropic_key_sent(project: Path) -> None:
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY) as server:
        result = runner(project, anthropic_env(server), "run", "triage_ticket", "-i", "subject=Crash", "-i", "body=It crashes", "--json")
        assert result.returncode == 0, result.stderr
        (body,) = checked_requests(server)
        (sent,) = server.requests
    finished = json.loads(result.stdout.splitlines()[-1])
    assert finished["status"] == "completed" and finished["cost_usd"] == pytest.approx(LIVE_COST)
    assert sent.auth_fingerprint == AnthropicServer.key_fingerprint(ANTHROPIC_KEY)  # not OPENAI_API_KEY
    assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] == 200
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}


def test_extra_headers_reach_the_anthropic_endpoint_and_a_key_header_is_refused(tmp_path: Path) -> None:
    model = "{id: claude-haiku-4-5, provider: anthropic, max_tokens: 200, extra_headers: {%s}}"
    beta = copy_shipped(tmp_path / "beta", files={"agents.d/triage.yaml": triage_agent(model % "anthropic-beta: files-api-2025-04-14, X-Team: triage")})
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY) as server:
        result = runner(beta, anthropic_env(server), "run", "triage_ticket", "-i", "subject=Crash", "-i", "body=It crashes", "--json")
        assert result.returncode == 0, result.stderr
        checked_requests(server)
        (sent,) = server.requests
    assert (sent.headers["anthropic-beta"], sent.headers["x-team"]) == ("files-api-2025-04-14", "triage")
    assert sent.auth_fingerprint == AnthropicServer.key_fingerprint(ANTHROPIC_KEY)
    keyed = copy_shipped(tmp_path / "keyed", files={"agents.d/triage.yaml": triage_agent(model % "x-api-key: sk-ant-other-0123456789")})
    refused = runner(keyed, anthropic_env(server), "validate")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "triage.yaml" in refused.stdout + refused.stderr and "/model/extra_headers/x-api-key" in refused.stdout + refused.stderr


def test_extra_headers_go_with_every_message_batches_request(tmp_path: Path) -> None:
    model = "{id: claude-haiku-4-5, provider: anthropic, max_tokens: 200, extra_headers: {anthropic-beta: files-api-2025-04-14}}"
    root = copy_shipped(tmp_path / "beta", files={"agents.d/triage.yaml": triage_agent(model)})
    source, out = tickets(root, 2), root / "out.jsonl"
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY, batch=BatchBehaviour(polls=1)) as server:
        result = runner(root, anthropic_env(server), *_via_api(source, out))
        assert result.returncode == 0, result.stderr
        sent = server.requests
        checked_requests(server)
    assert len(server.message_batches) == 1 and all(r["status"] == "done" for r in records(out).values())
    assert sent and all(r.path.startswith("/v1/messages/batches") for r in sent)  # create, polls, results: nothing live
    assert all(r.headers.get("anthropic-beta") == "files-api-2025-04-14" for r in sent), [(r.path, r.headers) for r in sent]


def test_the_triage_batch_goes_out_as_one_message_batch_at_half_price(project: Path) -> None:
    source, out = tickets(project, 5), project / "out.jsonl"
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY, batch=BatchBehaviour(polls=2)) as server:
        result = runner(project, anthropic_env(server), *_via_api(source, out, "--json"))
        assert result.returncode == 0, result.stderr
        requests = checked_requests(server)
        assert len(server.message_batches) == 1 and len(server.billed) == 5
        assert not [r for r in server.requests if r.path == "/v1/messages"]  # nothing sent live
    assert len(requests) == 5 and len({r["custom_id"] for r in requests}) == 5
    rows = records(out)
    assert all(r["status"] == "done" and r["output"] == TRIAGE for r in rows.values())
    assert all(r["cost_usd"] == pytest.approx(LIVE_COST / 2) for r in rows.values())
    assert json.loads(result.stdout)["cost_usd"] == pytest.approx(5 * LIVE_COST / 2)


def test_results_for_requests_a_message_batch_was_not_sent_are_ignored_and_named(project: Path) -> None:
    source, out = tickets(project, 2), project / "out.jsonl"
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY, batch=BatchBehaviour(polls=1, stray_lines=1)) as server:
        result = runner(project, anthropic_env(server), *_via_api(source, out))
        assert result.returncode == 0, result.stderr
        assert len(server.billed) == 2
    assert "answered 1 request(s) it was not sent (stray-1): ignored" in result.stderr
    rows = records(out)
    assert len(rows) == 2 and all(r["status"] == "done" and r["cost_usd"] == pytest.approx(LIVE_COST / 2) for r in rows.values())


def test_a_round_larger_than_the_limit_is_split_over_message_batches(project: Path) -> None:
    source, out = tickets(project, 5), project / "out.jsonl"
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY, batch=BatchBehaviour(polls=1)) as server:
        result = runner(project, anthropic_env(server), *_via_api(source, out, "--batch-max-requests", "2"))
        assert result.returncode == 0, result.stderr
        sizes = [len(b.requests) for b in sorted(server.message_batches.values(), key=lambda b: b.id)]
        assert len(server.billed) == 5
        checked_requests(server)
    assert sizes == [2, 2, 1]
    assert all(r["status"] == "done" for r in records(out).values())


def _killed_at(point: str, server: AnthropicServer, argv: list[str], root: Path, env: dict[str, str], never: str) -> None:
    """Run ``argv``, kill it with SIGKILL once the server holds a request at ``point`` (``never``:
    the failure if it is not reached), then let the server go on."""
    process = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_until(lambda: server.holding(point) > 0), never
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    server.release()


def _wait_until(condition: object, seconds: float = 120) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("point", ["created", "output"])
def test_kill_9_with_a_message_batch_out_then_the_same_command_resumes_onto_it(project: Path, point: str) -> None:
    """Killed after the batch was created (its id maybe not recorded yet) or while reading its
    results: the rerun finds the same batch, creates none, and bills each row once."""
    source, out = tickets(project, 3), project / "out.jsonl"
    journal = project / "journal.sqlite3"
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY, batch=BatchBehaviour(polls=1, hold=frozenset({point}))) as server:
        env = anthropic_env(server)
        argv = [sys.executable, "-m", "runner", *_via_api(source, out, "--journal", str(journal))]
        _killed_at(point, server, argv, project, env, f"never reached {point}")
        resumed = runner(project, env, *_via_api(source, out, "--journal", str(journal)))
        assert resumed.returncode == 0, resumed.stderr
        assert len(server.message_batches) == 1  # the same batch, re-attached: none created twice
        assert len(server.billed) == 3  # each row answered (and paid for) once
        checked_requests(server)
    rows = records(out)
    assert sorted(rows) == ["t1", "t2", "t3"] and all(r["status"] == "done" and r["output"] == TRIAGE for r in rows.values())
    assert all(r["cost_usd"] == pytest.approx(LIVE_COST / 2) for r in rows.values())


def test_kill_9_while_a_split_round_goes_out_then_the_rerun_bills_each_row_once(project: Path) -> None:
    """Five rows at two requests a Message Batch: killed once the first batch is created, the other
    calls still queued (in no batch). The rerun collects the first batch, sends the rest, and no
    row keeps a killed call's worst case."""
    source, out, journal = tickets(project, 5), project / "out.jsonl", project / "journal.sqlite3"
    argv = [sys.executable, "-m", "runner", *_via_api(source, out, "--journal", str(journal), "--batch-max-requests", "2")]
    held = BatchBehaviour(polls=1, hold=frozenset({"created"}))
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY, batch=held, max_requests=2) as server:  # a bigger batch is a 413
        env = anthropic_env(server)
        _killed_at("created", server, argv, project, env, "the first batch was never created")
        resumed = runner(project, env, *argv[3:])
        assert resumed.returncode == 0, resumed.stderr
        sizes = [len(b.requests) for b in sorted(server.message_batches.values(), key=lambda b: b.id)]
        assert len(server.billed) == 5  # each row answered (and paid for) once
        billed = server.billed_usd(batch=True)
        checked_requests(server)
    assert sizes == [2, 2, 1]  # the killed process's batch, re-attached, then the calls it never sent
    rows = records(out)
    assert len(rows) == 5 and all(r["status"] == "done" and r["output"] == TRIAGE for r in rows.values())
    assert all(r["cost_usd"] == pytest.approx(LIVE_COST / 2) for r in rows.values())  # no worst case left counted
    assert sum(r["cost_usd"] for r in rows.values()) == pytest.approx(billed)


def test_a_retry_that_lost_the_run_store_but_kept_the_journal_takes_the_message_batchs_answers(project: Path) -> None:
    """A retry on a worker without the disk that held the run store (the journal elsewhere): the
    batch's hashed ``custom_id``s name no call, yet each resumed call takes its own answer: no
    second batch, nothing paid twice."""
    source, out = tickets(project, 3), project / "out.jsonl"
    journal = project.parent / "shared" / "journal.sqlite3"
    journal.parent.mkdir()
    with AnthropicServer(SCRIPT, api_key=ANTHROPIC_KEY, batch=BatchBehaviour(polls=1, hold=frozenset({"output"}))) as server:
        env = anthropic_env(server)
        argv = [sys.executable, "-m", "runner", *_via_api(source, out, "--journal", str(journal))]
        _killed_at("output", server, argv, project, env, "the batch's results were never read")
        for stale in (project / ".runner").glob("runs.sqlite3*"):
            stale.unlink()  # the run store, and with it the record of which call each line answers
        resumed = runner(project, env, *_via_api(source, out, "--journal", str(journal)))
        assert resumed.returncode == 0, resumed.stderr
        assert len(server.message_batches) == 1 and len(server.billed) == 3  # no second batch: each row paid once
    rows = records(out)
    assert sorted(rows) == ["t1", "t2", "t3"] and all(r["status"] == "done" and r["output"] == TRIAGE for r in rows.values())
    assert all(r["cost_usd"] == pytest.approx(LIVE_COST / 2) for r in rows.values()), [r.get("cost_usd") for r in rows.values()]


def test_a_tool_using_agent_runs_its_rounds_through_message_batches() -> None:
    """Three rounds per row (a sandboxed python tool call, a refused answer, its repair), each
    round one Message Batch; the tool results go back as tool_result blocks."""
    from tests.cli.rounds_project import AGENT, ROUNDS, numbers, rounds_project
    from tests.cli.rounds_project import SCRIPT as ROUNDS_SCRIPT

    with rounds_project() as root:
        agent = AGENT.replace("model: {id: gpt-4o-mini, max_tokens: 50}", "model: {id: claude-haiku-4-5, provider: anthropic, max_tokens: 50}")
        (root / "agents.d/calc.yaml").write_text(agent)
        source, out = numbers(root, 3), root / "out.jsonl"
        with AnthropicServer(ROUNDS_SCRIPT, api_key=ANTHROPIC_KEY, batch=BatchBehaviour(polls=1)) as server:
            argv = [arg if arg != "triage_ticket" else "compute" for arg in _via_api(source, out)]
            result = runner(root, anthropic_env(server), *argv)
            assert result.returncode == 0, result.stderr
            requests = checked_requests(server)
            assert len(server.message_batches) == ROUNDS and len(server.billed) == 3 * ROUNDS
        rows = records(out)
    assert all(r["status"] == "done" and r["output"] == {"answer": 42} for r in rows.values())
    results = [block for r in requests for m in r["params"]["messages"] for block in m["content"] if block["type"] == "tool_result"]
    assert results and all("42" in str(block["content"]) for block in results)


@pytest.mark.parametrize("point", ["created", "output"])
def test_kill_9_in_a_later_tool_round_then_the_rerun_sends_no_round_twice(point: str) -> None:
    """The tool-using agent killed in its second round (its Message Batch just created, or its
    results being read): the rerun re-attaches to that batch, answers the first round from the
    store, and each row's call of each round is made (and paid for) once, at the batch price."""
    from tests.cli.rounds_project import AGENT, ROUNDS, numbers, rounds_project
    from tests.cli.rounds_project import SCRIPT as ROUNDS_SCRIPT

    with rounds_project() as root:
        agent = AGENT.replace("model: {id: gpt-4o-mini, max_tokens: 50}", "model: {id: claude-haiku-4-5, provider: anthropic, max_tokens: 50}")
        (root / "agents.d/calc.yaml").write_text(agent)
        source, out, journal = numbers(root, 3), root / "out.jsonl", root / "journal.sqlite3"
        argv = [arg if arg != "triage_ticket" else "compute" for arg in _via_api(source, out, "--journal", str(journal))]
        held = BatchBehaviour(polls=1, hold=frozenset({point}), hold_after=2)  # the second round's batch exists
        with AnthropicServer(ROUNDS_SCRIPT, api_key=ANTHROPIC_KEY, batch=held) as server:
            env = anthropic_env(server)
            _killed_at(point, server, [sys.executable, "-m", "runner", *argv], root, env, f"never reached {point} in the second round")
            resumed = runner(root, env, *argv)
            assert resumed.returncode == 0, resumed.stderr
            assert len(server.message_batches) == ROUNDS and len(server.billed) == 3 * ROUNDS  # no round twice
            billed = server.billed_usd(batch=True)
            checked_requests(server)
        rows = records(out)
    assert len(rows) == 3 and all(r["status"] == "done" and r["output"] == {"answer": 42} for r in rows.values())
    assert sum(r["cost_usd"] for r in rows.values()) == pytest.approx(billed)  # nothing left at a worst case


def test_temperature_on_claude_is_a_located_validate_error(tmp_path: Path) -> None:
    """The Messages API no longer defines temperature: refused at validate, not as a 400 on row 1."""
    from tests.cli.anthropic_project import triage_agent
    from tests.support.project import copy_shipped, runner_env

    agent = triage_agent("{id: claude-haiku-4-5, provider: anthropic, temperature: 0, max_tokens: 200}")
    root = copy_shipped(tmp_path / "project", files={"agents.d/triage.yaml": agent})
    result = runner(root, runner_env(None, extra={"ANTHROPIC_API_KEY": ANTHROPIC_KEY}), "validate")
    assert result.returncode == 2
    assert "agents.d/triage.yaml:6:" in result.stdout and "/model/temperature" in result.stdout and "claude" in result.stdout
