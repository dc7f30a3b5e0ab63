"""Put on ``PYTHONPATH`` of a ``runner`` process: registers ``hang://``, an fsspec filesystem
whose every storage call blocks for ever (a storage that accepts a connection and never
answers), so tests can show that the runner's remote writes are bounded by a deadline."""

from __future__ import annotations

import threading
from typing import Any

import fsspec
from fsspec import AbstractFileSystem


class HangingFileSystem(AbstractFileSystem):
    """Every read, write, listing and directory call waits for ever."""

    protocol = "hang"

    def _never(self, *args: Any, **kwargs: Any) -> Any:
        threading.Event().wait()


for _name in ("makedirs", "mkdir", "pipe_file", "put_file", "cat_file", "rm_file", "exists", "info", "ls", "_open", "open", "put", "pipe"):
    setattr(HangingFileSystem, _name, HangingFileSystem._never)

fsspec.register_implementation("hang", HangingFileSystem, clobber=True)
