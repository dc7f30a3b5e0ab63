"""Answers of a provider batch whose record of calls was lost: kept unclaimed under the hash of
their call, served to that call only and claimed once it is recorded, pruned by age when nobody claims them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from runner.store.provider_answers import UNCLAIMED, Kept, ProviderAnswers, hashed_call_id
from runner.store.retention import prune
from runner.store.runstore import RunStore

BODY = {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "42"}}]}


@pytest.fixture
def store(store_target: str | Path) -> Iterator[RunStore]:
    opened = RunStore(store_target)
    yield opened
    opened.close()


def test_an_unclaimed_answer_is_served_once_unrecorded_to_its_call_then_as_its_own(store: RunStore) -> None:
    answers = ProviderAnswers(store.database)
    answers.answered_unclaimed(hashed_call_id("b-r1", "fp1"), BODY)
    assert answers.answer("b-r2", "fp1") is None and answers.answer("b-r1", "fp2") is None  # another call's hash: not served
    assert answers.answer("b-r1", "fp1") == Kept(BODY, recorded=False)  # its caller records it, then claims it
    assert answers.answer("b-r1", "fp1") == Kept(BODY, recorded=False)  # not claimed (the caller stopped first): again
    answers.claim("b-r1", "fp1")
    answers.claim("b-r1", "fp1")  # a claim run again (a dropped connection) changes nothing
    assert answers.answer("b-r1", "fp1") == Kept(BODY)  # now the run's own answer: recorded already
    assert store.database.rows("SELECT run_id FROM provider_answers") == [{"run_id": "b-r1"}]


def test_the_calls_own_answer_wins_over_an_unclaimed_one(store: RunStore) -> None:
    answers = ProviderAnswers(store.database)
    answers.answered("b-r1", "fp1", BODY)
    answers.answered_unclaimed(hashed_call_id("b-r1", "fp1"), {**BODY, "id": "chatcmpl-2"})
    assert answers.answer("b-r1", "fp1") == Kept(BODY)


def test_a_prune_deletes_unclaimed_answers_older_than_its_age(store: RunStore) -> None:
    answers = ProviderAnswers(store.database)
    answers.answered_unclaimed("c-old", BODY)
    answers.answered_unclaimed("c-young", BODY)
    store.database.execute("UPDATE provider_answers SET sent_at = '2020-01-01T00:00:00.000+00:00' WHERE fingerprint = 'c-old'")
    dry = prune(store.database, timedelta(days=30), dry_run=True)
    assert dry.rows["provider_answers"] == 1
    prune(store.database, timedelta(days=30), dry_run=False)
    left = store.database.rows("SELECT run_id, fingerprint FROM provider_answers")
    assert left == [{"run_id": UNCLAIMED, "fingerprint": "c-young"}]


def test_the_calls_a_dead_process_never_sent_are_those_in_no_batch_that_may_answer(store: RunStore) -> None:
    """On resume, before any row runs: a provider batch call still in flight in the run store was
    sent only if it is noted in a batch that is out (or maybe out); a live call is never judged."""
    from runner.core.calls import ModelCallEntry
    from runner.core.usage import Usage

    answers = ProviderAnswers(store.database)

    def reserved(run_id: str, tariff: str = "batch") -> int:
        return store.add_model_call(run_id, 1, ModelCallEntry("main", "a", "m", 1, Usage(10, 10, cost_usd=0.5), 0.0, "reserved", tariff=tariff))

    queued, in_out, in_lost_part, not_handed, released, settled = (reserved(f"b-r{i}") for i in range(1, 7))
    answers.sent("b-r1", "fp", queued)  # in the queue for a later round
    answers.sent("b-r2", "fp", in_out)
    answers.in_part([("b-r2", "fp")], "b:1.1")  # in a batch created and not collected
    answers.sent("b-r3", "fp", in_lost_part)
    answers.in_part([("b-r3", "fp")], "b:1.2")  # noted for a part whose intent was never recorded
    assert store.release_unsent(released, "never sent")  # released already: not found again
    live = reserved("b-r5", tariff="live")  # a live fallback's call: may have been billed
    store.settle_model_call(settled, ModelCallEntry("main", "a", "m", 1, Usage(10, 5, cost_usd=0.2), 0.1, "ok"))
    other = reserved("c-r1")  # another batch's call
    found = answers.never_sent("b-", {"b:1.1"})
    assert sorted(ledger_id for _, ledger_id in found) == sorted([queued, in_lost_part, not_handed])
    assert not {live, other, in_out, released} & {ledger_id for _, ledger_id in found}
    assert all(store.release_unsent(ledger_id, "never sent") for _, ledger_id in found)
    assert not store.release_unsent(settled, "never sent")  # a settled call is left alone
    assert store.spent("b-r6").cost_usd == pytest.approx(0.2) and store.spent("b-r1").cost_usd == 0
