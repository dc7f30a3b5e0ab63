"""The transcript tables on both backends: what the recorder writes (redacted), the size limit on
tool outputs, content addressing, reading back, and retention's edges."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runner.core.ages import parse_age
from runner.core.calls import Exchange, ModelCallEntry, ToolCallEntry
from runner.core.usage import Usage
from runner.reports.transcript import as_text
from runner.store.database import Database
from runner.store.recorder import RunRecorder
from runner.store.retention import prune
from runner.store.runstore import RunStore
from runner.store.transcripts import TOOL_OUTPUT_LIMIT, clip_output

SECRET = "tok-4f9c1d2e8b7a"
SYSTEM = {"role": "system", "content": "Shared system prompt."}
TOOLS = ({"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},)


@pytest.fixture
def store(store_target: str | Path) -> Iterator[RunStore]:
    opened = RunStore(store_target)
    yield opened
    opened.close()


def model_call(recorder: RunRecorder, seq: int, user: str, reply: str) -> None:
    exchange = Exchange((SYSTEM, {"role": "user", "content": user}), TOOLS, {"model": "m"}, {"role": "assistant", "content": reply})
    entry = ModelCallEntry("main", "a", "m", seq, Usage(10, 2, 4, 0.001), 0.1, "ok", content=reply, exchange=exchange)
    recorder.model_call(entry, recorder.call_reserved(entry))


def tool_call(recorder: RunRecorder, seq: int, output: str, arguments: str = "{}") -> None:
    recorder.tool_call(ToolCallEntry("main", "a", seq, "read_file", arguments, "ok", 0.01, output[:500], output=output))


def recorder_for(store: RunStore, run_id: str) -> RunRecorder:
    store.start_run(run_id, "t", {"run": run_id}, "h", {})
    return RunRecorder(store, run_id, 1, None, [SECRET])


def test_the_recorder_redacts_every_part(store: RunStore) -> None:
    recorder = recorder_for(store, "r")
    model_call(recorder, 1, f"use {SECRET}", f"I saw {SECRET}")
    tool_call(recorder, 1, f"file says {SECRET}", arguments=f'{{"key": "{SECRET}"}}')
    entries = store.transcripts.read("r")
    text = repr(entries) + repr(store.database.rows("SELECT * FROM transcript_blobs"))
    assert SECRET not in text and "use [REDACTED]" in text and "file says [REDACTED]" in text
    assert entries[0]["response"]["content"] == "I saw [REDACTED]" and entries[1]["arguments"] == '{"key": "[REDACTED]"}'
    assert entries[0]["usage"]["cached_input_tokens"] == 4 and entries[0]["call_id"] is not None


def test_a_secret_spelled_with_escapes_or_quoted_is_redacted(store: RunStore) -> None:
    quoted = 'pa"ss\\word-0123'  # JSON text spells it escaped
    store.start_run("r", "t", {}, "h", {})
    recorder = RunRecorder(store, "r", 1, None, [SECRET, quoted])
    escaped = SECRET.replace("t", "\\u0074", 1)  # a tool's JSON arguments may spell the key with escapes
    model_call(recorder, 1, f"key {quoted}", f'{{"key": "{escaped}"}}')
    text = repr(store.transcripts.read("r")) + repr(store.database.rows("SELECT * FROM transcript_blobs"))
    assert SECRET not in text and escaped not in text and "ss\\\\word" not in text and "[REDACTED]" in text


def test_a_run_writes_each_blob_once_in_one_statement(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = recorder_for(store, "r")
    model_call(recorder, 1, "first", "a")
    written: list[tuple[str, int]] = []  # (table, values) of each blob or reference insert
    execute = type(store.database).execute

    def recorded(self: Database, sql: str, params: Sequence[object] = (), **kwargs: bool) -> int:
        if sql.startswith(("INSERT INTO transcript_refs", "INSERT INTO transcript_blobs")):
            written.append((sql.split()[2], len(params)))
        return execute(self, sql, params, **kwargs)

    monkeypatch.setattr(type(store.database), "execute", recorded)
    model_call(recorder, 2, "second", "b")  # the system prompt and the tools list are written already
    model_call(recorder, 3, "third", "c")
    assert written == [("transcript_refs", 2), ("transcript_blobs", 4)] * 2  # one row each: the new question
    written.clear()
    model_call(recorder_for(store, "other"), 1, "fourth", "d")  # another run: its three blobs in one statement each
    assert written == [("transcript_refs", 6), ("transcript_blobs", 12)]
    assert len(store.transcripts.read("r")[2]["messages"]) == 2 and len(store.database.rows("SELECT * FROM transcript_blobs")) == 6


def test_a_long_tool_output_is_cut_with_a_note(store: RunStore) -> None:
    recorder = recorder_for(store, "r")
    tool_call(recorder, 1, "x" * (TOOL_OUTPUT_LIMIT + 10))
    tool_call(recorder, 2, "y" * TOOL_OUTPUT_LIMIT)
    long, exact = store.transcripts.read("r")
    assert long["truncated"] is True and long["output_chars"] == TOOL_OUTPUT_LIMIT + 10
    assert long["output"].endswith(f"[transcript: output cut at {TOOL_OUTPUT_LIMIT} of {TOOL_OUTPUT_LIMIT + 10} characters]")
    assert exact["truncated"] is False and exact["output"] == "y" * TOOL_OUTPUT_LIMIT
    assert clip_output("short") == ("short", False)


def test_content_is_stored_once_across_runs(store: RunStore) -> None:
    for run_id in ("one", "two"):
        recorder = recorder_for(store, run_id)
        model_call(recorder, 1, "same question", "same answer")
        model_call(recorder, 2, f"question of {run_id}", "answer")
    blobs = store.database.rows("SELECT body FROM transcript_blobs")
    assert len(blobs) == 5  # the system prompt, the tools list, "same question", and each run's own question
    assert sum("Shared system prompt." in b["body"] for b in blobs) == 1
    refs = store.database.rows("SELECT run_id, digest FROM transcript_refs ORDER BY run_id")
    assert len(refs) == 8  # each run refers to its four blobs once


def test_a_blob_that_is_gone_reads_as_missing(store: RunStore) -> None:
    recorder = recorder_for(store, "r")
    model_call(recorder, 1, "hello", "hi")
    store.database.execute("DELETE FROM transcript_blobs WHERE body LIKE ?", ("%hello%",))
    entries = store.transcripts.read("r")
    assert entries[0]["messages"][1] is None
    assert "[missing]" in as_text(entries)


def test_prune_keeps_runs_still_running_and_counts_before_it_deletes(store: RunStore) -> None:
    model_call(recorder_for(store, "done"), 1, "q", "a")
    model_call(recorder_for(store, "stuck-running"), 1, "q2", "a2")
    store.database.execute("UPDATE runs SET status = 'completed', finished_at = ? WHERE run_id = 'done'", ("2020-01-01T00:00:00.000+00:00",))
    store.database.execute("UPDATE runs SET started_at = ? WHERE run_id = 'stuck-running'", ("2020-01-01T00:00:00.000+00:00",))
    dry = prune(store.database, timedelta(days=30), dry_run=True)
    assert (dry.runs, dry.kept_runs, dry.kept_running, dry.blobs) == (1, 1, 1, 1)  # only the question "q" was the done run's alone
    assert store.run("done") is not None
    before = store.transcripts.blob_count()
    real = prune(store.database, timedelta(days=30), dry_run=False)
    assert (real.runs, real.rows, real.blobs) == (dry.runs, dry.rows, dry.blobs)
    assert store.transcripts.blob_count() == before - real.blobs
    assert store.run("done") is None and store.run("stuck-running") is not None
    assert store.transcripts.read("stuck-running")[0]["messages"][0] == SYSTEM
    later = prune(store.database, timedelta(days=1), dry_run=False, now=datetime.now(UTC) + timedelta(days=3650))
    assert later.runs == 0 and later.kept_running == 1


@pytest.mark.parametrize(("text", "days"), [("30d", 30), ("2w", 14), ("12h", 0.5), (" 90m ", 90 / 1440), ("45s", 45 / 86400)])
def test_ages(text: str, days: float) -> None:
    assert parse_age(text) == timedelta(days=days)


@pytest.mark.parametrize("text", ["", "30", "d", "0d", "-1d", "1.5d", "30y", "10000000000w"])
def test_bad_ages(text: str) -> None:
    with pytest.raises(ValueError, match="age"):
        parse_age(text)


def test_prune_keeps_a_blob_a_run_references_again_while_it_deletes(postgres_url: str) -> None:
    """PostgreSQL: a run writing its transcript references a blob that only old runs did (its
    reference first, then the blob's INSERT ... DO NOTHING, one transaction still open) while a
    prune deletes those runs. The prune waits for that writer before deleting orphan blobs, so the
    new reference never points at a deleted blob (it did: the prune could not see the uncommitted
    reference, and the writer's DO NOTHING held no lock)."""
    import threading
    import time

    import psycopg

    store = RunStore(postgres_url)
    try:
        model_call(recorder_for(store, "old"), 1, "q", "a")
        store.database.execute("UPDATE runs SET status = 'completed', finished_at = ? WHERE run_id = 'old'", ("2020-01-01T00:00:00.000+00:00",))
        (shared,) = [r["digest"] for r in store.database.rows("SELECT digest FROM transcript_refs WHERE run_id = 'old'") if r["digest"]][:1]
        with psycopg.connect(postgres_url) as writer:  # a transaction, as RunTranscript._write's
            writer.execute("INSERT INTO transcript_refs (run_id, digest) VALUES ('new', %s)", (shared,))
            writer.execute("INSERT INTO transcript_blobs (digest, body, chars, created_at) VALUES (%s, 'x', 1, 'now')"
                           " ON CONFLICT (digest) DO NOTHING", (shared,))  # fmt: skip
            pruning = threading.Thread(target=prune, args=(store.database, timedelta(days=30)), kwargs={"dry_run": False})
            pruning.start()
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                for _ in range(500):  # a bound on a hang: until the prune waits on the writer (or ended without)
                    waiting = admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                            (store.database.session_pid,)).fetchone()  # fmt: skip
                    if not pruning.is_alive() or (waiting and waiting[0] == "Lock"):
                        break
                    time.sleep(0.02)
            writer.commit()
        pruning.join(timeout=60)
        assert not pruning.is_alive() and store.run("old") is None
        assert store.database.row("SELECT COUNT(*) AS n FROM transcript_blobs WHERE digest = ?", (shared,)) == {"n": 1}
    finally:
        store.close()
