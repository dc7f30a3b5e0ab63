"""Sandbox totals through the real CLI: a model's hostile calls hit the per-call limits, each
becomes a clear observation, the run goes on to its answer and the host keeps nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.model.server import ScriptedServer
from runner.tools.cgroups import probe_cgroups
from tests.support.hostile_code import MEMORY_HOGS
from tests.support.project import runner_env, sandbox_project

pytestmark = pytest.mark.timeout(300)
AGENT = """\
apiVersion: runner/v1
kind: Agent
name: worker
model: {id: gpt-4o-mini, max_tokens: 100}
tools: [python, shell]
sandbox: {mode: bwrap, wall_seconds: 60, cpu_seconds: 30, memory_mb: 256, disk_mb: 40, tmp_mb: 16}
stuck: {max_repeats: 10, max_invalid_calls: 10}
"""
TASK = """\
apiVersion: runner/v1
kind: Task
name: work
agent: worker
goal: Use the machine.
"""
WORKSPACE_FLOOD = "i=0; while [ $i -lt 100 ]; do head -c 10000000 /dev/zero > f$i; i=$((i+1)); done; echo FLOODED"
TMP_FLOOD = "head -c 30000000 /dev/zero > /tmp/big; echo tmp-exit=$?"
TRACEME = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nprint('traceme', libc.ptrace(0, 0, 0, 0), os.strerror(ctypes.get_errno()))"


@pytest.fixture
def project() -> Iterator[Path]:
    with sandbox_project("totals", {"agents.d/worker.yaml": AGENT, "tasks.d/work.yaml": TASK}) as root:
        yield root


def call(tool: str, **arguments: str) -> dict[str, Any]:
    return {"times": 1, "reply": {"tool_calls": [{"name": tool, "arguments": arguments}]}}


def run_cli(root: Path, server: ScriptedServer, *, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "runner", "run", "work", "--json", "--no-report"],
        cwd=root, env=runner_env(server, key="sk-test-totals"), capture_output=True, text=True, timeout=280,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def observations(server: ScriptedServer) -> list[str]:
    messages = server.requests[-1].body["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


def run_id(stdout: str) -> str:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return next(e["run_id"] for e in events if e["event"] == "run_started")


def test_hostile_calls_hit_the_totals_and_the_run_goes_on(project: Path) -> None:
    script = {
        "rules": [
            call("python", code=MEMORY_HOGS),
            call("shell", command=WORKSPACE_FLOOD),
            call("shell", command=TMP_FLOOD),
            call("python", code=TRACEME),
            call("shell", command="echo fine > kept.txt && cat kept.txt"),
        ],
        "fallback": "done",
    }
    with ScriptedServer(script) as server:
        result = run_cli(project, server)
        seen = observations(server)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    memory, disk, tmp, traceme, fine = seen
    if probe_cgroups().usable:
        assert memory.startswith("error: killed: the call's processes together exceeded its memory limit of 256 MB"), memory
    else:
        assert "not enforced on this host: memory and process totals per call" in memory
    assert "ALL ALLOCATED" not in memory
    assert disk.startswith("error: refused: the call made the workspace"), disk
    assert "over its disk quota of 40 MB (sandbox.disk_mb)" in disk and "FLOODED" not in disk
    assert "tmp-exit=1" in tmp and "No space left on device" in tmp
    assert f"traceme -1 {os.strerror(1)}" in traceme
    assert fine.startswith("exit code 0") and "fine" in fine
    workspace = project / ".runner" / "workspaces" / run_id(result.stdout)
    assert sorted(os.listdir(workspace)) == ["kept.txt"]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)")
def test_read_only_cgroupfs_falls_back_loudly(project: Path) -> None:
    """As in a container that mounts /sys/fs/cgroup read-only: calls still run, with
    per-process limits, and both the log and the model are told what is not enforced."""
    read_only = (
        "for m in $(awk '$9 ~ /^cgroup2?$/ {print $5}' /proc/self/mountinfo); do "
        'mount -o remount,bind,ro "$m" || exit 97; done; exec "$@"'
    )
    prefix = ("unshare", "--mount", "--propagation", "private", "sh", "-c", read_only, "read-only-cgroups")
    script = {"rules": [call("shell", command="echo still runs")], "fallback": "done"}
    with ScriptedServer(script) as server:
        result = run_cli(project, server, prefix=prefix)
        (seen,) = observations(server)
    assert result.returncode == 0, result.stderr
    warning = "runner: sandbox: not enforced on this host: memory and process totals per call"
    assert warning in result.stderr
    assert "Read-only file system" in result.stderr
    assert seen.startswith("exit code 0\nnote: not enforced on this host: memory and process totals per call"), seen
    assert "still runs" in seen


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("disk_mb: 0", "0 is less than the minimum of 1"),
        ("disk_mb: lots", "'lots' is a string; write the integer without quotes"),
        ("tmp_mb: 1.5", "1.5 is not of type 'integer'"),
        ("tmp_mb: 100000", "100000 is greater than the maximum of 65536"),
    ],
)
def test_validate_locates_a_bad_quota(project: Path, setting: str, message: str) -> None:
    agent = project / "agents.d/worker.yaml"
    agent.write_text(AGENT.replace("disk_mb: 40, tmp_mb: 16", setting))
    result = subprocess.run(
        [sys.executable, "-m", "runner", "validate"], cwd=project, capture_output=True, text=True, timeout=60,
        env=runner_env(),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "agents.d/worker.yaml:6:" in output and message in output, output
    assert "Traceback" not in output
