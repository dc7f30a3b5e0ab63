"""ProviderBatchTrigger against the loopback server's Batch API: every way a wait can end.

Batches are created through the openai SDK (upload + create), as the runner submits them;
the trigger then runs as the triggerer runs it (``async for event in trigger.run()``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.services import import_or_missing

pytestmark = [pytest.mark.airflow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

from runner.airflow.batch_wait import BatchWaitEvent  # noqa: E402
from runner.airflow.triggers import CLASSPATH, ProviderBatchTrigger  # noqa: E402
from runner.errors import UsageError  # noqa: E402
from runner.model.batch_endpoints import BatchBehaviour  # noqa: E402
from runner.model.server import ScriptedServer  # noqa: E402
from tests.airflow.deploy.deployment import free_port  # noqa: E402

KEY = "sk-trigger-canary-0123456789abcdef"
SCRIPT: dict[str, Any] = {"fallback": {"content": "ok", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}}
FAST = {"poll_seconds": 0.01, "max_poll_seconds": 0.02}


def submit(server: ScriptedServer, lines: int = 2, *, valid: bool = True) -> str:
    """One provider batch of ``lines`` requests (an invalid input file fails its validation)."""
    import openai

    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    rows = [{"custom_id": str(i), "method": "POST", "url": "/v1/chat/completions", "body": body} for i in range(lines)]
    content = "".join(json.dumps(r) + "\n" for r in rows) if valid else "not json\n"
    client = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)
    uploaded = client.files.create(file=("in.jsonl", content.encode()), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    client.close()
    return batch.id


async def events(trigger: ProviderBatchTrigger) -> list[BatchWaitEvent]:
    return [BatchWaitEvent.from_payload(e.payload) async for e in trigger.run()]


def retrieves(server: ScriptedServer, batch_id: str) -> int:
    return sum(1 for r in server.requests if r.method == "GET" and r.path.endswith(f"/batches/{batch_id}"))


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RUNNER_TEST_BATCH_KEY", KEY)
    return "RUNNER_TEST_BATCH_KEY"


@pytest.mark.parametrize("outcome", ["completed", "expired", "cancelled"])
async def test_one_event_when_the_batch_ends(outcome: Any, key_env: str) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=3, outcome=outcome), api_key=KEY) as server:
        batch_id = submit(server)
        found = await events(ProviderBatchTrigger([batch_id], server.base_url, api_key_env=key_env, **FAST))
        assert retrieves(server, batch_id) == 3  # polled until the provider said it ended, not once more
    assert found == [BatchWaitEvent("ended", {batch_id: outcome})]


async def test_a_batch_that_failed_validation_has_ended(key_env: str) -> None:
    with ScriptedServer(SCRIPT, api_key=KEY) as server:
        batch_id = submit(server, valid=False)
        found = await events(ProviderBatchTrigger([batch_id], server.base_url, api_key_env=key_env, **FAST))
    assert found == [BatchWaitEvent("ended", {batch_id: "failed"})]


async def test_every_batch_is_waited_for(key_env: str) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2), api_key=KEY) as server:
        first, second = submit(server), submit(server, valid=False)
        found = await events(ProviderBatchTrigger([first, second], server.base_url, api_key_env=key_env, **FAST))
        assert retrieves(server, first) == 2 and retrieves(server, second) == 1  # an ended batch is not asked again
    assert found == [BatchWaitEvent("ended", {first: "completed", second: "failed"})]


async def test_a_refused_key_is_an_auth_error_naming_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNNER_TEST_BATCH_KEY", "sk-wrong-key-0123456789")
    with ScriptedServer(SCRIPT, api_key=KEY) as server:
        batch_id = submit(server)
        (event,) = await events(
            ProviderBatchTrigger([batch_id], server.base_url, api_key_env="RUNNER_TEST_BATCH_KEY", **FAST)
        )
    assert event.status == "error" and event.kind == "auth"
    assert "refused the API key" in str(event.message) and "sk-wrong" not in json.dumps(event.as_payload())


async def test_an_unknown_batch_is_not_found(key_env: str) -> None:
    with ScriptedServer(SCRIPT, api_key=KEY) as server:
        (event,) = await events(ProviderBatchTrigger(["batch_999999"], server.base_url, api_key_env=key_env, **FAST))
    assert (event.status, event.kind) == ("error", "not_found") and "batch_999999" in str(event.message)


async def test_an_endpoint_that_never_answers_is_unreachable_after_the_bound(key_env: str) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    trigger = ProviderBatchTrigger(["batch_000001"], closed, api_key_env=key_env, unreachable_seconds=0.05, **FAST)
    (event,) = await events(trigger)
    assert (event.status, event.kind) == ("error", "unreachable")
    assert "no answer from the endpoint for 0.05 s" in str(event.message) and "could not connect" in str(event.message)


async def test_an_endpoint_that_is_down_for_a_while_is_waited_out(key_env: str) -> None:
    import asyncio

    server = ScriptedServer(SCRIPT, port=free_port(), batch=BatchBehaviour(polls=2), api_key=KEY).start()
    try:
        batch_id = submit(server)
        server.close()  # the endpoint goes away with the batch out
        trigger = ProviderBatchTrigger(
            [batch_id], server.base_url, api_key_env=key_env, unreachable_seconds=3600, **FAST
        )
        waiting = asyncio.ensure_future(events(trigger))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # connection refused is transient: still waiting
        server.start()  # back, on the same port, with the same batches
        found = await asyncio.wait_for(waiting, 60)
    finally:
        server.close()
    assert found == [BatchWaitEvent("ended", {batch_id: "completed"})]


async def test_at_the_wall_cap_what_is_out_is_cancelled_and_waited_for(key_env: str) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=50), api_key=KEY) as server:
        batch_id = submit(server)
        trigger = ProviderBatchTrigger(
            [batch_id], server.base_url, api_key_env=key_env, cancel_at=time.time(), cancel_reason="max_wall_seconds=60", **FAST,
        )  # fmt: skip
        found = await events(trigger)
        cancels = [r for r in server.requests if r.method == "POST" and r.path.endswith(f"/batches/{batch_id}/cancel")]
    assert found == [BatchWaitEvent("ended", {batch_id: "cancelled"}, cancelled_for="max_wall_seconds=60")]
    assert len(cancels) == 1


async def test_before_the_wall_cap_nothing_is_cancelled(key_env: str) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2), api_key=KEY) as server:
        batch_id = submit(server)
        trigger = ProviderBatchTrigger(
            [batch_id], server.base_url, api_key_env=key_env, cancel_at=time.time() + 3600, **FAST
        )
        found = await events(trigger)
        assert not [r for r in server.requests if r.path.endswith("/cancel")]
    assert found == [BatchWaitEvent("ended", {batch_id: "completed"})]


# --- where the key comes from --------------------------------------------------------------


async def test_the_key_comes_from_the_connection_in_the_triggerer(model_connection: Callable[..., None]) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1), api_key=KEY) as server:
        model_connection(server.base_url, key=KEY, conn_id="runner_model_batch")
        batch_id = submit(server)
        found = await events(ProviderBatchTrigger([batch_id], server.base_url, conn_id="runner_model_batch", **FAST))
        fingerprints = {r.auth_fingerprint for r in server.requests}
    assert found == [BatchWaitEvent("ended", {batch_id: "completed"})]
    assert fingerprints == {ScriptedServer.key_fingerprint(KEY)}


@pytest.mark.parametrize(
    ("where", "missing"),
    [({"conn_id": "runner_model_nowhere"}, "connection 'runner_model_nowhere' is not defined"),
     ({"api_key_env": "RUNNER_TEST_NO_SUCH_KEY"}, "environment has no RUNNER_TEST_NO_SUCH_KEY")],
)  # fmt: skip
async def test_a_key_the_triggerer_cannot_find_is_a_no_key_error(where: dict[str, str], missing: str) -> None:
    with ScriptedServer(SCRIPT, api_key=KEY) as server:
        (event,) = await events(ProviderBatchTrigger(["batch_000001"], server.base_url, **where, **FAST))
        assert server.requests == []  # nothing was sent without the key
    assert (event.status, event.kind) == ("error", "no_key") and missing in str(event.message)


@pytest.mark.parametrize("where", [{"conn_id": "runner_model_default"}, {"api_key_env": "RUNNER_TEST_BATCH_KEY"}])
def test_serialize_names_where_the_key_is_never_the_key(
    where: dict[str, str], key_env: str, model_connection: Callable[..., None]
) -> None:
    model_connection("http://127.0.0.1:9/v1", key=KEY)
    trigger = ProviderBatchTrigger(["batch_1", "batch_2"], "http://127.0.0.1:9/v1", cancel_at=123.5, **where)
    classpath, kwargs = trigger.serialize()
    assert classpath == CLASSPATH and KEY not in json.dumps(kwargs) and KEY not in repr(trigger)
    assert ProviderBatchTrigger(**kwargs).serialize() == (classpath, kwargs)  # what the triggerer rebuilds
    assert {k: kwargs[k] for k in ("batch_ids", "conn_id", "api_key_env", "cancel_at")} == {
        "batch_ids": ["batch_1", "batch_2"], "conn_id": where.get("conn_id"), "api_key_env": where.get("api_key_env"),
        "cancel_at": 123.5,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("args", "refused"),
    [((["batch_1"], "https://user:sk-in-url@api.example.com/v1"), "carries a password"),
     (([], "http://127.0.0.1:9/v1"), "batch_ids"),
     (([""], "http://127.0.0.1:9/v1"), "batch_ids")],
)  # fmt: skip
def test_a_trigger_that_would_store_a_secret_or_wait_on_nothing_is_refused(args: tuple[Any, ...], refused: str) -> None:
    with pytest.raises(UsageError, match=refused) as raised:
        ProviderBatchTrigger(*args)
    assert "sk-in-url" not in str(raised.value)


@pytest.mark.parametrize(
    "payload",
    [None, "ended", {"status": "done"}, {"status": "ended", "batches": ["b"]}, {"status": "error", "kind": "weird"}],
)
def test_an_event_that_is_not_the_triggers_is_refused(payload: Any) -> None:
    with pytest.raises(UsageError, match="provider batch trigger"):
        BatchWaitEvent.from_payload(payload)


@pytest.mark.parametrize("name", ["poll_seconds", "max_poll_seconds", "unreachable_seconds"])
@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "30"])
def test_a_wait_that_would_spin_or_never_end_is_refused(name: str, value: Any) -> None:
    with pytest.raises(UsageError, match=f"^{name}: expected a positive number of seconds"):
        ProviderBatchTrigger(["batch_1"], "http://127.0.0.1:9/v1", **{name: value})


# --- killed by a user, or moved to another triggerer ---------------------------------------


def cancels(server: ScriptedServer, batch_id: str) -> int:
    return sum(1 for r in server.requests if r.method == "POST" and r.path.endswith(f"/batches/{batch_id}/cancel"))


async def test_a_user_kill_cancels_the_batches_still_out(key_env: str) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=50), api_key=KEY) as server:
        out, ended = submit(server), submit(server, valid=False)
        trigger = ProviderBatchTrigger([out, ended], server.base_url, api_key_env=key_env, **FAST)
        await trigger.on_kill()  # what the triggerer calls when the deferred task is marked failed or cleared
        assert (cancels(server, out), cancels(server, ended)) == (1, 1)  # the ended one refuses: not an error
        found = await events(ProviderBatchTrigger([out], server.base_url, api_key_env=key_env, **FAST))
    assert found == [BatchWaitEvent("ended", {out: "cancelled"})]  # what the next try re-attaches to


async def test_cancel_on_kill_false_leaves_the_batch_running(key_env: str) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2), api_key=KEY) as server:
        batch_id = submit(server)
        trigger = ProviderBatchTrigger([batch_id], server.base_url, api_key_env=key_env, cancel_on_kill=False, **FAST)
        assert trigger.serialize()[1]["cancel_on_kill"] is False
        await trigger.on_kill()
        assert cancels(server, batch_id) == 0
        assert await events(ProviderBatchTrigger(**trigger.serialize()[1])) == [BatchWaitEvent("ended", {batch_id: "completed"})]


async def test_a_kill_whose_cancel_cannot_go_out_is_logged_not_raised(key_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    await ProviderBatchTrigger(["batch_9"], closed, api_key_env=key_env, **FAST).on_kill()
    await ProviderBatchTrigger(["batch_9"], closed, api_key_env="RUNNER_TEST_NO_SUCH_KEY", **FAST).on_kill()
    logged = capsys.readouterr().out  # Airflow's structlog writes the trigger's log lines here
    assert "batch_9 could not be cancelled: could not connect" in logged and "cannot be cancelled: the triggerer's" in logged
    assert KEY not in logged


async def test_a_triggerer_restart_rebuilds_the_trigger_and_waits_for_the_same_batch(key_env: str) -> None:
    import asyncio

    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=6), api_key=KEY) as server:
        batch_id = submit(server)
        first = ProviderBatchTrigger([batch_id], server.base_url, api_key_env=key_env, poll_seconds=0.05, max_poll_seconds=0.05)
        waiting = asyncio.ensure_future(events(first))
        while retrieves(server, batch_id) < 2:
            await asyncio.sleep(0.01)
        waiting.cancel()  # the triggerer stopping: its triggers are cancelled without a user action, no on_kill
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await first.cleanup()
        seen = retrieves(server, batch_id)
        classpath, kwargs = first.serialize()  # what Airflow stored; a new triggerer imports and rebuilds it
        assert classpath == CLASSPATH
        found = await events(ProviderBatchTrigger(**json.loads(json.dumps(kwargs))))
        assert cancels(server, batch_id) == 0 and server.batches.batches_created == 1
        assert retrieves(server, batch_id) > seen
    assert found == [BatchWaitEvent("ended", {batch_id: "completed"})]
