"""Per-call control groups: the memory, process-count and kill switch of one sandboxed call.

``prlimit`` limits are per process: eight processes under ``memory_mb: 256`` held 1.44 GB
together. A control group bounds the call as a whole: its memory (every process, and the
pages of the sandbox's tmpfs mounts, which are charged to the process that wrote them),
its number of tasks, and it can be killed at once when the call ends.

Where the groups live: nested under the runner's own cgroup, so limits an operator put on
the runner (a systemd unit, a container) still hold for its sandboxes. cgroup v2 is used
when its ``memory`` and ``pids`` controllers can be delegated there; on hybrid hosts where
those controllers sit on v1 hierarchies (Debian 10, many VMs) the v1 files give the same
limits. Anything else is reported by :func:`probe_cgroups` with the reason, and the caller
says loudly what is not enforced.

cgroup v2 forbids processes in a cgroup that hands controllers to children ("no internal
processes"). If the runner's cgroup holds only the runner and its own children, they are
moved into a leaf ``runner.main`` first; if other processes share it, v2 is not used.

A process must enter its group before it starts anything, or early children escape. The
runner is multi-threaded, so ``preexec_fn`` is out; :func:`runner.tools.capture.run_bounded`
starts the command behind a gate (``/bin/sh`` waiting for one line on stdin) and calls
:meth:`CallCgroup.place` before opening it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner.processes import pid_alive

NEEDED = ("memory", "pids")
MAIN_LEAF = "runner.main"
CALL_PREFIX = "runner-call-"
_CALL_NAME = re.compile(rf"{re.escape(CALL_PREFIX)}(\d+)-[0-9a-f]+")
_KILL_ROUNDS = 200


class CgroupError(OSError):
    """A control group could not be set up or used."""


@dataclass(frozen=True)
class CgroupLimits:
    """What one call may use in total."""

    memory_bytes: int
    max_tasks: int


@dataclass(frozen=True)
class CgroupEvents:
    """Limits the call ran into: processes killed for memory."""

    oom_kills: int = 0


@dataclass(frozen=True)
class CgroupSupport:
    """Whether per-call groups work here (``version``), under which parents, or why not.

    v2 has one parent; v1 has the memory parent, then the pids parent.
    """

    version: Literal[1, 2] | None
    parents: tuple[Path, ...] = ()
    reason: str = ""

    @property
    def usable(self) -> bool:
        return self.version is not None


@dataclass(frozen=True)
class Mount:
    """One cgroup filesystem from ``/proc/self/mountinfo``."""

    point: Path
    root: str
    fstype: str
    options: frozenset[str]


class CallCgroup:
    """The group (v2) or pair of groups (v1: memory, pids) of one call.

    Use as a context manager: on exit every process in it is killed and the groups are
    removed.
    """

    def __init__(self, support: CgroupSupport, limits: CgroupLimits):
        self.version = support.version
        name = f"{CALL_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.paths = tuple(parent / name for parent in support.parents)
        try:
            for path in self.paths:
                path.mkdir()
            self._limit(limits)
        except OSError as error:
            self._remove()
            raise CgroupError(
                error.errno, f"cannot set up the call's cgroup {self.paths[0]}: {error.strerror}"
            ) from error

    def __enter__(self) -> CallCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def place(self, pid: int) -> None:
        """Move ``pid`` (waiting at its start gate) into the call's group(s)."""
        for path in self.paths:
            _write(path / "cgroup.procs", str(pid))

    def events(self) -> CgroupEvents:
        """Counters of limits hit so far."""
        if self.version == 2:
            return CgroupEvents(_keyed(self.paths[0] / "memory.events").get("oom_kill", 0))
        return CgroupEvents(_keyed(self.paths[0] / "memory.oom_control").get("oom_kill", 0))

    def close(self) -> None:
        """Kill everything left in the group, wait for it to be empty and remove it."""
        _kill_all(self.paths[-1], use_kill_file=self.version == 2)
        self._remove()

    def _limit(self, limits: CgroupLimits) -> None:
        if self.version == 2:
            group = self.paths[0]
            _write(group / "memory.max", str(limits.memory_bytes))
            _write_if_present(group / "memory.swap.max", "0")
            _write_if_present(group / "memory.oom.group", "1")  # one OOM kill ends the whole call
            _write(group / "pids.max", str(limits.max_tasks))
        else:
            memory, pids = self.paths
            _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
            _write_if_present(memory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            _write(pids / "pids.max", str(limits.max_tasks))

    def _remove(self) -> None:
        for path in self.paths:
            _rmdir(path)


@functools.cache
def probe_cgroups() -> CgroupSupport:
    """Find out once per process whether per-call groups work here."""
    return detect(Path("/proc/self/mountinfo"), Path("/proc/self/cgroup"))


def detect(mountinfo: Path, membership: Path) -> CgroupSupport:
    """:func:`probe_cgroups` reading the given ``mountinfo`` and ``/proc/self/cgroup`` files."""
    try:
        mounts = parse_mountinfo(mountinfo.read_text())
        own = parse_membership(membership.read_text())
    except OSError as error:
        return CgroupSupport(None, reason=f"cannot read {error.filename}: {error.strerror}")
    reasons = []
    for attempt in (_v2_support, _v1_support):
        support = attempt(mounts, own)
        if support.usable:
            return support
        reasons.append(support.reason)
    return CgroupSupport(None, reason="; ".join(reasons))


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts listed in a ``mountinfo`` file."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append(Mount(Path(_unescape(fields[4])), _unescape(fields[3]), tail[0], frozenset(tail[2].split(","))))
    return mounts


def parse_membership(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as controller -> path (``""`` is the v2 unified hierarchy)."""
    own: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            own[controller] = parts[2]
    return own


def _v2_support(mounts: list[Mount], own: dict[str, str]) -> CgroupSupport:
    mount = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if mount is None or "" not in own:
        return CgroupSupport(None, reason="cgroup v2: not mounted")
    here = _located(mount, own[""])
    if here is None:
        return CgroupSupport(None, reason=f"cgroup v2: the runner's cgroup {own['']} is outside {mount.point}")
    if here.name == MAIN_LEAF and _enabled(here.parent) >= set(NEEDED):
        here = here.parent  # a runner earlier in this process tree prepared it
    offered = set(_read(here / "cgroup.controllers").split()) if (here / "cgroup.controllers").exists() else set()
    if not offered >= set(NEEDED):
        return CgroupSupport(
            None,
            reason=f"cgroup v2: {here} offers controllers {' '.join(sorted(offered)) or 'none'}; memory and pids are needed",
        )
    try:
        _delegate(here)
        _check_writable(here)
    except OSError as error:
        return CgroupSupport(None, reason=f"cgroup v2: {error.strerror or error}")
    _remove_stale(here)
    return CgroupSupport(2, (here,))


def _v1_support(mounts: list[Mount], own: dict[str, str]) -> CgroupSupport:
    parents = []
    for controller in NEEDED:
        mount = next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)
        here = _located(mount, own[controller]) if mount is not None and controller in own else None
        if here is None:
            return CgroupSupport(None, reason=f"cgroup v1: no {controller} hierarchy holds the runner")
        try:
            _check_writable(here)
        except OSError as error:
            return CgroupSupport(None, reason=f"cgroup v1: {error.strerror or error}")
        _remove_stale(here)
        parents.append(here)
    return CgroupSupport(1, tuple(parents))


def _delegate(here: Path) -> None:
    """Enable memory and pids for children of ``here``, moving the runner out of the way if needed."""
    if _enabled(here) >= set(NEEDED):
        return
    try:
        _write(here / "cgroup.subtree_control", " ".join(f"+{c}" for c in NEEDED))
        return
    except OSError as error:
        if error.errno != errno.EBUSY:
            raise CgroupError(error.errno, f"cannot enable memory and pids in {here}: {error.strerror}") from error
    others = [pid for pid in _procs(here) if not _is_ours(pid)]
    if others:
        raise CgroupError(
            errno.EBUSY,
            f"{here} also holds {len(others)} process(es) that are not the runner's, so it cannot hand "
            "memory and pids to per-call groups; start the runner in a cgroup of its own "
            "(systemd: Delegate=yes; containers: run the runner as the only process)",
        )
    leaf = here / MAIN_LEAF
    leaf.mkdir(exist_ok=True)
    for pid in _procs(here):
        with contextlib.suppress(ProcessLookupError):
            _write(leaf / "cgroup.procs", str(pid))
    _write(here / "cgroup.subtree_control", " ".join(f"+{c}" for c in NEEDED))


def _check_writable(here: Path) -> None:
    """Create and remove a probe group: cgroupfs is often mounted read-only in containers."""
    probe = here / f"{CALL_PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
    except FileExistsError:
        pass
    except OSError as error:
        raise CgroupError(error.errno, f"cannot create a cgroup under {here}: {error.strerror}") from error
    _rmdir(probe)


def _remove_stale(here: Path) -> None:
    """Remove empty call groups left behind by runners that died (kill -9)."""
    with contextlib.suppress(OSError):
        for child in here.iterdir():
            match = _CALL_NAME.fullmatch(child.name)
            if match and not pid_alive(int(match.group(1))):
                _rmdir(child)


def _kill_all(group: Path, *, use_kill_file: bool) -> None:
    """SIGKILL every process in ``group`` until it is empty (bounded rounds)."""
    if use_kill_file and (group / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            _write(group / "cgroup.kill", "1")
    for attempt in range(_KILL_ROUNDS):
        pids = _procs(group)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(min(0.001 * (attempt + 1), 0.05))  # killed tasks leave the group asynchronously


def _rmdir(path: Path) -> None:
    for attempt in range(_KILL_ROUNDS):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY:
                return
            time.sleep(min(0.001 * (attempt + 1), 0.05))


def _located(mount: Mount, cgroup_path: str) -> Path | None:
    """Where ``cgroup_path`` (from /proc/self/cgroup) is under ``mount``."""
    root = mount.root.rstrip("/")
    if root and not (cgroup_path == root or cgroup_path.startswith(root + "/")):
        return None
    relative = cgroup_path[len(root) :].strip("/")
    if ".." in relative.split("/"):
        return None
    return mount.point / relative if relative else mount.point


def _enabled(group: Path) -> set[str]:
    try:
        return set(_read(group / "cgroup.subtree_control").split())
    except OSError:
        return set()


def _procs(group: Path) -> list[int]:
    try:
        return [int(line) for line in _read(group / "cgroup.procs").split()]
    except FileNotFoundError:
        return []


def _is_ours(pid: int) -> bool:
    """Whether ``pid`` is the runner or one of its descendants."""
    me = os.getpid()
    for _ in range(64):
        if pid == me:
            return True
        if pid <= 1:
            return False
        try:
            stat_fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return False
        pid = int(stat_fields[1])
    return False


def _keyed(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file (``name value`` per line)."""
    counters: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            with contextlib.suppress(ValueError):
                counters[name] = int(value)
    return counters


def _read(path: Path) -> str:
    with open(path) as handle:
        return handle.read()


def _write(path: Path, value: str) -> None:
    # one write() per value: cgroupfs parses each write on its own
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _write_if_present(path: Path, value: str) -> None:
    """Set an optional knob (swap accounting and ``memory.oom.group`` are not always there)."""
    with contextlib.suppress(FileNotFoundError):
        _write(path, value)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\ooo``."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)
