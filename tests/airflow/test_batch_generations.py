"""A batch task's generations: the record a successful try leaves decides that the next try computes again."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runner.airflow.generations import Generation, current_generation, record_success


def test_a_recorded_success_starts_the_next_generation_counting_its_tries_from_its_first(tmp_path: Path) -> None:
    assert current_generation(tmp_path) == Generation(1, 0)
    record_success(tmp_path, Generation(1, 0), 2, {"batch_id": "a"})  # succeeded on its retry
    after = current_generation(tmp_path)
    assert after == Generation(2, 2) and after.try_here(3) == 1 and after.try_here(4) == 2
    record_success(tmp_path, after, 3, {"batch_id": "b"})
    assert current_generation(tmp_path) == Generation(3, 3)


def test_a_try_that_fails_before_it_returns_leaves_no_record_so_its_retry_resumes(tmp_path: Path) -> None:
    """The record is written last: a failure before it (here annotating the outlets' asset
    events) leaves the generation unrecorded, so the retry resumes it rather than paying again."""
    from tests.support.services import import_or_missing

    import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")
    from airflow.sdk import Asset

    from runner.airflow.batch_operator import RunnerBatchOperator, _Batch

    class Events(dict):  # type: ignore[type-arg]
        def __getitem__(self, key: object) -> None:
            raise RuntimeError("the metadata database went away")

    operator = RunnerBatchOperator(task_id="t", task="classify", input_path="in.jsonl", outlets=[Asset("file:///out")])
    batch = _Batch(None, None, None, None, 0, tmp_path, Generation(1, 0))  # type: ignore[arg-type]
    context: Any = {"ti": SimpleNamespace(try_number=1), "outlet_events": Events()}
    with pytest.raises(RuntimeError):
        operator._succeed(context, batch, {"batch_id": "a"})
    assert current_generation(tmp_path) == Generation(1, 0)
    assert operator._succeed({"ti": SimpleNamespace(try_number=2)}, batch, {"batch_id": "a"}) == {"batch_id": "a"}  # type: ignore[arg-type]
    assert current_generation(tmp_path) == Generation(2, 2)


@pytest.mark.parametrize("text", ["", "{\"try_number\": ", "[]", "{\"try_number\": \"two\"}", "{}"])
def test_a_damaged_success_record_is_refused_naming_the_file(tmp_path: Path, text: str) -> None:
    from runner.errors import StoreDamaged

    (tmp_path / "succeeded-g1.json").write_text(text)
    with pytest.raises(StoreDamaged, match=r"succeeded-g1\.json: not a record of a successful try.*Delete it"):
        current_generation(tmp_path)
