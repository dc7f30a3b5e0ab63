"""The child process that reads source files for :mod:`runner.knowledge.parse_process`
(``python -m runner.knowledge.parse_worker``).

Once started it sends ``{"ready": true}``; then it reads one request per line on stdin (a JSON
object: ``path``, ``relative``, ``settings``) and answers each with a frame on its own stdout descriptor: the payload's length in bytes on
a line, then the payload, JSON: ``{"chunks": [[seq, heading, position, text], ...]}``, or
``{"problem": why}`` for a file that cannot be read (a :class:`ConversionError`), or
``{"config": why}`` (a missing library), or ``{"bug": traceback}``. Anything a parser prints
goes to descriptor 1, which is not the answers' (it is stderr's). It dies with its parent.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, BinaryIO

from runner.errors import ConfigError
from runner.knowledge.convert import ConversionError
from runner.knowledge.file_chunks import ChunkSettings, file_chunks

PARENT_ENV = "RUNNER_PARSE_PARENT"  # the parent's pid, set by the parent


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request."""
    try:
        chunks = file_chunks(Path(request["path"]), request["relative"], ChunkSettings.from_dict(request["settings"]))
    except ConversionError as exc:
        return {"problem": str(exc)}
    except ConfigError as exc:
        return {"config": str(exc)}
    except Exception:  # a bug of ours: the parent raises it with this traceback
        return {"bug": traceback.format_exc()}
    return {"chunks": [[c.seq, c.heading, c.position, c.text] for c in chunks]}


def main() -> None:
    _die_with_parent()
    answers: BinaryIO = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a parser that prints cannot break the frames
    _send(answers, {"ready": True})  # the parent starts a file's deadline from here
    for line in sys.stdin.buffer:
        _send(answers, answer(json.loads(line)))


def _send(answers: BinaryIO, frame: dict[str, Any]) -> None:
    payload = json.dumps(frame).encode("ascii")  # \u escapes carry any text, lone surrogates too
    answers.write(b"%d\n" % len(payload) + payload)
    answers.flush()


def _die_with_parent() -> None:
    """Linux: be killed when the parent process dies (a runner killed by a signal), rather than
    read a hostile file on for hours."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if str(os.getppid()) != os.environ.get(PARENT_ENV):  # the parent died before the call
        os._exit(1)


if __name__ == "__main__":
    main()
