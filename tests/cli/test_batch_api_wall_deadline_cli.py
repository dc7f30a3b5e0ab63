"""``--max-wall-seconds`` is a deadline with ``--via batch-api`` too: a provider batch that stays
``cancelling`` after runner cancels it at the cap is looked at once more, then left for a rerun
to collect; the command ends at its cap, not after the provider's 10-minute cancel grace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.batch_endpoints import BatchBehaviour
from runner.model.server import ScriptedServer
from tests.cli.batch_api_project import records, run, via_api
from tests.cli.rounds_project import SCRIPT, numbers, rounds_project

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def project() -> Iterator[Path]:
    with rounds_project() as root:
        yield root


def test_a_batch_that_stays_cancelling_does_not_outlive_the_wall_clock_cap(project: Path) -> None:
    source, out = numbers(project, 3), project / "out.jsonl"
    with ScriptedServer(SCRIPT, batch=BatchBehaviour(polls=10_000, cancel_polls=10_000)) as server:
        # the old loop polled the cancelling batch for its 600 s grace: the 120 s guard ends it
        result = run(project, server, "compute", *via_api(source, out, "--max-wall-seconds", "8", "--json"), timeout=120)
        (batch,) = server.batches.batches.values()
        looks = batch.cancel_looks
    assert result.returncode == 3, result.stderr
    assert batch.status == "cancelling" and 1 <= looks <= 3  # looked at after the cancel, not polled for minutes
    assert "did not end after its cancel; run the command again to collect it" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["stop_kind"] == "max_wall_seconds"
    assert {r["status"] for r in records(out).values()} == {"not_run"}
