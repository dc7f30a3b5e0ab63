"""``runner --help`` and ``runner run --help`` list every exit code, from the one table in core/status.py."""

from __future__ import annotations

from pathlib import Path

from tests.support.project import run_cli


def test_help_lists_every_exit_code(tmp_path: Path) -> None:
    top, run = run_cli(tmp_path, None, "--help"), run_cli(tmp_path, None, "run", "--help")
    assert top.returncode == 0 and run.returncode == 0
    text = " ".join(top.stdout.split())
    assert "5 completed, but a report delivery failed" in text and "130 interrupted" in text
    for code in ("0 completed", "1 failed", "2 configuration or usage error", "3 stopped by a cap", "4 stuck"):
        assert code in text
    assert "5 completed but a report delivery failed" in " ".join(run.stdout.split())
