"""Each escape class of SECURITY.md, attempted from sandboxed code: none may succeed."""

from __future__ import annotations

import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from runner.errors import ToolFailure
from runner.tools.base import ToolContext
from runner.tools.registry import ToolRegistry
from runner.tools.sandbox import SandboxPolicy, run_command

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow(reason="fork bombs, CPU loops and escapes run to their limits in the sandbox")]


async def run_python(registry: ToolRegistry, ctx: ToolContext, code: str) -> str:
    """Run ``code``; return its rendering whether it exited 0 or not."""
    try:
        return (await registry.invoke("python", {"code": code}, ctx)).content
    except ToolFailure as failure:
        return str(failure)


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


def wait_until_gone(marker: str, attempts: int = 100) -> list[int]:
    """Poll for up to ~10 s: the kernel tears a PID namespace down asynchronously."""
    for _ in range(attempts):
        left = processes_with(marker)
        if not left:
            return []
        time.sleep(0.1)
    return processes_with(marker)


# --- network ------------------------------------------------------------------------


@pytest.fixture
def listener() -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def assert_no_connection(listener: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        listener.accept()


async def test_python_cannot_reach_a_host_loopback_listener(registry, ctx, listener):
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('CONNECTED')\n"
        "except OSError as e:\n    print('BLOCKED', e)\n"
        "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=3)\n    print('CONNECTED')\n"
        "except OSError as e:\n    print('BLOCKED', e)\n"
    )
    output = await run_python(registry, ctx, code)
    assert "CONNECTED" not in output
    assert output.count("BLOCKED") == 2
    assert_no_connection(listener)


async def test_shell_cannot_reach_a_host_loopback_listener(registry, ctx, listener):
    port = listener.getsockname()[1]
    command = (
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)\" && echo CONNECTED"
    )
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("shell", {"command": command}, ctx)
    assert "CONNECTED" not in str(failure.value)
    assert_no_connection(listener)


# --- filesystem ---------------------------------------------------------------------


async def test_writes_outside_the_workspace_do_not_reach_the_host(registry, ctx, workspace):
    name = f"runner-escape-{uuid.uuid4().hex}"
    targets = [f"/tmp/{name}", f"/etc/{name}", f"/root/{name}", f"/usr/{name}", f"/workspace/../{name}", f"/{name}"]
    code = (
        f"for path in {targets!r}:\n"
        "    try:\n        open(path, 'w').write('escaped')\n        print('WROTE', path)\n"
        "    except OSError as e:\n        print('blocked', path, e.strerror)\n"
        "open('inside.txt', 'w').write('ok')\n"
    )
    output = await run_python(registry, ctx, code)
    for target in targets:
        host_path = Path(target.replace("/workspace/..", str(workspace.parent)))
        assert not host_path.exists(), f"{target} escaped to the host"
    assert not Path(workspace.parent, name).exists()
    assert (workspace / "inside.txt").read_text() == "ok"
    assert "WROTE /etc" not in output and "WROTE /root" not in output and "WROTE /usr" not in output


async def test_host_files_are_not_visible(registry, ctx):
    output = await run_python(
        registry,
        ctx,
        "import os\nprint(sorted(os.listdir('/')))\nprint(os.path.exists('/etc/passwd'), os.path.exists('/root'))",
    )
    assert "False False" in output
    assert "'etc'" not in output and "'home'" not in output and "'root'" not in output


# --- environment --------------------------------------------------------------------

READ_ENVIRONMENTS = """
import os
print('ENV', dict(os.environ))
for path in ['/proc/1/environ', f'/proc/{os.getppid()}/environ', '/proc/self/environ']:
    try:
        print(path, open(path, 'rb').read())
    except OSError as e:
        print(path, 'unreadable', e.strerror)
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        print(pid, open(f'/proc/{pid}/environ', 'rb').read())
    except OSError:
        pass
"""


async def test_sandboxed_code_cannot_read_the_runner_environment(registry, ctx, canary):
    output = await run_python(registry, ctx, READ_ENVIRONMENTS)
    assert "ENV" in output
    assert canary not in output
    assert "RUNNER_TEST_CANARY_KEY" not in output


async def test_shell_cannot_read_the_runner_environment(registry, ctx, canary):
    result = await registry.invoke("shell", {"command": "env; cat /proc/1/environ /proc/$PPID/environ; true"}, ctx)
    assert canary not in result.content


async def test_mode_none_still_starts_with_an_empty_environment(registry, make_ctx, canary):
    ctx = make_ctx(sandbox=SandboxPolicy(mode="none", wall_seconds=20))
    output = await run_python(registry, ctx, "import os; print(dict(os.environ))")
    assert "PATH" in output
    assert canary not in output


# --- resource limits ------------------------------------------------------------------


async def test_fork_bomb_is_bounded_by_the_process_limit(registry, make_ctx):
    marker = f"{uuid.uuid4().int % 10**6}.5"
    ctx = make_ctx(sandbox=SandboxPolicy(max_processes=16, wall_seconds=30))
    code = (
        "import os\ncount = 0\n"
        "for _ in range(500):\n"
        "    try:\n        pid = os.fork()\n    except OSError as e:\n        print('fork refused:', e.strerror); break\n"
        f"    if pid == 0:\n        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "    count += 1\n"
        "print('children', count)\n"
    )
    output = await run_python(registry, ctx, code)
    assert "fork refused" in output
    children = int(output.split("children ")[1].split()[0])
    assert children < 16
    assert wait_until_gone(marker) == []


async def test_shell_fork_bomb_ends_and_leaves_nothing(registry, make_ctx):
    ctx = make_ctx(sandbox=SandboxPolicy(max_processes=32, wall_seconds=3))
    marker = f"bomb{uuid.uuid4().hex[:8]}"
    with pytest.raises(ToolFailure):
        await registry.invoke("shell", {"command": f"{marker}() {{ {marker} | {marker} & }}; {marker}; sleep 30"}, ctx)
    assert wait_until_gone(marker) == []


async def test_memory_hog_is_stopped(registry, make_ctx):
    ctx = make_ctx(sandbox=SandboxPolicy(memory_mb=256, wall_seconds=30))
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("python", {"code": "x = bytearray(2 * 1024**3)\nprint('ALLOCATED')"}, ctx)
    assert "MemoryError" in str(failure.value)
    assert "ALLOCATED" not in str(failure.value)


async def test_cpu_loop_is_killed_by_the_cpu_limit(registry, make_ctx):
    ctx = make_ctx(sandbox=SandboxPolicy(cpu_seconds=1, wall_seconds=60))
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("python", {"code": "while True:\n    pass"}, ctx)
    message = str(failure.value)
    assert "killed by SIGKILL" in message or "SIGXCPU" in message
    assert "wall-clock" not in message


def test_output_flood_is_capped_while_reading(workspace):
    policy = SandboxPolicy(max_output_bytes=10_000, wall_seconds=30)
    result = run_command(["/usr/bin/python3", "-c", "while True: print('x' * 1000)"], workspace, policy)
    assert result.truncated
    assert len(result.stdout) + len(result.stderr) <= 10_000
    assert "output exceeded" in result.render()


async def test_output_flood_through_the_tool_fails_with_a_capped_message(registry, make_ctx):
    ctx = make_ctx(sandbox=SandboxPolicy(max_output_bytes=4096, wall_seconds=30))
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("shell", {"command": "yes flood"}, ctx)
    assert len(str(failure.value)) < 4096 + 500


async def test_timeout_kills_children_that_called_setsid(registry, make_ctx):
    marker = f"{uuid.uuid4().int % 10**6}.25"
    ctx = make_ctx(sandbox=SandboxPolicy(wall_seconds=3))
    code = (
        "import subprocess, time\n"
        f"subprocess.Popen(['setsid', 'sleep', '{marker}'])\n"
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        "print('started', flush=True)\n"
        "time.sleep(1000)\n"
    )
    with pytest.raises(ToolFailure) as failure:
        await registry.invoke("python", {"code": code}, ctx)
    assert "wall-clock limit" in str(failure.value)
    assert "started" in str(failure.value)
    assert wait_until_gone(marker) == []


def test_timeout_in_mode_none_kills_the_process_group(workspace):
    marker = f"{uuid.uuid4().int % 10**6}.75"
    policy = SandboxPolicy(mode="none", wall_seconds=2)
    result = run_command(["/bin/sh", "-c", f"sleep {marker} & sleep {marker}"], workspace, policy)
    assert result.timed_out
    assert wait_until_gone(marker) == []


# --- fail closed ----------------------------------------------------------------------


async def test_missing_bubblewrap_fails_closed(registry, ctx, monkeypatch):
    from runner.errors import SandboxUnavailable
    from runner.tools import sandbox

    real_which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    with pytest.raises(SandboxUnavailable) as error:
        await registry.invoke("python", {"code": "print(1)"}, ctx)
    assert "apt-get install bubblewrap" in str(error.value)
    assert "mode: none" in str(error.value)


def test_probe_reports_why_a_sandbox_does_not_work():
    from runner.tools.sandbox import probe_sandbox

    assert probe_sandbox("/usr/bin/bwrap").ok
    broken = probe_sandbox("/bin/false")
    assert not broken.ok
    assert "exit code 1" in broken.reason


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands the workspace to uid 65534")
def test_unreachable_workspace_is_explained(outside):
    from runner.errors import SandboxUnavailable

    hidden = outside / "private"
    hidden.mkdir(mode=0o700)
    outside.chmod(0o700)
    (hidden / "ws").mkdir()
    with pytest.raises(SandboxUnavailable, match="chmod o\\+x"):
        run_command(["true"], hidden / "ws", SandboxPolicy())


def test_workspace_is_handed_to_the_sandbox_user(workspace):
    result = run_command(["/usr/bin/python3", "-c", "open('x', 'w').write('1')"], workspace, SandboxPolicy())
    assert result.ok, result.render()
    if os.geteuid() == 0:
        assert (workspace / "x").stat().st_uid == 65534
