"""A run's workspace on the host: where it lives, how it is wiped and how task files get in.

Sandboxed code owns everything inside the workspace, and the runner is often root. So no
host-side operation here follows a link: an entry is looked at with ``lstat`` relative to
a directory fd, compared through :func:`runner.tools.paths.open_beneath` (``openat2`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``), and replaced by writing a temporary file
created with ``O_EXCL | O_NOFOLLOW`` and renaming it over the entry (a rename replaces a
link, it never writes through one). A task file that sandboxed code replaced by a symbolic
link, FIFO, device, socket, directory or hard-linked file stops the run with
:class:`WorkspaceTampered` (exit 1), recorded in the run store, and is never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from runner.config.project import Project
from runner.config.specs import TaskSpec
from runner.core.steps import StepRecord
from runner.errors import ConfigError, WorkspaceTampered
from runner.local_state import state_dir, state_path
from runner.redact import redact
from runner.runs.options import RunOptions
from runner.tools.paths import open_beneath

_CHUNK = 1 << 20


def default_workspace(root: Path, run_id: str, *, checked: bool = True) -> Path:
    """Where run ``run_id`` keeps its files (tables, charts) unless told otherwise (in the state
    directory); ``checked=False`` skips the check of every link on the way, for a workspace that
    is never made, written or wiped."""
    if not checked:
        return state_dir(root) / "workspaces" / run_id
    return state_path(root, "workspaces", run_id, holds="run workspaces", wiped=True)


def run_workspace(project: Project, task: TaskSpec, run_id: str, options: RunOptions, *, fresh: bool) -> Path:
    """The run's own workspace; task files are copied in (never linked).

    Created only when the task uses tools or files. A retry that reuses no earlier step
    (``fresh``) starts from an empty workspace, so the tool side effects of a failed
    attempt are wiped; one that reuses steps keeps it, since later steps need what earlier
    ones wrote, and then every task file is checked before it is compared or replaced.
    """
    used = uses_workspace(project, task)
    # One never made, written or wiped skips the checks of every link on the way (about a tenth
    # of a tool-less batch row's CPU): they guard only what writes there.
    checked = used or fresh
    workspace = (options.workspace_dir or default_workspace(project.root, run_id, checked=checked)).resolve()
    if fresh and options.workspace_dir is None:
        wipe_workspace(workspace)
    if not used:
        return workspace
    _make_directory(workspace)
    for rel in task.workspace_files:
        source = (project.root / rel).resolve()
        if not source.is_relative_to(project.root) or not source.is_file():
            raise ConfigError(f"{task.source}: workspace file '{rel}' is not a file inside the project")
        try:
            copy_into_workspace(workspace, source, Path(rel).name)
        except WorkspaceTampered as tampered:  # a link's target is model-written text: it may hold a key
            from runner.runs.secrets import known_secrets

            raise WorkspaceTampered(redact(str(tampered), known_secrets(project, options))) from None
    return workspace


def reusable_steps(
    project: Project, task: TaskSpec, run_id: str, options: RunOptions, completed: Mapping[str, StepRecord]
) -> tuple[dict[str, StepRecord], str | None]:
    """Which of an earlier attempt's ``completed`` steps a resumed run reuses, and a warning.

    On the machine that ran the earlier attempt, all of them. Where its workspace is gone (a
    retry on another worker, or a wiped disk) the tool steps run again: they cost nothing
    and rebuild the files later steps read (tables, charts). Agent steps are still reused
    from the run store (they were paid for); files their tool calls wrote are not restored,
    and the warning names them.
    """
    if not completed or not uses_workspace(project, task):  # a first attempt: no path checks (run_workspace makes them)
        return dict(completed), None
    workspace = options.workspace_dir or default_workspace(project.root, run_id)
    if os.path.lexists(workspace):
        return dict(completed), None
    kept = {step_id: record for step_id, record in completed.items() if record.kind != "tool"}
    rerun = sorted(set(completed) - set(kept))
    if not rerun:
        return kept, None
    lost = sorted({path for record in kept.values() for path in record.artifacts})
    files = f"; files the reused agent steps wrote are not here: {', '.join(lost[:10])}" if lost else ""
    return kept, (
        f"the workspace of an earlier attempt is not on this machine (another worker, or a wiped disk): "
        f"its tool step(s) {', '.join(rerun)} ran again (they cost nothing); agent step(s) "
        f"{', '.join(sorted(kept)) or 'none'} were reused from the run store{files}"
    )


def wipe_workspace(workspace: Path) -> None:
    """Remove ``workspace`` and everything in it, deleting links rather than following them."""
    try:
        info = os.lstat(workspace)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        raise WorkspaceTampered(f"cannot wipe the workspace {workspace}: it is not a directory ({_kind(info.st_mode)})")
    from runner.tools.disk_quota import remove_tree  # loaded only when there is a workspace to wipe

    try:
        remove_tree(workspace)
    except OSError as error:
        raise WorkspaceTampered(
            f"cannot wipe the workspace {workspace} for a fresh attempt: {error.strerror or error}; "
            "remove it by hand, then retry"
        ) from None


def copy_into_workspace(workspace: Path, source: Path, name: str) -> None:
    """Put the project file ``source`` into ``workspace`` as ``name``, unless an identical
    copy is already there. An entry that is not a singly-linked regular file raises
    :class:`WorkspaceTampered` and is left alone."""
    with _directory_fd(workspace) as root_fd, _open_source(source) as source_fd:
        try:
            info = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        if info is not None:
            _require_untouched(root_fd, name, info)
            if _same_content(source_fd, root_fd, name):
                return
            os.lseek(source_fd, 0, os.SEEK_SET)
        _replace_with_copy(source_fd, root_fd, name)


def uses_workspace(project: Project, task: TaskSpec) -> bool:
    """Whether a run of ``task`` writes a workspace (it has task files, or tools)."""
    uses_tools = bool(task.workspace_files) or any(project.agents[a].tools for a in task.agents_used())
    return uses_tools or bool(task.pipeline and any(s.tool or s.tools for s in task.pipeline.steps))


def _make_directory(workspace: Path) -> None:
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise WorkspaceTampered(f"the workspace {workspace} exists but is not a directory; remove it") from None
    except OSError as error:
        raise WorkspaceTampered(f"cannot create the workspace {workspace}: {error.strerror or error}") from None


@contextlib.contextmanager
def _directory_fd(workspace: Path) -> Iterator[int]:
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _open_source(source: Path) -> Iterator[int]:
    """The project file, opened without following a link swapped in since it was resolved."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"workspace file {source} is not a regular file")
        os.set_blocking(fd, True)
        yield fd
    finally:
        os.close(fd)


def _require_untouched(root_fd: int, name: str, info: os.stat_result) -> None:
    """Refuse a task file that sandboxed code replaced by anything but a plain file."""
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        return
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(name, dir_fd=root_fd)
        what = f"a symbolic link (to {target[:200]!r})"
    elif stat.S_ISREG(info.st_mode):
        what = f"a file with {info.st_nlink} hard links (it may be a host file)"
    else:
        what = _kind(info.st_mode)
    raise WorkspaceTampered(
        f"workspace file {name!r} was replaced by {what} during an earlier attempt; it was not "
        "followed or overwritten. Start a new run (without --run-id) to begin from a clean workspace"
    )


def _same_content(source_fd: int, root_fd: int, name: str) -> bool:
    try:
        target_fd = open_beneath(root_fd, name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as error:
        raise WorkspaceTampered(
            f"workspace file {name!r} cannot be opened safely: {os.strerror(error.errno or 0)}"
        ) from None
    try:
        info = os.fstat(target_fd)  # the very file opened: a swap after the lstat is caught here
        _require_untouched(root_fd, name, info)
        if info.st_size != os.fstat(source_fd).st_size:
            return False
        os.set_blocking(target_fd, True)
        while True:
            ours, theirs = os.read(source_fd, _CHUNK), os.read(target_fd, _CHUNK)
            if ours != theirs:
                return False
            if not ours:
                return True
    finally:
        os.close(target_fd)


def _replace_with_copy(source_fd: int, root_fd: int, name: str) -> None:
    """Write a new file next to ``name`` and rename it over ``name`` (links are replaced)."""
    temp = f".{name[:64]}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o644, dir_fd=root_fd)
    try:
        with os.fdopen(fd, "wb", closefd=False) as handle:
            while chunk := os.read(source_fd, _CHUNK):
                handle.write(chunk)
        os.replace(temp, name, src_dir_fd=root_fd, dst_dir_fd=root_fd)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=root_fd)
        if error.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
            raise WorkspaceTampered(f"workspace file {name!r} was replaced by a directory; it was left alone") from None
        raise
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    kinds = {
        stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symbolic link",
        stat.S_IFREG: "a regular file",
    }  # fmt: skip
    return kinds.get(stat.S_IFMT(mode), "a special file")
