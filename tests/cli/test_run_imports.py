"""What a run loads: the real CLI as a process, and the modules it imported by the time it exited.

Peak memory is mostly modules. A simple ``runner run`` (or ``runner batch``) on a project the
compiled cache knows must not import what it does not use; a run that does use a part must
still load it. No timings and no memory figures: which modules are in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.model.server import ScriptedServer

REPO = Path(__file__).resolve().parents[2]

# Runs the real command line (``python -m runner ...``) and writes sys.modules at exit.
PROBE = """
import atexit, json, os, runpy, sys
out = os.environ["RUNNER_TEST_MODULES_OUT"]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "runner"
runpy.run_module("runner", run_name="__main__", alter_sys=True)
"""

AGENT = """\
apiVersion: runner/v1
kind: Agent
name: calc
model: {id: gpt-4o-mini, max_tokens: 200, retries: 0}
system_prompt: You are careful with arithmetic. Use the calculator for every sum.
tools: [calculator]
"""
TASKS = {
    "plain": "goal: What is (3 + 4) * 6?\n",
    "substituted": "inputs:\n  subject: {type: string}\ngoal: 'Triage this ticket: {{ inputs.subject }}'\n",
    "filtered": "inputs:\n  subject: {type: string}\ngoal: 'Triage this ticket: {{ inputs.subject | upper }}'\n",
    "json_only": "goal: What is (3 + 4) * 6?\nreport: {formats: [json]}\n",
}
SCRIPT = {
    "rules": [
        {"when": {"last_message": "^What is"}, "reply": {"tool_calls": [{"name": "calculator", "arguments": {"expression": "(3 + 4) * 6"}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "42"}},
        {"when": {"last_message": "^Triage this ticket: printer 7 is jammed$"}, "reply": {"content": "category: hardware"}},
        {"when": {"last_message": "^Triage this ticket: PRINTER 7 IS JAMMED$"}, "reply": {"content": "category: HARDWARE"}},
    ],
    "fallback": {"content": "the goal was not rendered as expected"},
}

NEVER_IN_A_SIMPLE_RUN = {
    # third-party: tabular data, charts, YAML of a cached project
    "pandas", "numpy", "pyarrow", "matplotlib", "PIL", "yaml",
    # runner's parts that only some tasks use
    "runner.knowledge.base", "runner.knowledge.memory", "runner.knowledge.store",
    "runner.tools.sandbox", "runner.tools.call_limits", "runner.tools.cgroups", "runner.tools.seccomp",
    "runner.pipelines.planner", "runner.config.evals", "runner.config.crossref", "runner.config.template_check",
    "runner.reports.screen", "runner.reports.excel", "runner.reports.pdf", "runner.model.local", "runner.tracing.spans",
    # ... and only some attempts: an evidence or output-schema check, a retry's wipe or tool replay
    "runner.agent.evidence", "runner.config.schema", "runner.tools.disk_quota", "runner.runs.replayed_workspace",
}  # fmt: skip
SCHEMA_VALIDATION = {"jsonschema", "referencing"}
"""Loaded to check a project that is not cached, and a run's record before its report is written."""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "agents.d").mkdir(parents=True)
    (root / "tasks.d").mkdir()
    (root / ".runner").mkdir()  # so the first load writes the compiled project cache
    (root / "agents.d/calc.yaml").write_text(AGENT)
    for name, body in TASKS.items():
        (root / f"tasks.d/{name}.yaml").write_text(f"apiVersion: runner/v1\nkind: Task\nname: {name}\nagent: calc\n{body}")
    (root / "rows.csv").write_text("id,subject\nT1,printer 7 is jammed\nT2,printer 7 is jammed\n")
    (root / "rows.jsonl").write_text("".join(json.dumps({"id": f"T{n}", "subject": "printer 7 is jammed"}) + "\n" for n in (1, 2)))
    return root


def run_probed(root: Path, server: ScriptedServer, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = root / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI")}
    env.update(
        OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test", PYTHONPATH=str(REPO), RUNNER_TEST_MODULES_OUT=str(out)
    )
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return done, set(json.loads(out.read_text()))


def loaded(modules: set[str], names: set[str]) -> set[str]:
    return {name for name in names if name in modules}


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(SCRIPT) as started:
        yield started


def test_a_simple_run_on_a_cached_project_loads_only_what_it_uses(project: Path, server: ScriptedServer) -> None:
    cold, cold_modules = run_probed(project, server, "run", "plain")
    assert cold.returncode == 0, cold.stderr
    assert "jsonschema" in cold_modules  # the first load checks the project against the schemas
    warm, modules = run_probed(project, server, "run", "plain")
    assert warm.returncode == 0, warm.stderr
    assert "42" in warm.stdout
    assert loaded(modules, NEVER_IN_A_SIMPLE_RUN) == set()
    assert "runner.config.template_engine" not in modules  # a plain goal is not a template
    # what it does use is there: the SDK, the store, the tool, the report (its record checked by
    # jsonschema, report.html a Jinja template)
    assert {"openai", "sqlite3", "runner.tools.builtins.calculator", "runner.reports.html", "jinja2"} <= modules
    assert modules >= SCHEMA_VALIDATION
    for report_dir in (project / "reports" / "plain").iterdir():  # one per run, each complete
        assert {p.name for p in report_dir.iterdir()} >= {"report.md", "report.html", "report.json"}


@pytest.mark.parametrize("how", [("--no-report",), ()], ids=["no-report", "json-report"])
def test_without_an_html_report_a_plain_goal_needs_no_jinja(
    project: Path, server: ScriptedServer, how: tuple[str, ...]
) -> None:
    task = "plain" if how else "json_only"
    run_probed(project, server, "run", task, *how)  # cold: fills the cache
    done, modules = run_probed(project, server, "run", task, *how)
    assert done.returncode == 0, done.stderr
    assert "jinja2" not in modules and "markupsafe" not in modules
    assert loaded(modules, NEVER_IN_A_SIMPLE_RUN) == set()
    if how:  # no report: no record to check
        assert loaded(modules, SCHEMA_VALIDATION) == set()
    else:  # report.json: the record is checked before it is written
        assert modules >= SCHEMA_VALIDATION


def test_a_goal_that_only_substitutes_inputs_needs_no_jinja(project: Path, server: ScriptedServer) -> None:
    args = ("run", "substituted", "--no-report", "--input", "subject=printer 7 is jammed")
    run_probed(project, server, *args)
    done, modules = run_probed(project, server, *args)
    assert done.returncode == 0, done.stderr
    assert "category: hardware" in done.stdout  # the model saw the rendered goal
    assert "jinja2" not in modules


def test_a_goal_with_a_filter_still_loads_jinja_and_renders(project: Path, server: ScriptedServer) -> None:
    args = ("run", "filtered", "--no-report", "--input", "subject=printer 7 is jammed")
    run_probed(project, server, *args)
    done, modules = run_probed(project, server, *args)
    assert done.returncode == 0, done.stderr
    assert "category: HARDWARE" in done.stdout
    assert {"jinja2", "runner.config.template_engine"} <= modules


@pytest.mark.parametrize("rows", ["rows.csv", "rows.jsonl"])
def test_a_batch_over_csv_or_jsonl_loads_neither_pandas_nor_jinja(project: Path, server: ScriptedServer, rows: str) -> None:
    args = ("batch", "substituted", "--input", rows, "--id-column", "id", "--output", "out.jsonl", "--progress", "none")
    run_probed(project, server, *args, "--restart")
    done, modules = run_probed(project, server, *args, "--restart")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (project / "out.jsonl").read_text().splitlines()]
    assert [r["output"] for r in records] == ["category: hardware"] * 2
    assert loaded(modules, NEVER_IN_A_SIMPLE_RUN | SCHEMA_VALIDATION | {"jinja2"}) == set()
    assert {"openai", "sqlite3", "runner.batch.engine"} <= modules
