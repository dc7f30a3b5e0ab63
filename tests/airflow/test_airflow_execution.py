"""The adapter over runner.api: deterministic run ids, small manifests, resume (no Airflow needed)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.airflow.execution import (
    TASK_MANIFEST_KEYS,
    call_blocking,
    derive_run_id,
    run_task_for_airflow,
    task_manifest,
)

IDENTITY: dict[str, Any] = {
    "task": "daily_report",
    "dag_id": "d",
    "dag_run_id": "scheduled__2024-01-02T00:00:00+00:00",
    "task_id": "t",
    "map_index": -1,
    "inputs": {"date": "2024-01-02", "n": 1},
}


def test_run_id_is_deterministic_and_ignores_input_key_order() -> None:
    first = derive_run_id(**IDENTITY)
    again = derive_run_id(**{**IDENTITY, "inputs": {"n": 1, "date": "2024-01-02"}})
    assert first == again
    assert first.startswith("daily_report-af-") and len(first.rsplit("-", 1)[1]) == 24


@pytest.mark.parametrize(
    "change",
    [{"dag_id": "other"}, {"dag_run_id": "manual__x"}, {"task_id": "t2"}, {"map_index": 0}, {"inputs": {"date": "2024-01-03", "n": 1}}, {"task": "other"}],
)  # fmt: skip
def test_run_id_changes_with_each_identity_part(change: dict[str, Any]) -> None:
    assert derive_run_id(**{**IDENTITY, **change}) != derive_run_id(**IDENTITY)


def test_run_id_has_no_try_number_and_slugs_yaml_paths() -> None:
    assert "try_number" not in derive_run_id.__code__.co_varnames
    assert derive_run_id(**{**IDENTITY, "task": "tasks.d/My Task.yaml"}).startswith("My-Task-af-")


def test_task_manifest_is_small_and_drops_output() -> None:
    full = {"run_id": "r", "task": "t", "status": "completed", "exit_code": 0, "cost_usd": 0.5, "report_dir": Path("/x"),
            "output": "x" * 100_000, "input_tokens": 3, "error": None, "error_kind": None}  # fmt: skip
    assert task_manifest(full) == {
        "run_id": "r",
        "status": "completed",
        "cost_usd": 0.5,
        "report_path": "/x",
        "exit_code": 0,
        "error_kind": None,
        "error": None,
    }
    assert tuple(task_manifest(full)) == TASK_MANIFEST_KEYS


def test_task_manifest_carries_the_error_redacted_and_short(canary_key: str) -> None:
    failed = {"run_id": "r", "status": "failed", "exit_code": 1, "cost_usd": 0.0, "error_kind": "auth",
              "error": f"model endpoint error (auth): Incorrect API key provided: {canary_key}\n" + "y" * 2000}  # fmt: skip
    manifest = task_manifest(failed, [canary_key])
    assert manifest["error_kind"] == "auth" and manifest["error"].startswith("model endpoint error (auth): Incorrect")
    assert canary_key not in manifest["error"] and "[REDACTED]" in manifest["error"]
    assert len(manifest["error"]) <= 500 and "\n" not in manifest["error"]
    assert canary_key[:12] not in task_manifest(failed)["error"]  # the sk-... shape is redacted even when not listed


def test_call_blocking_works_inside_a_running_loop() -> None:
    def uses_asyncio_run() -> int:
        return asyncio.run(asyncio.sleep(0, result=7))

    async def main() -> int:
        return call_blocking(uses_asyncio_run)

    assert call_blocking(uses_asyncio_run) == 7
    assert asyncio.run(main()) == 7


def test_adapter_passes_the_contract_arguments(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, canary_key: str
) -> None:
    from runner import api

    seen: dict[str, Any] = {}

    def fake_run_task(task: str, **kwargs: Any) -> dict[str, Any]:
        seen.update(kwargs, task=task)
        return {"run_id": kwargs["run_id"], "status": "completed", "exit_code": 0, "cost_usd": 0.01,
                "report_dir": tmp_path, "output": {"big": "x" * 1000}}  # fmt: skip

    monkeypatch.setattr(api, "run_task", fake_run_task, raising=False)
    ids = {k: v for k, v in IDENTITY.items() if k not in ("task", "inputs")}
    manifest = run_task_for_airflow(
        "daily_report", root=str(tmp_path), inputs=IDENTITY["inputs"], caps={"max_cost_usd": 1}, **ids,
        model_base_url="http://127.0.0.1:9/v1", api_key=canary_key, store_path=str(tmp_path / "s.sqlite3"),
    )  # fmt: skip
    assert seen["run_id"] == derive_run_id(**IDENTITY) == manifest["run_id"]
    assert seen["root"] == tmp_path and seen["store_path"] == tmp_path / "s.sqlite3" and seen["reports_dir"] is None
    assert seen["api_key"] == canary_key and seen["model_base_url"] == "http://127.0.0.1:9/v1"
    assert seen["caps"] == {"max_cost_usd": 1} and seen["inputs"] == IDENTITY["inputs"]
    assert canary_key not in repr(manifest) and "big" not in repr(manifest)


def test_resumed_run_does_not_re_spend(project: Path, scripted_server: Any, require_api: Any, canary_key: str) -> None:
    """Through the real API and the loopback server: a try after a failed one resumes its run and
    pays only for what did not complete (a try after a *completed* run is a new run: see
    tests/airflow/test_airflow_iterate.py)."""
    require_api("run_task")
    ids = {"dag_id": "d", "dag_run_id": "manual__1", "task_id": "t", "map_index": -1}
    script = {"rules": [{"times": 1, "reply": {"fault": {"status": 400}}}], "fallback": "Report written."}
    with scripted_server(script) as server:
        first = run_task_for_airflow("daily_report", root=project, inputs={"date": "2024-01-02"}, model_base_url=server.base_url,
                                     api_key=canary_key, **ids)  # fmt: skip
        again = run_task_for_airflow("daily_report", root=project, inputs={"date": "2024-01-02"}, model_base_url=server.base_url,
                                     api_key=canary_key, **ids)  # fmt: skip
        assert len(server.requests) == 2
        assert server.requests[0].auth_fingerprint == server.key_fingerprint(canary_key)
    assert (first["status"], again["status"]) == ("failed", "completed")
    assert first["run_id"] == again["run_id"]
    assert again["report_path"] and Path(again["report_path"]).is_dir()


def test_airflow_free_modules_do_not_import_airflow() -> None:
    code = (
        "import sys, runner.airflow.execution, runner.airflow.provider, runner.airflow.plan, runner.airflow.merge, "
        "runner.airflow.options, runner.airflow.failures, runner.airflow.probe; "
        "info = runner.airflow.provider.get_provider_info(); "
        "assert info['package-name'] == 'runner'; "
        "assert not [m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')], 'airflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
