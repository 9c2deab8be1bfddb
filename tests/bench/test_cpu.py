"""bench.cpu: CPU seconds by kind of process, for "what limits it" (issue 13, P5)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.cpu import BENCH, CpuSnapshot, busy_share, kind_of


def test_a_process_counts_as_its_nearest_labelled_ancestor():
    parents = {10: 1, 11: 10, 12: 11, 20: 1}
    roots = {10: "celery workers"}
    assert kind_of(12, parents, roots) == "celery workers"  # a pool child's child
    assert kind_of(10, parents, roots) == "celery workers"


def test_an_unlabelled_process_is_its_command_name():
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert kind_of(os.getpid(), {}, {}) == comm


def test_since_counts_a_new_process_from_zero_and_groups_by_kind():
    before, after = CpuSnapshot({}), CpuSnapshot({})
    before.seconds = {1: (BENCH, 2.0), 2: ("etcd", 1.0)}
    after.seconds = {1: (BENCH, 2.5), 2: ("etcd", 4.0), 3: ("etcd", 0.5), 4: ("redis-server", 0)}
    assert after.since(before) == {"etcd": 3.5, BENCH: 0.5}  # nothing spent: not listed


def test_a_child_is_seen_under_its_label_and_this_process_as_the_bench():
    """A real snapshot of /proc: the child sleeps in its own process, labelled as a root."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        sum(range(2_000_000))  # some CPU of this process's own
        snapshot = CpuSnapshot({child.pid: "child"})
    finally:
        child.communicate(b"", timeout=30)
    kinds = {kind for kind, _ in snapshot.seconds.values()}
    assert {"child", BENCH} <= kinds
    assert snapshot.seconds[os.getpid()][1] > 0


def test_busy_share_is_cpu_over_seconds_times_cores():
    assert busy_share({"a": 3.0, "b": 1.0}, 2.0, 2) == 1.0
    assert busy_share({"a": 1.0}, 0.0, 2) is None
    assert busy_share({"a": 1.0}, 2.0, None) is None
