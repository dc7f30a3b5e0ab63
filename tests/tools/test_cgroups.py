"""Finding where per-call control groups can live, from mountinfo and /proc/self/cgroup
(files written here describe hosts this machine is not), and the reasons given when none can."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from runner.tools.cgroups import CALL_PREFIX, detect, parse_membership, parse_mountinfo

V2_LINE = "30 23 0:26 / {point} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V1_LINE = "35 25 0:30 {root} {point} rw,nosuid shared:9 - cgroup cgroup rw,{controllers}\n"


def host(tmp_path: Path, mountinfo: str, membership: str) -> tuple[Path, Path]:
    (tmp_path / "mountinfo").write_text(mountinfo)
    (tmp_path / "cgroup").write_text(membership)
    return tmp_path / "mountinfo", tmp_path / "cgroup"


def test_parses_v1_and_v2_mounts_with_escaped_mount_points():
    text = (
        V2_LINE.format(point="/sys/fs/cgroup/with\\040space")
        + V1_LINE.format(root="/", point="/sys/fs/cgroup/memory", controllers="memory")
        + "22 1 8:1 / / rw - ext4 /dev/vda rw\n"
    )
    mounts = parse_mountinfo(text)
    assert [(str(m.point), m.fstype) for m in mounts] == [
        ("/sys/fs/cgroup/with space", "cgroup2"),
        ("/sys/fs/cgroup/memory", "cgroup"),
    ]
    assert "memory" in mounts[1].options


def test_parses_membership_per_controller():
    own = parse_membership("12:pids:/a\n4:cpu,cpuacct:/b\n0::/c\n")
    assert own == {"pids": "/a", "cpu": "/b", "cpuacct": "/b", "": "/c"}


def test_a_host_without_cgroups_is_explained(tmp_path):
    support = detect(*host(tmp_path, "22 1 8:1 / / rw - ext4 /dev/vda rw\n", "0::/\n"))
    assert not support.usable
    assert "cgroup v2: not mounted" in support.reason
    assert "cgroup v1: no memory hierarchy holds the runner" in support.reason


def test_v2_without_memory_and_pids_is_explained(tmp_path):
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu io hugetlb\n")
    support = detect(*host(tmp_path, V2_LINE.format(point=root), "0::/\n"))
    assert not support.usable
    assert f"cgroup v2: {root} offers controllers cpu hugetlb io; memory and pids are needed" in support.reason


def test_v2_is_used_under_the_runners_own_cgroup(tmp_path):
    root = tmp_path / "unified"
    own = root / "system.slice" / "runner.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("memory pids\n")
    support = detect(*host(tmp_path, V2_LINE.format(point=root), "0::/system.slice/runner.service\n"))
    assert support.version == 2 and support.parents == (own,)


def test_a_runner_in_its_own_leaf_uses_the_prepared_parent(tmp_path):
    root = tmp_path / "unified"
    leaf = root / "job" / "runner.main"
    leaf.mkdir(parents=True)
    (root / "job" / "cgroup.controllers").write_text("memory pids\n")
    (root / "job" / "cgroup.subtree_control").write_text("memory pids\n")
    support = detect(*host(tmp_path, V2_LINE.format(point=root), "0::/job/runner.main\n"))
    assert support.version == 2 and support.parents == (root / "job",)


def test_v1_hierarchies_nest_under_the_runners_groups(tmp_path):
    memory, pids = tmp_path / "memory", tmp_path / "pids"
    (memory / "jobs" / "42").mkdir(parents=True)
    pids.mkdir()
    mountinfo = V1_LINE.format(root="/", point=memory, controllers="memory") + V1_LINE.format(
        root="/", point=pids, controllers="pids"
    )
    support = detect(*host(tmp_path, mountinfo, "5:pids:/\n4:memory:/jobs/42\n0::/\n"))
    assert support.version == 1 and support.parents == (memory / "jobs" / "42", pids)


def test_a_cgroup_outside_the_mounted_subtree_is_refused(tmp_path):
    memory = tmp_path / "memory"
    memory.mkdir()
    mountinfo = V1_LINE.format(root="/docker/abc", point=memory, controllers="memory")
    support = detect(*host(tmp_path, mountinfo, "4:memory:/elsewhere\n"))
    assert not support.usable and "no memory hierarchy holds the runner" in support.reason


def test_unreadable_proc_files_are_explained(tmp_path):
    support = detect(tmp_path / "missing-mountinfo", tmp_path / "missing-cgroup")
    assert not support.usable and "cannot read" in support.reason


def test_a_mount_of_a_subtree_maps_paths_below_it(tmp_path):
    memory, pids = tmp_path / "memory", tmp_path / "pids"
    (memory / "run").mkdir(parents=True)
    (pids / "run").mkdir(parents=True)
    mountinfo = V1_LINE.format(root="/docker/abc", point=memory, controllers="memory") + V1_LINE.format(
        root="/docker/abc", point=pids, controllers="pids"
    )
    support = detect(*host(tmp_path, mountinfo, "5:pids:/docker/abc/run\n4:memory:/docker/abc/run\n"))
    assert support.parents == (memory / "run", pids / "run")


def test_groups_left_by_a_dead_runner_are_removed(tmp_path):
    memory, pids = tmp_path / "memory", tmp_path / "pids"
    memory.mkdir()
    pids.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = pids / f"{CALL_PREFIX}{dead.pid}-0123456789ab"
    live = pids / f"{CALL_PREFIX}{os.getpid()}-0123456789ab"
    stale.mkdir()
    live.mkdir()
    mountinfo = V1_LINE.format(root="/", point=memory, controllers="memory") + V1_LINE.format(
        root="/", point=pids, controllers="pids"
    )
    assert detect(*host(tmp_path, mountinfo, "5:pids:/\n4:memory:/\n")).usable
    assert not stale.exists() and live.exists()
