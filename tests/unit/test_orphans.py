"""Which handed-out keys a dead worker left (workers/queue/orphans.py), over plain data."""

from __future__ import annotations

from workers.keys import ObjectKey
from workers.queue.orphans import DispatchedRun, incarnation, orphaned, run_owner, worker_of

APP = ObjectKey("team-a", "app", "uid-1")
WEB = ObjectKey("team-a", "web", "uid-2")
JOB = ObjectKey("team-b", "job", "uid-3")


def test_a_run_owner_names_its_worker_and_each_life_of_a_node_differs():
    first, second = incarnation("celery@pod-1"), incarnation("celery@pod-1")
    assert first != second  # a restarted container keeps its node name, not its locks
    assert first.startswith("celery@pod-1")
    assert worker_of(run_owner(first)) == first
    assert run_owner(first) != run_owner(first)  # one owner per acquisition's process life


def test_an_owner_that_names_no_worker_is_never_a_dead_workers():
    assert worker_of("operator-host-12-abc123") is None  # the embedded operator
    assert worker_of("/12-abc") is None
    runs = [DispatchedRun(APP, "operator-host-12-abc123")]
    assert orphaned(runs, frozenset({"operator-host-12-abc123"}), newly_gone=True) == []


def test_locked_runs_go_by_their_workers_and_unlocked_ones_only_when_one_newly_died():
    a, b = "celery@a~1", "celery@b~1"
    runs = [
        DispatchedRun(APP, run_owner(a)),
        DispatchedRun(WEB, run_owner(b)),
        DispatchedRun(JOB, None),
    ]
    assert orphaned(runs, frozenset(), newly_gone=False) == []
    assert orphaned(runs, frozenset({a}), newly_gone=False) == [runs[0]]
    assert orphaned(runs, frozenset({a}), newly_gone=True) == [runs[0], runs[2]]
    assert orphaned(runs, frozenset({a, b}), newly_gone=True) == runs
