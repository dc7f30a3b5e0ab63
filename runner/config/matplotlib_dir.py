"""A lasting place for matplotlib's font cache when this user's home cannot hold it.

matplotlib keeps its font list in ``$MPLCONFIGDIR``, else ``$XDG_CONFIG_HOME/matplotlib``, else
``~/.config/matplotlib``. A service account often has no writable home (an Airflow worker
started as a system user, ``useradd --system``): matplotlib then makes a new temporary
directory in every process, rebuilds the font cache there (seconds of a task's time, inside
its ``execution_timeout``) and warns in every task log. :func:`keep_matplotlib_cache` points
it at the runner's per-user cache (``$RUNNER_STATE_DIR/user-cache/matplotlib`` for such a
user, see :func:`runner.config.compiled.user_cache_dir`), built once, reused by every task.
Call it before matplotlib is imported: on import, matplotlib sets ``$MPLCONFIGDIR`` to the
temporary directory it made.
"""

from __future__ import annotations

import os
from pathlib import Path

MPL_ENV = "MPLCONFIGDIR"


def keep_matplotlib_cache() -> Path | None:
    """Set ``$MPLCONFIGDIR`` to the runner's per-user cache when matplotlib's own place is not
    writable; the directory set, or ``None`` when nothing was changed (set already, a
    writable default, or no per-user cache either: matplotlib's temporary directory stays)."""
    from runner.config.compiled import user_cache_dir

    if os.environ.get(MPL_ENV, "").strip() or _writable(_default_dir()):
        return None
    try:
        target = user_cache_dir() / "matplotlib"
    except RuntimeError:
        return None
    if not _writable(target):
        return None
    os.environ[MPL_ENV] = str(target)
    return target


def _default_dir() -> Path | None:
    base = os.environ.get("XDG_CONFIG_HOME", "")
    try:
        return (Path(base) if os.path.isabs(base) else Path.home() / ".config") / "matplotlib"
    except RuntimeError:  # no $HOME and no passwd entry
        return None


def _writable(directory: Path | None) -> bool:
    """Whether ``directory`` is, or is now made (as matplotlib would make it), a directory this user writes."""
    if directory is None:
        return False
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK | os.X_OK)
