"""Outside documents parsed in a child process that is killed at each file's deadline.

The parsers are watched between pages and paragraphs (:class:`~runner.knowledge.limits.ConversionLimits`),
but one call into them (a PDF page whose forms draw forms, a pattern run inside lxml) cannot
be cut from inside Python, and a thread cannot be stopped at all. So each file a refresh reads
is converted and chunked (:func:`~runner.knowledge.file_chunks.file_chunks`) in a child
process, one file at a time, and a file still being read after ``max_seconds`` has its process
killed: the file is a problem ("took longer than N s"), the next file gets a new process. A
cancelled refresh (a run's wall-clock cap) kills the parse it was waiting for.

The child is ``python -m runner.knowledge.parse_worker``, started with an environment that
holds no secret (only where Python finds runner), its answers JSON. Not ``multiprocessing``
(nor a pool built on it): its ``spawn`` runs the caller's main module again in the child (a
script that calls runner's API without a ``__main__`` guard would run twice) and ``fork``
copies a process that has threads. The process starts with the first file a refresh reads
(a refresh that finds nothing changed starts none) and serves the refresh's other files; a
file's deadline starts once the process has said it is ready, so its start (Python, runner's
imports: seconds on a loaded machine) is not counted against the file.
Plain text goes through it too: its chunking is the code that once hung on a heading line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from runner.errors import ConfigError
from runner.knowledge.convert import ConversionError
from runner.knowledge.file_chunks import ChunkSettings
from runner.knowledge.parse_worker import PARENT_ENV
from runner.knowledge.store import NewChunk

STARTUP_SECONDS = 60.0
"""How long the parser process may take to start and say it is ready (no file is read yet)."""
EXIT_GRACE_SECONDS = 5.0
"""How long a parser process whose output ended may take to exit before it is killed."""


class ParserBug(RuntimeError):
    """Runner's own code failed in the child process (its traceback in the message)."""


class DocumentParser:
    """Reads source files into chunks in a child process, each file under its deadline.
    :meth:`close` ends the process (a parse still running included)."""

    def __init__(self, settings: ChunkSettings):
        self.settings = settings
        self._child: asyncio.subprocess.Process | None = None

    async def chunks(self, path: Path, relative: str) -> list[NewChunk]:
        """The chunks of ``path``. Raises :class:`ConversionError` naming the file when it cannot
        be read, in time or at all (its parser's process died: a crash in a C extension, the
        kernel's out-of-memory killer)."""
        seconds = self.settings.limits.max_seconds
        child = await self._started()
        request = {"path": str(path), "relative": relative, "settings": self.settings.as_dict()}
        try:
            answer = await asyncio.wait_for(_ask(child, request), seconds)
        except TimeoutError:
            await self.close()
            raise ConversionError(f"{path.name} took longer than {seconds:g} s to read (its parser was stopped); split or simplify it") from None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError) as exc:
            code = await self.close(grace=_grace(exc))
            raise ConversionError(f"{path.name} could not be read: its parser's process ended ({_ended(code)})") from None
        except asyncio.CancelledError:  # a run's wall-clock cap: the parse ends with the wait
            await self.close()
            raise
        return _chunks(answer, relative)

    async def _started(self) -> asyncio.subprocess.Process:
        """The parser process, started if there is none, once it has said it is ready
        (:class:`ParserBug` if it cannot start)."""
        if self._child is None:
            environment = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "PYTHONUTF8": "1", PARENT_ENV: str(os.getpid())}
            self._child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "runner.knowledge.parse_worker", env=environment,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                await asyncio.wait_for(_answer(self._child), STARTUP_SECONDS)
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                code = await self.close(grace=_grace(exc))
                raise ParserBug(f"runner's parser process did not start within {STARTUP_SECONDS:g} s ({_ended(code)}); "
                                f"run '{sys.executable} -m runner.knowledge.parse_worker' to see why") from None  # fmt: skip
            except asyncio.CancelledError:
                await self.close()
                raise
        return self._child

    async def close(self, *, grace: float = 0.0) -> int | None:
        """End the child process (killed if it has not ended within ``grace`` seconds); its exit
        code, if it had one. A child whose output ended is ending by itself: give it a grace, since
        killing it then makes ``Popen.kill`` reap it first, and asyncio's child watcher, finding
        nothing to wait for, reports exit code 255 instead of the real one."""
        child, self._child = self._child, None
        if child is None:
            return None
        try:
            if grace and child.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(child.wait()), grace)
        finally:  # killed even when the wait for its exit is cancelled (a run's wall-clock cap)
            if child.returncode is None:
                with contextlib.suppress(ProcessLookupError):  # it ended on its own just now
                    child.kill()
        return await asyncio.shield(child.wait())


async def _ask(child: asyncio.subprocess.Process, request: dict[str, Any]) -> dict[str, Any]:
    assert child.stdin is not None
    child.stdin.write(json.dumps(request).encode("ascii") + b"\n")
    await child.stdin.drain()
    return await _answer(child)


async def _answer(child: asyncio.subprocess.Process) -> dict[str, Any]:
    """The child's next frame: its length on a line, then that many bytes of JSON."""
    assert child.stdout is not None
    size = int(await child.stdout.readuntil(b"\n"))
    answer: dict[str, Any] = json.loads(await child.stdout.readexactly(size))
    return answer


def _chunks(answer: dict[str, Any], relative: str) -> list[NewChunk]:
    if "problem" in answer:
        raise ConversionError(answer["problem"])
    if "config" in answer:
        raise ConfigError(answer["config"])
    if "bug" in answer:
        raise ParserBug(f"reading a knowledge source failed in runner's parser process:\n{answer['bug']}")
    return [NewChunk(relative, seq, heading, position, text) for seq, heading, position, text in answer["chunks"]]


def _grace(exc: Exception) -> float:
    """A child whose output ended (or whose input pipe broke) has exited or is exiting: it gets
    :data:`EXIT_GRACE_SECONDS`; one that timed out or wrote garbage is killed at once."""
    return EXIT_GRACE_SECONDS if isinstance(exc, (asyncio.IncompleteReadError, ConnectionError)) else 0.0


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"
