"""The fan-out merge refuses to write its merged output once it has lost the output's lock
(its PostgreSQL session ended and another batch holds the output, or held it meanwhile, or its
lock object was taken over): :class:`OutputLockLost` (exit 2), nothing written; the merge run
again once the other batch has ended writes it. The lock is lost between taking it and the
check the merge makes right before writing (the lock's own session ends, as an administrator's
``pg_terminate_backend`` ends it)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import runner.airflow.merge as merge_module
from runner.airflow.execution import run_batch_for_airflow
from runner.airflow.merge import merge_fanout
from runner.airflow.options import typed_options
from runner.airflow.plan import FanoutPlan, count_input_rows, plan_shards
from runner.batch.output_lock_store import lock_key
from runner.errors import EXIT_CONFIG, OutputLockLost
from runner.locations import location
from tests.postgres import terminate

KEY = "sk-airflow-merge-lost-0123456789"


def lock_session(url: str, target: str) -> int:
    """The session holding ``target``'s output lock (this process's)."""
    high, low = (lock_key(target) >> 32) & 0xFFFFFFFF, lock_key(target) & 0xFFFFFFFF
    with psycopg.connect(url, autocommit=True) as db:
        found = db.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid::bigint = %s"
                           " AND objid::bigint = %s AND objsubid = 1", (high, low)).fetchone()  # fmt: skip
    assert found is not None
    return int(found[0])


@contextlib.contextmanager
def another_batch(url: str, target: str, *, ends: bool) -> Iterator[None]:
    """Another batch taking ``target``'s lock as the store sees one (and, with ``ends``, letting it go again)."""
    with psycopg.connect(url, autocommit=True) as other:
        assert other.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(target),)).fetchone() == (True,)
        other.execute("UPDATE output_locks SET holder = %s WHERE target = %s",
                      (json.dumps({"pid": 99, "host": "worker-2", "task": "other"}), target))  # fmt: skip
        if ends:
            other.execute("DELETE FROM output_locks WHERE target = %s", (target,))
            other.execute("SELECT pg_advisory_unlock(%s)", (lock_key(target),))
        yield


@pytest.mark.parametrize("other_ends", [False, True], ids=["holds it now", "held it meanwhile"])
def test_a_merge_whose_output_lock_was_lost_writes_nothing(
    project: Path, scripted_server: Any, postgres_url: str, monkeypatch: pytest.MonkeyPatch, other_ends: bool
) -> None:
    source = project / "tickets.csv"
    source.write_text("id,text\nT-1,alpha\nT-2,beta\nT-3,gamma\n", encoding="utf-8")
    plan = FanoutPlan("classify", project, source, project / "work", typed_options({"id_column": "id"}),
                      key=f"dag/run/lost-{other_ends}", store_url=postgres_url)  # fmt: skip
    proj, spec = plan.load()
    total, sha = count_input_rows(proj, spec, plan)
    shards = plan_shards(total, sha, num_shards=2, shard_size=None)
    with scripted_server({"fallback": "label: x"}) as server:
        results = {s.index: {"index": s.index, **run_batch_for_airflow("classify", root=project, request=plan.request(
            s, model_base_url=server.base_url, api_key=KEY))} for s in shards}  # fmt: skip
    output = location(f"memory://merge-lost-{other_ends}/merged.jsonl")
    target = str(output)
    real_lock = merge_module._output_lock
    stack = contextlib.ExitStack()

    @contextlib.contextmanager
    def lost_after_taking(*args: Any) -> Iterator[Any]:
        with real_lock(*args) as hold:
            terminate(postgres_url, lock_session(postgres_url, target))
            stack.enter_context(another_batch(postgres_url, target, ends=other_ends))
            yield hold

    def merge() -> dict[str, Any]:
        manifest, _, _ = merge_fanout(proj, spec, plan, shards, results, batch_id="fanout-lost", output_path=output,
                                      report_dir=project / "report")  # fmt: skip
        return manifest

    monkeypatch.setattr(merge_module, "_output_lock", lost_after_taking)
    with stack, pytest.raises(OutputLockLost) as lost:
        merge()
    assert lost.value.exit_code == EXIT_CONFIG
    assert ("held it meanwhile and has ended" if other_ends else "pid 99, host worker-2, task other") in str(lost.value)
    assert "did not write the output" in str(lost.value)
    assert not output.exists()
    monkeypatch.setattr(merge_module, "_output_lock", real_lock)
    assert merge()["records"] == 3 and len(output.read_text().splitlines()) == 3  # the other batch has ended
