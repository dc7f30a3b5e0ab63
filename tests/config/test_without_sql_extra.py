"""The first README command installs runner[local] only: a project that declares SQL sources
must still load and run its other tasks without runner[sql] (SQLAlchemy missing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WITHOUT_SQLALCHEMY = "import sys; sys.modules['sqlalchemy'] = None; from runner.cli import main; main(sys.argv[1:])"


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_SQLALCHEMY, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_shipped_project_validates_without_the_sql_extra() -> None:
    done = run(REPO, "validate")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_password_in_a_source_url_is_still_refused_without_the_sql_extra(tmp_path: Path) -> None:
    (tmp_path / "sources.d").mkdir()
    (tmp_path / "sources.d" / "db.yaml").write_text(
        "apiVersion: runner/v1\nkind: Source\nname: db\nurl: postgresql+psycopg://reader:hunter2secret@db.example/sales\n"
    )
    done = run(tmp_path, "validate")
    assert done.returncode == 2
    assert "holds a password" in done.stdout + done.stderr and "hunter2secret" not in done.stdout + done.stderr
