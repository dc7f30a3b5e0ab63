"""The child process that reads source files: a parse that never ends is killed at its
deadline, a child that dies (the out-of-memory killer, a crash in a C extension) is a problem
naming the file, and either way the next file is read by a new process. The child's
environment holds no secret of the parent's."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from runner.knowledge.convert import ConversionError
from runner.knowledge.file_chunks import ChunkSettings
from runner.knowledge.limits import ConversionLimits
from runner.knowledge.parse_process import DocumentParser, ParserBug
from runner.knowledge.parse_worker import PARENT_ENV
from tests.knowledge.documents import BILLING_MD, write_nested_forms_pdf

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow(reason="runner starts its parser process; one parse runs to its deadline")]


def children() -> dict[int, bytes]:
    """This process's parser children, by pid, with their environments."""
    mark = f"{PARENT_ENV}={os.getpid()}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if mark in environ.split(b"\0"):
                found[int(entry.name)] = environ
    return found


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    write_nested_forms_pdf(tmp_path / "forms.pdf")
    (tmp_path / "billing.md").write_text(BILLING_MD)
    return tmp_path / "forms.pdf", tmp_path / "billing.md"


async def test_a_parse_past_its_deadline_is_killed_and_the_next_file_read(files: tuple[Path, Path]) -> None:
    forms, billing = files
    parser = DocumentParser(ChunkSettings(limits=ConversionLimits(max_seconds=1)))
    try:
        with pytest.raises(ConversionError, match=r"^forms\.pdf took longer than 1 s to read \(its parser was stopped\)"):
            await parser.chunks(forms, "forms.pdf")
        assert children() == {}
        chunks = await parser.chunks(billing, "docs/billing.md")
        assert [c.heading for c in chunks] == ["Billing", "Billing > Refunds", "Billing > Payment methods"]
        assert chunks[1].position == "lines 7-9" and chunks[1].path == "docs/billing.md"
    finally:
        await parser.close()
    assert children() == {}


async def test_a_child_that_dies_names_the_file(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    forms, billing = files
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-secret-0123456789")
    parser = DocumentParser(ChunkSettings(limits=ConversionLimits(max_seconds=600)))
    try:
        await parser.chunks(billing, "billing.md")  # the process is up and reads its next request
        reading = asyncio.create_task(parser.chunks(forms, "forms.pdf"))
        await asyncio.sleep(0.2)
        ((pid, environ),) = children().items()
        assert b"sk-parent-secret" not in environ and b"OPENAI_API_KEY" not in environ
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ConversionError, match=r"^forms\.pdf could not be read: its parser's process ended \(killed by signal 9\)$"):
            await reading
        assert len(await parser.chunks(billing, "billing.md")) == 3
    finally:
        await parser.close()


async def test_cancelling_the_wait_kills_the_parse(files: tuple[Path, Path]) -> None:
    forms, billing = files
    parser = DocumentParser(ChunkSettings(limits=ConversionLimits(max_seconds=600)))
    await parser.chunks(billing, "billing.md")  # the process is up and reads its next request
    reading = asyncio.create_task(parser.chunks(forms, "forms.pdf"))
    await asyncio.sleep(0.2)
    assert children()
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert children() == {}


def slow_to_start(monkeypatch: pytest.MonkeyPatch, where: Path, code: str) -> None:
    """The parser process runs ``code`` as it starts (a ``sitecustomize`` on its path)."""
    where.mkdir()
    (where / "sitecustomize.py").write_text(code)
    monkeypatch.syspath_prepend(str(where))


async def test_a_files_deadline_does_not_count_the_process_start(files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, billing = files
    slow_to_start(monkeypatch, tmp_path / "site", "import time\ntime.sleep(2)\n")  # as on a loaded machine
    parser = DocumentParser(ChunkSettings(limits=ConversionLimits(max_seconds=1)))
    try:
        assert len(await parser.chunks(billing, "billing.md")) == 3
    finally:
        await parser.close()


async def test_cancelling_while_the_process_starts_kills_it(files: tuple[Path, Path]) -> None:
    forms, _ = files
    parser = DocumentParser(ChunkSettings(limits=ConversionLimits(max_seconds=600)))
    reading = asyncio.create_task(parser.chunks(forms, "forms.pdf"))
    while not children():
        await asyncio.sleep(0.01)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert children() == {}


async def test_a_process_that_cannot_start_is_runners_bug_not_the_files(files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, billing = files
    slow_to_start(monkeypatch, tmp_path / "site", "import os\nos._exit(3)\n")
    parser = DocumentParser(ChunkSettings())
    with pytest.raises(ParserBug, match=r"^runner's parser process did not start within 60 s \(exit code 3\); run '.+ -m runner\.knowledge\.parse_worker' to see why$"):
        await parser.chunks(billing, "billing.md")
    assert children() == {}


ENDS_ITS_OUTPUT_THEN_HANGS = "import os, time\nos.close(1)\ntime.sleep(600)\n"  # a parser child whose output ended


async def test_a_process_that_ends_its_output_but_hangs_is_killed_after_its_grace(files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its output ended, so it gets a grace to exit with its own code; it does not, so it is killed."""
    _, billing = files
    slow_to_start(monkeypatch, tmp_path / "site", ENDS_ITS_OUTPUT_THEN_HANGS)
    parser = DocumentParser(ChunkSettings())
    with pytest.raises(ParserBug, match=r"\(killed by signal 9\); run '.+ -m runner\.knowledge\.parse_worker' to see why$"):
        await parser.chunks(billing, "billing.md")
    assert children() == {}


async def test_cancelled_while_a_process_that_ended_its_output_gets_its_grace_it_is_killed(files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, billing = files
    slow_to_start(monkeypatch, tmp_path / "site", ENDS_ITS_OUTPUT_THEN_HANGS)
    parser = DocumentParser(ChunkSettings())
    reading = asyncio.create_task(parser.chunks(billing, "billing.md"))
    while not children():
        await asyncio.sleep(0.01)
    await asyncio.sleep(1)  # its output has ended: the parser waits out its grace (5 s)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    for _ in range(500):  # killed: gone once reaped
        if not children():
            break
        await asyncio.sleep(0.01)
    assert children() == {}
