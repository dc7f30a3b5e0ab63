"""The built wheel, installed the way a deployer installs it: no source checkout on the path.

The wheel is built and installed by :func:`tests.wheel.build_and_install`; every process below runs
from a directory outside the checkout with only that target ahead of the installed
dependencies, and checks that ``runner`` was imported from it. What the code loads at run
time (schemas, prompts, prices, tokenizer encodings, report and stats templates, the example
DAGs, the Airflow provider metadata) must be in the wheel: a file left out of the package
data passes every other test, which run from the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.services import import_or_missing
from tests.wheel import REPO, WheelUnavailable, build_and_install

pytestmark = pytest.mark.timeout(600)


@dataclass(frozen=True)
class Installed:
    wheel: Path
    target: Path
    workdir: Path  # outside the checkout: the processes' working directory

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNNER_", "OPENAI", "AIRFLOW", "PYTEST"))}
        env.update(PYTHONPATH=str(self.target), PYTHONNOUSERSITE="1", **extra)
        return env

    def python(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args], cwd=self.workdir, env=self.env(**env), capture_output=True, text=True,
            timeout=300, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    try:
        wheel, target = build_and_install(base)
    except WheelUnavailable as unavailable:
        pytest.skip(f"cannot build the wheel here: {unavailable}")
    workdir = base / "elsewhere"
    workdir.mkdir()
    yield Installed(wheel, target, workdir)


def _package_files() -> set[str]:
    """Every file of the ``runner`` package in the checkout (caches aside)."""
    found = set()
    for path in (REPO / "runner").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo"):
            found.add(path.relative_to(REPO).as_posix())
    return found


def test_the_wheel_holds_every_file_of_the_package(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    packaged = {n for n in names if n.startswith("runner/")}
    assert _package_files() - packaged == set(), "files of the package left out of the wheel (package-data)"
    assert {n.split("/")[0] for n in names} <= {"runner", f"{installed.wheel.name.split('-')[0]}-"
                                                 f"{installed.wheel.name.split('-')[1]}.dist-info"}  # fmt: skip
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    with zipfile.ZipFile(installed.wheel) as wheel:
        declared = wheel.read(entry_points).decode()
    assert "[apache_airflow_provider]" in declared and "runner.airflow.provider:get_provider_info" in declared


def test_the_installed_package_loads_its_data(installed: Installed) -> None:
    code = """
import runner, sys
from pathlib import Path
assert Path(runner.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), runner.__file__
from runner.prompts import defaults
from runner.config.prices import default_prices
from runner.config.schema import schema
from runner.model.tokens import counter_for_model
assert defaults(), "prompts"
assert default_prices(), "prices"
for name in ("agent", "task", "tool", "common", "eval", "knowledge", "plan", "prices", "source", "telemetry"):
    assert schema(name), name
for model, encoding in (("gpt-4o-mini", "o200k_base"), ("gpt-4", "cl100k_base")):
    counter = counter_for_model(model)
    assert counter.name == encoding and counter.exact and counter.count_text("hello world") == 2, counter
print("ok")
"""
    done = installed.python("-c", code, str(installed.target))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_validate_and_run_a_copy_of_the_project_from_the_wheel(installed: Installed, tmp_path: Path) -> None:
    from runner.model.server import ScriptedServer

    project = tmp_path / "project"
    for part in ("agents.d", "tasks.d", "examples/data"):
        shutil.copytree(REPO / part, project / part)
    validated = installed.python("-m", "runner", "validate", "--root", str(project))
    assert validated.returncode == 0, validated.stdout + validated.stderr
    with ScriptedServer({"fallback": "Revenue was fine."}) as server:
        ran = installed.python(
            "-m", "runner", "run", "daily_report", "--input", "date=2026-11-30", "--root", str(project),
            "--run-id", "wheel-1", OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-wheel-0123456789",
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    report = project / "reports" / "daily_report" / "wheel-1"
    assert {"report.md", "report.json", "report.html"} <= {p.name for p in report.iterdir()}  # the templates shipped
    assert "<html" in (report / "report.html").read_text().lower()


def test_the_example_dags_import_from_a_dag_folder_elsewhere(installed: Installed, tmp_path: Path) -> None:
    import_or_missing("airflow", "apache-airflow is not installed (pip install 'runner[airflow]')")
    dags, project = tmp_path / "dags", tmp_path / "project"
    dags.mkdir()
    for part in ("agents.d", "tasks.d"):
        shutil.copytree(REPO / part, project / part)
    locate = installed.python("-c", "import os, runner.airflow.example_dags as d; print(os.path.dirname(d.__file__))")
    example_dags = Path(locate.stdout.strip())
    assert example_dags.is_relative_to(installed.target), locate.stderr
    for name in ("daily_report.py", "batch_fanout.py", "batch_api.py"):  # as the README says: only these
        shutil.copy(example_dags / name, dags / name)
    code = """
import sys
try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:  # Airflow 3.1
    from airflow.models.dagbag import DagBag
from airflow.providers_manager import ProvidersManager
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
print("DAGS", sorted(bag.dag_ids))
manager = ProvidersManager()
info = manager.providers["runner"]
hook = manager.hooks["runner_model"]
assert hook is not None and hook.hook_class_name == "runner.airflow.hook.RunnerModelHook", hook
assert manager.field_behaviours["runner_model"]["relabeling"] == {"host": "Base URL", "password": "API key"}
import runner.airflow.hook
assert runner.airflow.hook.__file__.startswith(sys.argv[2]), runner.airflow.hook.__file__
print("VERSION", info.version)
"""
    home = tmp_path / "airflow-home"
    done = installed.python(
        "-c", code, str(dags), str(installed.target), AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags), RUNNER_ROOT=str(project),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("DAGS ", "VERSION ")))
    assert said["DAGS"] == "['runner_batch_api', 'runner_batch_fanout', 'runner_daily_report']"
    assert said["VERSION"] == installed.wheel.name.split("-")[1]  # the provider's version is the wheel's
