"""`runner validate` as a real process: exit codes, text and JSON output, no heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
REPO = HERE.parent.parent


def runner(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_shipped_examples_are_valid() -> None:
    result = runner("validate")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok:" in result.stderr


def test_invalid_file_exits_2_with_location() -> None:
    result = runner("validate", "--root", str(HERE / "project"), str(HERE / "invalid" / "03-negative-cap.yaml"))
    assert result.returncode == 2
    assert "03-negative-cap.yaml:6:14: error: /caps/max_steps: -3 is less than the minimum of 1" in result.stdout
    assert "Traceback" not in result.stderr


def test_json_format() -> None:
    result = runner("validate", "--format", "json", "--root", str(HERE / "project"), str(HERE / "invalid" / "15-unknown-tool.yaml"))
    assert result.returncode == 2
    payload = json.loads(result.stdout)
    assert payload["valid"] is False
    (problem,) = payload["problems"]
    assert problem["pointer"] == "/tools/1" and problem["line"] == 5
    assert "Did you mean 'read_file'?" in problem["message"]


def test_help_and_validate_stay_light() -> None:
    code = (
        "import sys\n"
        "from runner.cli import main\n"
        "try:\n    main(['validate', '--root', {!r}])\n"
        "except SystemExit:\n    pass\n"
        "heavy = [m for m in ('openai', 'pandas', 'airflow', 'matplotlib', 'mcp', 'numpy') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    ).format(str(HERE / "project"))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.stdout.strip().splitlines()[-1] == "HEAVY=", result.stdout + result.stderr
    help_code = "import sys\nfrom runner.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\nprint([m for m in ('openai','pandas','airflow') if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", help_code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_schema_command_writes_schemas(tmp_path: Path) -> None:
    result = runner("schema", "--out", str(tmp_path))
    assert result.returncode == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "agent.schema.json" in names and "task.schema.json" in names
    assert json.loads((tmp_path / "agent.schema.json").read_text())["title"] == "runner Agent"


def test_list_shows_agents_tasks_and_tools() -> None:
    result = runner("list")
    assert result.returncode == 0, result.stderr
    for name in ("report_writer", "daily_report", "triage_ticket", "query_table", "calculator"):
        assert name in result.stdout
