"""Where the runner keeps a project's local state on this machine: the SQLite run store, batch
journals, run workspaces, knowledge and memory indexes and the compiled project cache.

By default that is ``<root>/.runner``. A project on a read-only mount (a container image, a
deployed checkout that an Airflow worker's user may not write) sets ``$RUNNER_STATE_DIR`` to a
writable directory instead (one per project: the files are not named after the project; a
relative value is taken from the project root, never from the working directory, which
under Airflow is whatever the worker started in). Nothing else moves: reports go to
``--reports-dir`` / ``$RUNNER_REPORTS_DIR`` (Airflow) or ``<root>/reports``.

:func:`require_writable` turns a directory this process cannot write into one
:class:`~runner.errors.UsageError` naming the directory, what goes there and the fix, so a
run on a read-only project stops before anything is spent.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from runner.errors import UsageError

STATE_DIR_ENV = "RUNNER_STATE_DIR"
"""The environment variable that moves a project's local state out of ``<root>/.runner``."""
DEFAULT_STATE_DIR = ".runner"
FANOUT_WORK_DIR_ENV = "RUNNER_AIRFLOW_WORK_DIR"
"""Where Airflow fan-outs keep their shared files (journals, outputs, an SQLite cap ledger)."""
DEFAULT_FANOUT_WORK_DIR = "/tmp/runner-airflow"


def state_dir(root: Path) -> Path:
    """``$RUNNER_STATE_DIR`` (relative to ``root`` when relative), else ``<root>/.runner``.

    A ``<root>/.runner`` that is a symbolic link leading out of the project is refused (a
    :class:`UsageError`): a checked-out project could otherwise point the runner's writes
    (stores, journals, workspaces it wipes) anywhere; ``$RUNNER_STATE_DIR`` names such a place
    explicitly."""
    configured = os.environ.get(STATE_DIR_ENV, "").strip()
    if not configured:
        _refuse_escaping_link(root, root / DEFAULT_STATE_DIR)
        return root / DEFAULT_STATE_DIR
    return root / Path(configured).expanduser()  # an absolute value replaces root


SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal", ".lock")
"""The names an SQLite file of the runner has next to it (its journals and our ``flock`` file),
each opened and written in place: none may be a link out of the project or a hard link."""


def state_path(root: Path, *parts: str, holds: str, sqlite: bool = False, wiped: bool = False) -> Path:
    """``state_dir(root) / parts``, refused (a :class:`UsageError` naming the link and the fix)
    when a symbolic link below the project (or below ``$RUNNER_STATE_DIR``) leads it out, or
    (``sqlite``) when the file or one of its :data:`SQLITE_SIDE_FILES` is such a link or a hard
    link. A place the runner ``wiped`` (run workspaces) may hold no symbolic link at all below
    the state directory: one to another folder of the project would have that folder wiped."""
    directory = state_dir(root)
    anchor = directory if os.environ.get(STATE_DIR_ENV, "").strip() else root
    where = f"the state directory {directory}" if anchor == directory else "the project"
    fix = f"remove it (the runner makes its own), or set ${STATE_DIR_ENV} to where the local state should go"
    path = directory.joinpath(*parts)
    if wiped:
        for depth in range(1, len(parts) + 1):
            if (link := directory.joinpath(*parts[:depth])).is_symlink():
                raise UsageError(
                    f"cannot use {link} ({holds}): it is a symbolic link (to {link.resolve()}), and the runner wipes "
                    f"and rewrites what is there, so it follows no link; {fix}"
                )
    return confined(path, anchor, holds, fix, where=where, sides=SQLITE_SIDE_FILES if sqlite else ())


def confined(path: Path, anchor: Path, holds: str, fix: str, *, where: str = "the project", sides: tuple[str, ...] = ()) -> Path:
    """``path`` (below ``anchor``), after checking that no symbolic link on the way from
    ``anchor`` leads out of it, and that none of ``path`` + ``sides`` (files written in place)
    is a symbolic link out of ``anchor`` or a hard link; a :class:`UsageError` names the link,
    what the place ``holds`` and the ``fix`` otherwise. Links that stay inside are followed."""
    inside = anchor.resolve()
    current = anchor
    for part in path.relative_to(anchor).parts:
        current = current / part
        _refuse_link_out(current, inside, holds, fix, where)
    for side in sides:
        file = Path(f"{path}{side}")
        _refuse_link_out(file, inside, holds, fix, where)
        _refuse_hard_link(file, holds)
    return path


def confined_tree(directory: Path, anchor: Path, holds: str, fix: str) -> Path:
    """:func:`confined` for a default output directory below ``anchor`` (the project) and for
    everything already in it: a directory whose file names are known in advance (a resumed
    run's report, an eval's journals and outputs) could otherwise hold a planted link."""
    confined(directory, anchor, holds, fix)
    inside = anchor.resolve()
    for folder, names, files in os.walk(directory):  # links to directories are listed, never entered
        for name in (*names, *files):
            entry = Path(folder) / name
            _refuse_link_out(entry, inside, holds, fix, "the project")
            _refuse_hard_link(entry, holds)
    return directory


def _refuse_link_out(path: Path, inside: Path, holds: str, fix: str, where: str) -> None:
    if not path.is_symlink():
        return
    target = path.resolve()
    if not target.is_relative_to(inside):
        raise UsageError(
            f"cannot use {path} ({holds}): it is a symbolic link to {target}, outside {where}, and the runner does not "
            f"write through such links; {fix}"
        )


def _refuse_hard_link(path: Path, holds: str) -> None:
    try:
        info = path.stat()
    except OSError:
        return
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        raise UsageError(
            f"cannot use {path} ({holds}): it is a hard link (the same file has {info.st_nlink} names, perhaps outside the "
            f"project), and the runner writes this file in place; replace it by a copy of its own (cp {path.name} "
            f"{path.name}.copy && mv {path.name}.copy {path.name}), or move it away"
        )


def refuse_outside(directory: Path, inside: Path, holds: str, fix: str) -> None:
    """A :class:`UsageError` naming ``directory`` (a default place in the project, holding
    ``holds``) and the ``fix`` when a symbolic link leads it out of ``inside``."""
    target = directory.resolve()
    if not target.is_relative_to(inside.resolve()):
        raise UsageError(
            f"cannot use {directory} ({holds}): a symbolic link leads it out of the project (to {target}), and the "
            f"runner writes only inside the project unless told otherwise; {fix}, or remove the link"
        )


def not_a_directory(path: Path) -> Path | None:
    """The first of ``path`` and its parents that exists but is not a directory (a regular
    file where a directory should be), or ``None``."""
    for part in reversed([path, *path.parents]):
        if part.exists() and not part.is_dir():
            return part
    return None


def _refuse_escaping_link(root: Path, default: Path) -> None:
    if not default.is_symlink():
        return
    target = default.resolve()
    if not target.is_relative_to(root.resolve()):
        raise UsageError(
            f"{default} is a symbolic link to {target}, outside the project; the runner does not follow it. "
            f"To keep the local state there, set ${STATE_DIR_ENV}={target} (or remove the link)"
        )


def require_writable(directory: Path, holds: str, fix: str, *, inside: Path | None = None) -> None:
    """Make ``directory`` (and its parents) if needed; raise a :class:`UsageError` that names
    it, what it ``holds`` and the ``fix`` when this process cannot create or write it, or
    (``inside`` given: a default place in the project) when a symbolic link leads it out of ``inside``."""
    if inside is not None:
        refuse_outside(directory, inside, holds, fix)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        if (blocker := not_a_directory(directory)) is not None:
            raise UsageError(_not_a_directory(directory, blocker, holds, fix)) from None
        raise UsageError(_message(directory, holds, fix, error.errno, error.strerror)) from None
    if not directory.is_dir():
        raise UsageError(_not_a_directory(directory, not_a_directory(directory) or directory, holds, fix))
    if not os.access(directory, os.W_OK | os.X_OK):  # EROFS and permissions both show here
        read_only = _on_read_only_mount(directory)
        raise UsageError(_message(directory, holds, fix, errno.EROFS if read_only else errno.EACCES, None))


def _message(directory: Path, holds: str, fix: str, code: int | None, reason: str | None) -> str:
    why = reason or os.strerror(code or errno.EACCES)
    if code == errno.EACCES:
        why += f" for user {_user()}"
    return f"cannot write {directory} ({holds}): {why}; {fix}"


def _not_a_directory(directory: Path, blocker: Path, holds: str, fix: str) -> str:
    where = "it" if blocker == directory else str(blocker)
    return f"cannot use {directory} ({holds}): {where} is a file, not a directory; move that file away, or {fix}"


def _on_read_only_mount(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _user() -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(os.geteuid()).pw_name} (uid {os.geteuid()})"
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}"
