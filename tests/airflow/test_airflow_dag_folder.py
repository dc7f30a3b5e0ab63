"""The example DAG files parse where a deployment parses them: copied alone into a DAG folder,
by a dag-processor that has no runner project, no ``RUNNER_*`` variable, no writable home,
started in ``/`` (the project is only needed where the tasks run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.airflow.conftest import EXAMPLE_DAGS
from tests.support.services import import_or_missing

import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")

PARSE = """
import json
try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow 3.1
    from airflow.models.dagbag import DagBag
bag = DagBag(dag_folder=%r)
print("BAG " + json.dumps({"ids": sorted(bag.dag_ids), "errors": {k: str(v) for k, v in bag.import_errors.items()}}))
"""


def test_the_example_dags_parse_without_the_project_or_any_runner_setting(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    for name in ("daily_report.py", "batch_fanout.py", "batch_api.py"):
        shutil.copy(EXAMPLE_DAGS / name, dags / name)
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNER_", "OPENAI_"))}
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", PARSE % str(dags)], cwd="/", env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    found = next((json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("BAG ")), None)
    assert found is not None, done.stderr[-3000:]
    assert found["errors"] == {}
    assert found["ids"] == ["runner_batch_api", "runner_batch_fanout", "runner_daily_report"]
    assert sorted(p.name for p in dags.iterdir() if p.name != "__pycache__") == sorted(
        ["daily_report.py", "batch_fanout.py", "batch_api.py"]
    ), "parsing wrote nothing next to the DAG files"
