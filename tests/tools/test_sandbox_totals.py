"""Per-call totals of the sandbox, attempted from real sandboxed code: memory and processes
over the whole call (control groups), the size of /tmp and /dev/shm, the workspace's disk
quota, and the seccomp filter."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from runner.errors import ToolFailure
from runner.tools.base import ToolContext
from runner.tools.capture import run_bounded
from runner.tools.cgroups import CALL_PREFIX, CallCgroup, CgroupLimits, parse_membership, probe_cgroups
from runner.tools.disk_quota import DiskQuota
from runner.tools.registry import ToolRegistry
from runner.tools.sandbox import SandboxPolicy, run_command
from tests.support.hostile_code import MEMORY_HOGS
from tests.tools.test_sandbox_escapes import wait_until_gone

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow(reason="fills sandboxes to their limits: cgroups, quotas, memory hogs")]
MIB = 1024 * 1024
needs_cgroups = pytest.mark.skipif(
    not probe_cgroups().usable, reason=f"per-call cgroups are not usable here: {probe_cgroups().reason}"
)


async def outcome(registry: ToolRegistry, ctx: ToolContext, tool: str, arguments: dict[str, str]) -> tuple[bool, str]:
    """(succeeded, what the model sees) for one call."""
    try:
        return True, (await registry.invoke(tool, arguments, ctx)).content
    except ToolFailure as failure:
        return False, str(failure)


def call_groups() -> list[Path]:
    found = []
    for parent in probe_cgroups().parents:
        found += [child for child in parent.iterdir() if child.name.startswith(CALL_PREFIX)]
    return found


# --- memory and processes over the whole call ------------------------------------------------


@needs_cgroups
async def test_eight_memory_hogs_under_256_mb_end_the_call(registry, make_ctx):
    ctx = make_ctx(sandbox=SandboxPolicy(memory_mb=256, wall_seconds=60))
    ok, text = await outcome(registry, ctx, "python", {"code": MEMORY_HOGS})
    assert not ok
    assert text.startswith("killed: the call's processes together exceeded its memory limit of 256 MB"), text
    assert "ALL ALLOCATED" not in text
    assert call_groups() == []


@needs_cgroups
async def test_memory_in_tmpfs_counts_against_the_call(registry, make_ctx):
    """/tmp sized above memory_mb: the pages written there are the call's memory."""
    ctx = make_ctx(sandbox=SandboxPolicy(memory_mb=128, tmp_mb=1024, max_file_mb=32, wall_seconds=60))
    code = (
        "written = 0\n"
        "for i in range(20):\n"
        "    with open(f'/tmp/f{i}', 'wb') as f:\n"
        "        f.write(b'x' * 30 * 1024 * 1024)\n"
        "    written += 30\n"
        "print('WROTE', written, 'MB')\n"
    )
    ok, text = await outcome(registry, ctx, "python", {"code": code})
    assert not ok
    assert "exceeded its memory limit of 128 MB" in text
    assert "WROTE 600 MB" not in text


ESCAPING = """
import os, sys
ready_r, ready_w = os.pipe()
for _ in range(8):
    if os.fork() == 0:
        os.setsid()  # out of the process group the runner kills
        block = bytearray(b'x') * ({mb} * 1024 * 1024)
        os.write(ready_w, b'+')
        if {detach}:
            os.execv('/bin/sleep', ['sleep', sys.argv[1]])
        os.pause()
held = 0
while held < 8:
    held += len(os.read(ready_r, 8))
print('ALL HELD', flush=True)
"""


@needs_cgroups
def test_hogs_that_left_the_process_group_end_the_call(workspace):
    code = ESCAPING.format(mb=60, detach=False)
    result = run_command(["/usr/bin/python3", "-c", code, "-"], workspace, SandboxPolicy(mode="none", memory_mb=256))
    assert result.exceeded == "memory", result.render()
    assert "ALL HELD" not in result.stdout
    assert call_groups() == []


@needs_cgroups
def test_children_that_called_setsid_die_when_a_mode_none_call_ends(workspace):
    """killpg misses them and mode none has no PID namespace: the group's kill does not."""
    marker = f"{uuid.uuid4().int % 10**6}.625"
    code = ESCAPING.format(mb=1, detach=True)
    result = run_command(["/usr/bin/python3", "-c", code, marker], workspace, SandboxPolicy(mode="none"))
    assert result.ok and "ALL HELD" in result.stdout, result.render()
    assert wait_until_gone(marker) == []
    assert call_groups() == []


@needs_cgroups
async def test_mode_none_is_bounded_per_call_too(registry, make_ctx):
    marker = f"{uuid.uuid4().int % 10**6}.375"
    ctx = make_ctx(sandbox=SandboxPolicy(mode="none", max_processes=8, wall_seconds=60))
    code = (
        "import os\ncount = 0\n"
        "for _ in range(100):\n"
        "    try:\n        pid = os.fork()\n    except OSError as e:\n        print('fork refused:', e.strerror); break\n"
        f"    if pid == 0:\n        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "    count += 1\n"
        "print('children', count)\n"
    )
    _, text = await outcome(registry, ctx, "python", {"code": code})
    assert "fork refused" in text
    assert int(text.split("children ")[1].split()[0]) < 8
    assert wait_until_gone(marker) == []


def test_calls_within_limits_leave_no_group_behind(workspace):
    for mode in ("bwrap", "none"):
        result = run_command(["/bin/sh", "-c", "sleep 0.1 & echo ok"], workspace, SandboxPolicy(mode=mode))
        assert result.ok, result.render()
        assert result.exceeded is None and result.unenforced == ()
    assert call_groups() == []


# --- /tmp and /dev --------------------------------------------------------------------------

FLOOD = (
    "import errno, sys\nwritten = 0\n"
    "try:\n"
    "    for i in range(1000):\n"
    "        with open(f'{sys.argv[1]}/f{i}', 'wb') as f:\n"
    "            f.write(b'x' * 4 * 1024 * 1024)\n"
    "        written += 4 * 1024 * 1024\n"
    "except OSError as e:\n"
    "    print('stopped', errno.errorcode[e.errno])\n"
    "print('written', written)\n"
)


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm", "/tmp/nested"])
def test_tmpfs_flood_is_bounded_by_tmp_mb(workspace, where):
    policy = SandboxPolicy(tmp_mb=32, memory_mb=512, wall_seconds=60)
    command = ["/usr/bin/python3", "-c", f"import os; os.makedirs({where!r}, exist_ok=True)\n{FLOOD}", where]
    result = run_command(command, workspace, policy)
    assert "stopped ENOSPC" in result.stdout, result.render()
    assert int(result.stdout.split("written ")[1]) <= 32 * MIB


def test_the_rest_of_dev_is_read_only(workspace):
    code = "try:\n    open('/dev/flood', 'wb').write(b'x')\n    print('WROTE')\nexcept OSError as e:\n    print(e.strerror)"
    result = run_command(["/usr/bin/python3", "-c", code], workspace, SandboxPolicy())
    assert "Read-only file system" in result.stdout, result.render()


def test_multiprocessing_still_works_with_the_sized_dev_shm(workspace):
    code = "import multiprocessing as mp\nwith mp.Pool(2) as pool:\n    print(sum(pool.map(abs, range(-5, 5))))"
    result = run_command(["/usr/bin/python3", "-c", code], workspace, SandboxPolicy(wall_seconds=60))
    assert result.ok and result.stdout.strip() == "25", result.render()


# --- the workspace's disk quota ---------------------------------------------------------------


def workspace_files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.lstat().st_size for p in root.rglob("*")}


async def test_workspace_flood_beyond_disk_mb_is_refused_and_removed(registry, make_ctx, workspace):
    (workspace / "input.csv").write_text("a,b\n1,2\n")
    before = workspace_files(workspace)
    ctx = make_ctx(sandbox=SandboxPolicy(disk_mb=40, max_file_mb=16, wall_seconds=120))
    code = (
        "import os\nos.makedirs('out/parts', exist_ok=True)\n"
        "for i in range(200):\n"
        "    with open(f'out/parts/p{i}', 'wb') as f:\n"
        "        f.write(b'x' * 10 * 1024 * 1024)\n"
        "print('FINISHED')\n"
    )
    ok, text = await outcome(registry, ctx, "python", {"code": code})
    assert not ok
    assert text.startswith("refused: the call made the workspace"), text
    assert "over its disk quota of 40 MB (sandbox.disk_mb)" in text
    assert "removed what the call wrote: out" in text
    assert "FINISHED" not in text  # stopped while running, not at the wall-clock limit
    assert "wall-clock" not in text
    assert workspace_files(workspace) == before


@pytest.mark.parametrize(
    ("name", "command"),
    [
        ("empty files", "i=0; while [ $i -lt 20000 ]; do : > e$i; i=$((i+1)); done"),
        ("directories", "python3 -c \"import os\nfor i in range(12000):\n    os.mkdir(f'd{i}')\""),
        ("sparse file", "truncate -s 60M sparse"),
        ("hard links", "head -c 1048576 /dev/zero > big && i=0; while [ $i -lt 60 ]; do ln big l$i; i=$((i+1)); done"),
        ("deep nesting", "python3 -c \"import os\nfor _ in range(200):\n    os.mkdir('n'); os.chdir('n')\""),
    ],
)
def test_every_way_of_filling_the_workspace_counts(workspace, name, command):
    (workspace / "keep.txt").write_text("kept")
    result = run_command(["/bin/sh", "-c", command], workspace, SandboxPolicy(disk_mb=40, wall_seconds=120))
    assert result.exceeded == "disk", f"{name}: {result.render()}"
    assert "disk quota of 40 MB" in result.status()
    assert sorted(os.listdir(workspace)) == ["keep.txt"], name
    assert (workspace / "keep.txt").read_text() == "kept"


def test_a_file_the_call_wrote_to_is_removed_and_untouched_files_stay(workspace):
    (workspace / "log.txt").write_text("start\n")
    (workspace / "log.txt").chmod(0o666)
    (workspace / "data.txt").write_text("data")
    command = "head -c 30000000 /dev/zero >> log.txt; head -c 30000000 /dev/zero > new.bin"
    result = run_command(["/bin/sh", "-c", command], workspace, SandboxPolicy(disk_mb=40))
    assert result.exceeded == "disk", result.render()
    assert sorted(os.listdir(workspace)) == ["data.txt"]
    assert set(result.disk.removed) == {"log.txt", "new.bin"}


def test_links_out_of_the_workspace_are_neither_counted_nor_followed(workspace, outside):
    victim = outside / "victim.bin"
    victim.write_bytes(b"x" * 30 * MIB)
    policy = SandboxPolicy(disk_mb=20, mode="none")
    linked = run_command(["/bin/sh", "-c", f"ln -s {outside} dir && ln -s {victim} file"], workspace, policy)
    assert linked.ok, linked.render()  # the 30 MB behind the links are the host's, not the workspace's
    result = run_command(["/bin/sh", "-c", "head -c 30000000 /dev/zero > flood"], workspace, policy)
    assert result.exceeded == "disk", result.render()
    assert sorted(os.listdir(workspace)) == ["dir", "file"]
    assert victim.stat().st_size == 30 * MIB
    swapped = "rm dir file && ln -s / dir && mkdir sub && ln -s /usr sub/usr && head -c 30000000 /dev/zero > f"
    result = run_command(["/bin/sh", "-c", swapped], workspace, policy)
    assert result.exceeded == "disk", result.render()
    assert os.listdir(workspace) == []
    assert victim.stat().st_size == 30 * MIB and Path("/usr/bin/python3").exists()


def test_a_call_within_the_quota_keeps_its_files(workspace):
    result = run_command(["/bin/sh", "-c", "head -c 5000000 /dev/zero > five.bin"], workspace, SandboxPolicy(disk_mb=40))
    assert result.ok, result.render()
    assert (workspace / "five.bin").stat().st_size == 5_000_000
    assert result.disk is not None and not result.disk.exceeded


def test_a_workspace_seeded_over_its_quota_may_be_used_but_not_grown(workspace):
    (workspace / "seed.bin").write_bytes(b"x" * 3 * MIB)
    policy = SandboxPolicy(disk_mb=1)
    assert run_command(["/bin/sh", "-c", "wc -c seed.bin"], workspace, policy).ok
    result = run_command(["/bin/sh", "-c", "head -c 100000 /dev/zero > more.bin"], workspace, policy)
    assert result.exceeded == "disk", result.render()
    assert os.listdir(workspace) == ["seed.bin"]


def test_mode_none_has_the_quota_too(workspace):
    result = run_command(["/bin/sh", "-c", "head -c 50000000 /dev/zero > f"], workspace, SandboxPolicy(mode="none", disk_mb=10))
    assert result.exceeded == "disk"
    assert os.listdir(workspace) == []


# --- seccomp ----------------------------------------------------------------------------------

SYSCALLS = """
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, *args):
    result = libc.syscall(NUMBERS[name], *[ctypes.c_long(a) for a in args])
    print(name, 'ok' if result >= 0 else os.strerror(ctypes.get_errno()))
NUMBERS = {numbers!r}
attempt('ptrace', 0, 0, 0, 0)                   # PTRACE_TRACEME
attempt('unshare', 0x10000000)                  # CLONE_NEWUSER
attempt('mount', 0, 0, 0, 0, 0)
attempt('bpf', 0, 0, 0)
attempt('io_uring_setup', 1, 0)
attempt('keyctl', 0, 0, 0, 0, 0)
attempt('process_vm_readv', os.getppid(), 0, 0, 0, 0, 0)
attempt('clone3', 0, 0)
for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET, socket.AF_UNIX):
    try:
        socket.socket(family, socket.SOCK_DGRAM if family != socket.AF_PACKET else socket.SOCK_RAW).close()
        print(family.name, 'ok')
    except OSError as e:
        print(family.name, os.strerror(e.errno))
"""


def syscall_probe() -> str:
    seccomp = pytest.importorskip("pyseccomp")
    names = ["ptrace", "unshare", "mount", "bpf", "io_uring_setup", "keyctl", "process_vm_readv", "clone3"]
    return SYSCALLS.format(numbers={name: seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) for name in names})


def test_seccomp_denies_ptrace_namespaces_kernel_interfaces_and_non_unix_sockets(workspace):
    result = run_command(["/usr/bin/python3", "-c", syscall_probe()], workspace, SandboxPolicy())
    assert result.ok, result.render()
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    denied = os.strerror(errno.EPERM)
    for name in ("ptrace", "unshare", "mount", "bpf", "io_uring_setup", "keyctl", "process_vm_readv"):
        assert lines[name] == denied, (name, lines[name])
    assert lines["clone3"] == os.strerror(errno.ENOSYS)
    for family in ("AF_INET", "AF_INET6", "AF_NETLINK", "AF_PACKET"):
        assert lines[family] == os.strerror(errno.EAFNOSUPPORT), (family, lines[family])
    assert lines["AF_UNIX"] == "ok"
    assert "not enforced" not in result.render()


def test_ptrace_traceme_fails(workspace):
    code = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nprint('traceme', libc.ptrace(0, 0, 0, 0), os.strerror(ctypes.get_errno()))"
    result = run_command(["/usr/bin/python3", "-c", code], workspace, SandboxPolicy())
    assert result.stdout.strip() == f"traceme -1 {os.strerror(errno.EPERM)}", result.render()


def test_network_sandbox_keeps_inet_sockets(workspace):
    code = "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()\nprint('inet ok')"
    result = run_command(["/usr/bin/python3", "-c", code], workspace, SandboxPolicy(network=True))
    assert result.stdout.strip() == "inet ok", result.render()


def test_ordinary_programs_still_run_under_the_filter(workspace):
    code = (
        "import subprocess, threading, socket\n"
        "threading.Thread(target=print, args=('thread ok',)).start()\n"
        "print(subprocess.run(['echo', 'child ok'], capture_output=True, text=True).stdout.strip())\n"
        "a, b = socket.socketpair(); a.send(b'unix ok'); print(b.recv(16).decode())\n"
    )
    result = run_command(["/usr/bin/python3", "-c", code], workspace, SandboxPolicy())
    assert result.ok, result.render()
    assert {"thread ok", "child ok", "unix ok"} <= set(result.stdout.split("\n"))


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x32 system calls exist on x86-64 only")
def test_a_foreign_syscall_table_kills_the_process(workspace):
    code = "import ctypes\nctypes.CDLL(None).syscall(ctypes.c_long(0x40000000 + 521), 0, 0, 0, 0)\nprint('SURVIVED')"
    result = run_command(["/usr/bin/python3", "-c", code], workspace, SandboxPolicy())
    assert result.status() == "killed by SIGSYS: a system call the sandbox forbids (seccomp filter)", result.render()
    assert "SURVIVED" not in result.stdout


@needs_cgroups
def test_memfd_pages_count_against_the_call(workspace):
    """memfd_create bypasses the sized tmpfs mounts; the call's memory total still holds."""
    code = (
        "import os\nheld = []\n"
        "for i in range(20):\n"
        "    fd = os.memfd_create(f'm{i}')\n"
        "    os.write(fd, b'x' * 30 * 1024 * 1024)\n"
        "    held.append(fd)\n"
        "print('HELD', len(held) * 30, 'MB')\n"
    )
    result = run_command(["/usr/bin/python3", "-c", code], workspace, SandboxPolicy(memory_mb=128, max_file_mb=32))
    assert result.exceeded == "memory", result.render()
    assert "HELD 600 MB" not in result.stdout


# --- the start gate: nothing runs before it is in its group ------------------------------------


def test_a_command_never_runs_when_it_cannot_be_placed(workspace):
    marker = workspace / "ran"

    def refuse(pid: int) -> None:
        raise OSError(errno.EIO, "placement failed")

    with pytest.raises(OSError, match="placement failed"):
        run_bounded(["/bin/sh", "-c", f"touch {marker}"], env={}, cwd=None, wall_seconds=20, max_output_bytes=1000, before_start=refuse)
    assert not marker.exists()


def test_the_gate_hands_stdin_through_untouched(workspace):
    placed: list[int] = []
    data = b"first line\nsecond line\n\x00binary\xff" * 1000
    result = run_bounded(["/bin/cat"], env={}, cwd=None, wall_seconds=20, max_output_bytes=10**6, stdin_data=data, before_start=placed.append)
    assert result.returncode == 0 and result.stdout == data
    assert len(placed) == 1


@needs_cgroups
def test_the_first_thing_a_command_forks_is_already_in_the_calls_group(workspace):
    group = CallCgroup(probe_cgroups(), CgroupLimits(64 * MIB, 16))
    with group:
        result = run_bounded(
            ["/bin/sh", "-c", "cat /proc/self/cgroup & wait"], env={}, cwd=None, wall_seconds=20,
            max_output_bytes=10**5, before_start=group.place,
        )
    membership = parse_membership(result.stdout.decode())
    controllers = ["memory", "pids"] if group.version == 1 else [""]
    assert all(membership[c].endswith("/" + group.paths[0].name) for c in controllers), membership
    assert not any(path.exists() for path in group.paths)


# --- what a host cannot enforce is said, in the result and in the log --------------------------

REPORT_ONE_CALL = """
import sys
{prelude}
from pathlib import Path
from runner.tools.sandbox import SandboxPolicy, run_command
result = run_command(['/bin/sh', '-c', 'echo ran'], Path(sys.argv[1]), SandboxPolicy())
print(result.render())
"""


def run_in_fresh_process(workspace: Path, prelude: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    if path is not None:
        env["PATH"] = path
    code = REPORT_ONE_CALL.format(prelude=prelude)
    return subprocess.run([sys.executable, "-c", code, str(workspace)], env=env, capture_output=True, text=True, timeout=120)


def test_a_missing_seccomp_binding_is_reported(workspace):
    ran = run_in_fresh_process(workspace, "sys.modules['pyseccomp'] = None  # as if not installed")
    assert ran.returncode == 0, ran.stderr
    assert "note: not enforced on this host: the seccomp filter (pyseccomp is not installed" in ran.stdout
    assert "runner: sandbox: not enforced on this host: the seccomp filter" in ran.stderr
    assert "ran" in ran.stdout


def test_a_bubblewrap_without_size_still_runs_and_says_so(workspace, outside):
    old = outside / "bin"
    old.mkdir()
    fake = old / "bwrap"
    real = shutil.which("bwrap")
    fake.write_text(  # bubblewrap before 0.5: no --size in its help, and refuses it
        "#!/bin/sh\n"
        f'if [ "$1" = --help ]; then {real} --help | grep -v -- --size; exit 0; fi\n'
        'for arg in "$@"; do [ "$arg" = --size ] && { echo "bwrap: Unknown option --size" >&2; exit 1; }; done\n'
        f'exec {real} "$@"\n'
    )
    fake.chmod(0o755)
    outside.chmod(0o755)
    ran = run_in_fresh_process(workspace, "", path=f"{old}:{os.environ['PATH']}")
    assert ran.returncode == 0, ran.stderr
    assert "note: not enforced on this host: a size for /tmp and /dev/shm" in ran.stdout, ran.stdout
    assert ran.stdout.startswith("exit code 0") and "ran" in ran.stdout


def test_hostile_file_names_in_the_refusal_are_made_safe(workspace):
    command = "head -c 50000000 /dev/zero > \"$(printf 'bad\\377\\033[2Jname')\""
    result = run_command(["/bin/sh", "-c", command], workspace, SandboxPolicy(disk_mb=10))
    assert result.exceeded == "disk", result.render()
    status = result.status()
    assert "bad\ufffd?[2Jname" in status
    status.encode("utf-8")  # no lone surrogates left to break the request to the model
    assert os.listdir(workspace) == []


def test_a_flood_measured_while_running_fails_the_call_even_if_deleted_before_the_end(workspace):
    (workspace / "input.txt").write_text("kept")
    quota = DiskQuota(workspace, 10 * MIB)
    (workspace / "flood").write_bytes(b"x" * 30 * MIB)
    assert quota.exceeded_now()  # what the watch sees while the call runs
    (workspace / "flood").unlink()
    (workspace / "note.txt").write_text("tidied up")
    report = quota.settle()
    assert report.exceeded and report.used >= 30 * MIB
    assert report.removed == ("note.txt",)
    assert sorted(os.listdir(workspace)) == ["input.txt"]
