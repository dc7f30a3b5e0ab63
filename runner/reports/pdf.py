"""report.pdf: report.html printed by a headless Chromium already on the machine.

Nothing is downloaded: the browser is ``$RUNNER_CHROMIUM`` or the first of ``chromium``,
``chromium-browser``, ``google-chrome`` on ``PATH``. The page loads nothing (its
Content-Security-Policy allows only inline styles and ``data:`` images), so printing it
reaches no network. Chromium refuses to run as root without ``--no-sandbox``; it is given
only then.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from runner.errors import RunnerError

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
TIMEOUT_SECONDS = 120
FLAGS = (
    "--headless",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--no-pdf-header-footer",
    "--run-all-compositor-stages-before-draw",
)


class PdfUnavailable(RunnerError):
    """report.pdf could not be printed (no browser, or the browser failed); the message says why."""


def find_browser() -> str:
    """The Chromium to print with; :class:`PdfUnavailable` naming how to get one."""
    configured = os.environ.get("RUNNER_CHROMIUM")
    if configured:
        if not (Path(configured).is_file() and os.access(configured, os.X_OK)):
            raise PdfUnavailable(f"RUNNER_CHROMIUM={configured} is not an executable file")
        return configured
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise PdfUnavailable("no headless Chromium found for the PDF (apt-get install chromium, or set RUNNER_CHROMIUM)")


def print_pdf(html: Path, out: Path) -> Path:
    """Print ``html`` to ``out`` (A4/Letter as the page's CSS says) and return ``out``."""
    browser = find_browser()
    with tempfile.TemporaryDirectory(prefix="runner-pdf-") as profile:
        target = Path(profile) / "report.pdf"
        command = [browser, *FLAGS, f"--user-data-dir={profile}/profile", f"--print-to-pdf={target}", html.resolve().as_uri()]
        if os.geteuid() == 0:
            command.insert(1, "--no-sandbox")
        try:
            done = subprocess.run(
                command, capture_output=True, timeout=TIMEOUT_SECONDS, stdin=subprocess.DEVNULL,
                env={"HOME": profile, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise PdfUnavailable(f"{browser} did not print the report within {TIMEOUT_SECONDS} s") from None
        if done.returncode != 0 or not target.is_file() or target.read_bytes()[:5] != b"%PDF-":
            detail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            raise PdfUnavailable(f"{browser} could not print the report (exit {done.returncode}): {detail[0][:300]}")
        shutil.move(target, out)
    return out
