"""The run store on both backends (SQLite file, PostgreSQL): runs, attempts, steps, the
write-ahead ``reserved`` model calls the caps rely on, tool calls, plans."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runner.core.calls import ModelCallEntry, ToolCallEntry
from runner.core.results import RunResult
from runner.core.steps import StepRecord
from runner.core.usage import Usage
from runner.errors import StoreUnavailable, UsageError
from runner.store.database import redacted_url, resolve_store
from runner.store.runstore import RunStore


@pytest.fixture
def store(store_target: str | Path) -> RunStore:
    opened = RunStore(store_target)
    yield opened
    opened.close()


def call(seq: int, status: str = "ok", usage: Usage | None = None, error: str | None = None) -> ModelCallEntry:
    return ModelCallEntry(
        step_id="main", agent="a", model="gpt-4o-mini", seq=seq, usage=usage or Usage(10, 5, 0, 0.001),
        latency_seconds=0.1, status=status, error=error,
    )  # fmt: skip


def test_a_run_id_seen_before_resumes_with_the_next_attempt(store: RunStore) -> None:
    assert store.start_run("r1", "ask", {"q": "x"}, "sha256:1", {"max_steps": 3}) == 1
    assert store.start_run("r1", "ask", {"q": "x"}, "sha256:1", {}) == 2
    row = store.run("r1")
    assert row is not None and (row["attempts"], row["status"], row["task"]) == (2, "running", "ask")
    with pytest.raises(UsageError, match="belongs to a run of task 'ask'"):
        store.start_run("r1", "ask", {"q": "other"}, "sha256:1", {})
    with pytest.raises(UsageError, match="same task and inputs"):
        store.start_run("r1", "other", {"q": "x"}, "sha256:1", {})


def test_two_workers_starting_one_run_get_different_attempts(store_target: str | Path) -> None:
    stores = [RunStore(store_target) for _ in range(4)]
    attempts: list[int] = []
    gate = threading.Barrier(len(stores))

    def start(one: RunStore) -> None:
        gate.wait()
        attempts.append(one.start_run("shared", "ask", {"q": 1}, "h", {}))

    threads = [threading.Thread(target=start, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for one in stores:
        one.close()
    assert sorted(attempts) == [1, 2, 3, 4]


def test_reserved_calls_count_at_their_worst_case_until_settled(store: RunStore) -> None:
    store.start_run("r", "ask", {}, "h", {})
    worst = Usage(100, 400, 0, 0.25)
    first = store.add_model_call("r", 1, call(1, "reserved", worst))
    second = store.add_model_call("r", 1, call(2, "reserved", worst))
    assert first != second
    assert store.spent("r") == Usage(200, 800, 0, 0.5, 2, 0)
    store.settle_model_call(first, call(1, "ok", Usage(30, 20, 10, 0.01)))
    assert store.spent("r") == Usage(130, 420, 10, 0.26, 2, 0)
    # attempt 2 finds the second call still reserved: the first attempt died with it in flight
    assert store.start_run("r", "ask", {}, "h", {}) == 2
    assert store.unsettled_calls("r") == Usage(100, 400, 0, 0.25, 1)
    assert [c["status"] for c in store.model_calls("r")] == ["ok", "unsettled"]
    assert store.spent("r").cost_usd == pytest.approx(0.26)


def test_a_failed_call_counts_as_a_call_only_when_it_may_have_been_billed(store: RunStore) -> None:
    store.start_run("r", "ask", {}, "h", {})
    store.add_model_call("r", 1, call(1, "error", Usage(), error="400 bad request"))
    store.add_model_call("r", 1, call(2, "error", Usage(50, 200, 0, 0.1), error="timeout"))
    assert store.spent("r") == Usage(50, 200, 0, 0.1, 1, 0)


def test_steps_round_trip_and_only_completed_ones_are_reused(store: RunStore) -> None:
    store.start_run("r", "ask", {}, "h", {})
    done = StepRecord("load", "tool", tool="load_table", status="completed", output="ok", started_at="2026-01-01T00:00:00",
                      usage=Usage(tool_calls=1), data={"rows": 3})  # fmt: skip
    failed = StepRecord("summary", "agent", agent="w", status="failed", error="boom", started_at="2026-01-01T00:00:01")
    store.save_step("r", done)
    store.save_step("r", failed)
    assert set(store.completed_steps("r")) == {"load"}
    assert store.completed_steps("r")["load"].data == {"rows": 3}
    store.save_step("r", StepRecord("summary", "agent", agent="w", status="completed", output="fine",
                                    started_at="2026-01-01T00:00:02", usage=Usage(1, 2, 0, 0.5, 1)))  # fmt: skip
    steps = store.steps("r")
    assert [(s["step_id"], s["status"]) for s in steps] == [("load", "completed"), ("summary", "completed")]
    assert store.completed_steps("r")["summary"].usage.cost_usd == 0.5


def test_finished_runs_are_listed_found_and_remembered(store: RunStore) -> None:
    for run_id, day in (("daily-1", "2026-01-01"), ("daily-2", "2026-01-02")):
        store.start_run(run_id, "daily", {"date": day}, "h", {})
        store.finish_run(RunResult(run_id, "daily", "completed", output={"day": day}, usage=Usage(1, 1, 0, 0.1, 1)), {"k": 1})
    store.start_run("daily-3", "daily", {"date": "2026-01-03"}, "h", {})
    previous = store.previous_completed("daily", "daily-3", {"date": "2026-01-03"})
    assert previous is not None and previous["run_id"] == "daily-2"
    assert store.previous_completed("daily", "daily-2", {"date": "2026-01-02"})["run_id"] == "daily-1"  # type: ignore[index]
    assert sorted(r["run_id"] for r in store.list_runs("daily")) == ["daily-1", "daily-2", "daily-3"]
    assert sorted(store.find_runs("daily-")) == ["daily-1", "daily-2", "daily-3"]
    assert store.find_runs("nothing") == []
    store.abort_run("daily-3", "KeyboardInterrupt: ")
    assert store.run("daily-3")["status"] == "failed"  # type: ignore[index]


def test_tool_calls_and_plans_are_recorded(store: RunStore) -> None:
    store.start_run("r", "ask", {}, "h", {})
    store.add_tool_call("r", 1, ToolCallEntry("main", "a", 1, "calculator", '{"expression": "1+1"}', "ok", 0.01, "2", ("a.png",)))
    store.add_plan("r", 1, {"steps": [{"id": "x"}]}, "first plan")
    assert [(c["name"], c["output_excerpt"]) for c in store.tool_calls("r")] == [("calculator", "2")]
    assert store.spent("r").tool_calls == 1


def test_text_a_database_cannot_hold_is_kept_as_visible_escapes(store: RunStore, backend: str) -> None:
    store.start_run("r", "ask", {}, "h", {})
    store.add_model_call("r", 1, call(1, "error", Usage(), error="bad\x00byte \udcff"))
    (saved,) = store.model_calls("r")
    nul = "\\x00" if backend == "postgresql" else "\x00"  # only PostgreSQL's text cannot hold NUL
    assert saved["error"] == f"bad{nul}byte \\udcff"


def test_a_store_url_that_is_not_postgresql_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = tmp_path / "runs.sqlite3"
    assert resolve_store(default=default) == default
    monkeypatch.setenv("RUNNER_STORE_URL", "mysql://u:hunter22@h/db")
    with pytest.raises(UsageError) as refused:
        resolve_store(default=default)
    assert "hunter22" not in str(refused.value) and "RUNNER_STORE_URL" in str(refused.value)
    assert resolve_store(path=tmp_path / "x.sqlite3", default=default) == tmp_path / "x.sqlite3"  # an explicit path wins
    monkeypatch.setenv("RUNNER_STORE_URL", "postgresql://u@h/db")
    assert resolve_store(default=default) == "postgresql://u@h/db"


def test_the_password_never_reaches_a_message() -> None:
    assert redacted_url("postgresql://runner:s3cret-pw@db:5432/x?password=other&sslmode=require") == (
        "postgresql://runner:***@db:5432/x?password=***&sslmode=require"
    )
    with pytest.raises(StoreUnavailable) as failed:
        RunStore("postgresql://runner:s3cret-pw@127.0.0.1:1/x?connect_timeout=2")
    assert "s3cret-pw" not in str(failed.value) and "runner:***@127.0.0.1:1/x" in str(failed.value)
