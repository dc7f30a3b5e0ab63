"""The fan-out's merged output at a URL has the same one-batch lock as ``runner batch --output URL``:
a merge is refused (naming the holder) while another batch writes that output, with the lock next
to the output or, when the fan-out has a PostgreSQL store, in the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.airflow.execution import run_batch_for_airflow
from runner.airflow.merge import merge_fanout
from runner.airflow.options import typed_options
from runner.airflow.plan import FanoutPlan, count_input_rows, plan_shards
from runner.batch.output import exclusive_output
from runner.errors import UsageError
from runner.locations import location

KEY = "sk-airflow-merge-lock-0123456789"


@pytest.mark.parametrize("store", ["lock object", "postgresql"])
def test_a_merge_onto_a_url_another_batch_is_writing_is_refused(
    project: Path, scripted_server: Any, store: str, request: pytest.FixtureRequest
) -> None:
    store_url = str(request.getfixturevalue("postgres_url")) if store == "postgresql" else None
    source = project / "tickets.csv"
    source.write_text("id,text\nT-1,alpha\nT-2,beta\nT-3,gamma\n", encoding="utf-8")
    plan = FanoutPlan("classify", project, source, project / "work", typed_options({"id_column": "id"}),
                      key=f"dag/run/{store}", store_url=store_url)  # fmt: skip
    proj, spec = plan.load()
    total, sha = count_input_rows(proj, spec, plan)
    shards = plan_shards(total, sha, num_shards=2, shard_size=None)
    with scripted_server({"fallback": "label: x"}) as server:
        results = {s.index: {"index": s.index, **run_batch_for_airflow("classify", root=project, request=plan.request(
            s, model_base_url=server.base_url, api_key=KEY))} for s in shards}  # fmt: skip
    output = location(f"memory://merge-lock-{store.replace(' ', '-')}/merged.jsonl")

    def merge() -> dict[str, Any]:
        manifest, _, _ = merge_fanout(proj, spec, plan, shards, results, batch_id="fanout-lock", output_path=output,
                                      report_dir=project / "report")  # fmt: skip
        return manifest

    with exclusive_output(output, {"task": "another batch", "input": "/data/other.csv"}, store_url=store_url):
        with pytest.raises(UsageError, match=r"another batch \(pid \d+, host .+, task another batch, input /data/other.csv\)"):
            merge()
        assert not output.exists()  # nothing written over the other batch's output
    assert merge()["records"] == 3 and len(output.read_text().splitlines()) == 3
