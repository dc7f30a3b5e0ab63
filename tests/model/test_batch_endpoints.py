"""The loopback server's Files and Batch APIs, through the real openai SDK."""

from __future__ import annotations

import json

import openai
import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer


def _line(custom_id: str, text: str, url: str = "/v1/chat/completions") -> dict:
    body = {"model": "scripted", "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def _upload(client: openai.OpenAI, lines: list[dict]) -> str:
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    return client.files.create(file=("requests.jsonl", content), purpose="batch").id


def _jsonl(client: openai.OpenAI, file_id: str | None) -> dict[str, dict]:
    if file_id is None:
        return {}
    text = client.files.content(file_id).text
    return {line["custom_id"]: line for line in map(json.loads, text.splitlines())}


def _poll(client: openai.OpenAI, batch_id: str, times: int) -> list[str]:
    return [client.batches.retrieve(batch_id).status for _ in range(times)]


SCRIPT = {"rules": [
    {"when": {"last_message": "fail"}, "reply": {"fault": {"status": 500}}},
    {"when": {"last_message": "hello"}, "reply": {"content": "hi there", "usage": {"prompt_tokens": 10, "completion_tokens": 2}}},
]}


def test_a_batch_moves_from_validating_to_completed_and_answers_each_line_from_the_script() -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=3)) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-test")
        file_id = _upload(client, [_line("a", "hello"), _line("b", "something else")])
        assert client.files.retrieve(file_id).purpose == "batch"
        batch = client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
        assert batch.status == "validating"
        assert _poll(client, batch.id, 4) == ["in_progress", "in_progress", "completed", "completed"]
        done = client.batches.retrieve(batch.id)
        assert done.request_counts is not None and done.request_counts.completed == 2 and done.error_file_id is None
        out = _jsonl(client, done.output_file_id)
    assert out["a"]["response"]["status_code"] == 200
    assert out["a"]["response"]["body"]["choices"][0]["message"]["content"] == "hi there"
    assert out["a"]["response"]["body"]["usage"]["prompt_tokens"] == 10
    assert out["b"]["response"]["body"]["choices"][0]["message"]["content"] == "OK"
    assert srv.batches.batches_created == 1 and len(srv.billed) == 2


def test_a_scripted_fault_puts_that_line_in_the_error_file() -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-test")
        file_id = _upload(client, [_line("a", "hello"), _line("b", "please fail")])
        batch = client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
        done = client.batches.retrieve(batch.id)
        out, err = _jsonl(client, done.output_file_id), _jsonl(client, done.error_file_id)
    assert done.status == "completed" and set(out) == {"a"} and set(err) == {"b"}
    assert err["b"]["response"]["status_code"] == 500
    assert done.request_counts is not None and (done.request_counts.completed, done.request_counts.failed) == (1, 1)


@pytest.mark.parametrize("outcome, code", [("expired", "batch_expired"), ("cancelled", "batch_cancelled")])
def test_an_expired_or_cancelled_batch_puts_every_line_in_the_error_file(outcome: str, code: str) -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2, outcome=outcome)) as srv:  # type: ignore[arg-type]
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-test")
        batch = client.batches.create(
            input_file_id=_upload(client, [_line("a", "hello"), _line("b", "x")]), endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        assert _poll(client, batch.id, 2) == ["in_progress", outcome]
        done = client.batches.retrieve(batch.id)
        err = _jsonl(client, done.error_file_id)
    assert done.output_file_id is None and {line["error"]["code"] for line in err.values()} == {code}
    assert set(err) == {"a", "b"} and srv.billed == []


def test_cancel_moves_the_batch_through_cancelling_to_cancelled() -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=5)) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-test")
        batch = client.batches.create(
            input_file_id=_upload(client, [_line("a", "hello")]), endpoint="/v1/chat/completions", completion_window="24h"
        )
        assert client.batches.cancel(batch.id).status == "cancelling"
        assert _poll(client, batch.id, 2) == ["cancelled", "cancelled"]
        assert client.batches.retrieve(batch.id).cancelled_at is not None


LIMITED = BatchBehaviour(max_requests=2, max_bytes=400)  # each _line is about 130 bytes


@pytest.mark.parametrize("lines, code", [
    ([_line("a", "x"), _line("a", "y")], "duplicate_custom_id"),
    ([_line("a", "x", url="/v1/embeddings")], "mismatched_endpoint"),
    ([{"custom_id": "a"}], "missing_required_parameter"),
    ([_line("a", "x"), _line("b", "y"), _line("c", "z")], "too_many_requests"),
    ([_line("a", "x" * 200), _line("b", "y" * 200)], "file_too_large"),
])
def test_an_invalid_input_file_fails_the_batch_at_validation(lines: list[dict], code: str) -> None:
    with ScriptedServer(SCRIPT, batch=LIMITED) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-test")
        batch = client.batches.create(input_file_id=_upload(client, lines), endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.status == "failed" and batch.errors is not None and batch.errors.data
    assert batch.errors.data[0].code == code


def test_unknown_files_and_batches_are_404s_and_bad_parameters_400s() -> None:
    with ScriptedServer(SCRIPT) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            client.batches.retrieve("batch_nope")
        with pytest.raises(openai.NotFoundError):
            client.files.content("file-nope")
        with pytest.raises(openai.NotFoundError):
            client.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
        file_id = _upload(client, [_line("a", "x")])
        with pytest.raises(openai.BadRequestError):
            client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="48h")  # type: ignore[arg-type]


def test_files_are_listed_newest_first_by_purpose_and_deleted_once() -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1)) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-test")
        first, second = _upload(client, [_line("a", "hello")]), _upload(client, [_line("b", "hello")])
        listed = [f.id for f in client.files.list(purpose="batch", limit=1)]  # the SDK pages through both
        assert listed == [second, first]
        assert client.files.delete(first).deleted is True
        assert [f.id for f in client.files.list(purpose="batch")] == [second]
        with pytest.raises(openai.NotFoundError):
            client.files.delete(first)
        with pytest.raises(openai.NotFoundError):
            client.files.content(first)
        with pytest.raises(openai.NotFoundError):
            client.batches.create(input_file_id=first, endpoint="/v1/chat/completions", completion_window="24h")
        assert srv.batches.deleted == [first] and srv.batches.deleted_in_use == []


def test_deleting_the_input_file_of_a_running_batch_is_noted_and_fails_the_batch() -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=2)) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-test")
        file_id = _upload(client, [_line("a", "hello")])
        batch = client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
        client.files.delete(file_id)
        assert _poll(client, batch.id, 2) == ["in_progress", "failed"]
        assert srv.batches.deleted_in_use == [file_id] and srv.billed == []


def test_refused_creates_and_failing_deletes_can_be_scripted() -> None:
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=1, refuse_creates=1, fail_deletes=1)) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="sk-test", max_retries=0)
        file_id = _upload(client, [_line("a", "hello")])
        with pytest.raises(openai.BadRequestError):
            client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
        client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
        with pytest.raises(openai.InternalServerError):
            client.files.delete(file_id)
        assert client.files.delete(file_id).deleted is True
