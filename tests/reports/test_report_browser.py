"""report.html in a real browser: headless Chromium renders the tables and decodes the charts."""

from __future__ import annotations

import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runner.reports import charts
from runner.reports.writer import write_report
from tests.support.services import requires

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    requires(CHROMIUM.exists(), "headless chromium is not installed at /usr/bin/chromium"),
]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
]


class Dom(HTMLParser):
    """Counts of the elements the report must contain, and the text of table headers."""

    def __init__(self, html: str):
        super().__init__()
        self.tables = 0
        self.images: list[str] = []
        self.headers: list[str] = []
        self._in_th = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tables += tag == "table"
        self._in_th = tag == "th"
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")

    def handle_data(self, data: str) -> None:
        if self._in_th:
            self.headers.append(data.strip())


def chromium(tmp_path: Path, page: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    command = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *arguments, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


@pytest.fixture
def page(record: dict[str, Any], workspace: Path, tmp_path: Path) -> Path:
    return write_report(record, tmp_path / "report", workspace, formats=("html",))["html"]


def test_rendered_dom_has_tables_and_charts(page: Path, tmp_path: Path) -> None:
    result = chromium(tmp_path, page, "--dump-dom")
    dom = Dom(result.stdout)
    assert dom.tables >= 10
    assert {"region", "orders", "revenue", "Agent", "Model", "USD", "Cap"} <= set(dom.headers)
    assert len(dom.images) == 2 and all(src.startswith("data:image/png;base64,") for src in dom.images)
    assert "Content Security Policy" not in result.stderr  # the page tried to load nothing it may not


def test_screenshot_shows_the_charts(page: Path, tmp_path: Path) -> None:
    from matplotlib import image

    shot = tmp_path / "report.png"
    chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1200,3000")
    assert shot.stat().st_size > 100_000
    pixels = np.asarray(image.imread(shot))[:, :, :3]
    blue = np.array([int(charts.PALETTE[0][i : i + 2], 16) / 255 for i in (1, 3, 5)])
    chart_line = np.all(np.abs(pixels - blue) < 0.04, axis=2).sum()
    assert chart_line > 300, "the revenue chart's blue line should be visible"
