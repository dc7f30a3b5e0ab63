"""A batch task's generations: the record a successful try leaves decides that the next try computes again."""

from __future__ import annotations

from pathlib import Path

from runner.airflow.generations import Generation, current_generation, record_success


def test_a_recorded_success_starts_the_next_generation_counting_its_tries_from_its_first(tmp_path: Path) -> None:
    assert current_generation(tmp_path) == Generation(1, 0)
    record_success(tmp_path, Generation(1, 0), 2, {"batch_id": "a"})  # succeeded on its retry
    after = current_generation(tmp_path)
    assert after == Generation(2, 2) and after.try_here(3) == 1 and after.try_here(4) == 2
    record_success(tmp_path, after, 3, {"batch_id": "b"})
    assert current_generation(tmp_path) == Generation(3, 3)
