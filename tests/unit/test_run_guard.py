"""S4.1.4: a run's lock is renewed until its deadline, never past it; at the deadline the run
is fenced and its key released with backoff, exactly once."""

from __future__ import annotations

import pytest

from workers.engine.outcome import Requeue
from workers.keys import ObjectKey
from workers.queue.memory import MemoryQueue
from workers.runner import _RunGuard

KEY = ObjectKey("ns", "app", "uid-1")


def _taken(queue: MemoryQueue) -> object:
    queue.add(KEY)
    assert queue.take_due()
    lock = queue.begin(KEY, "worker-a", ttl=120)
    assert lock is not None
    return lock


def test_at_the_deadline_the_run_is_fenced_and_its_key_released_with_backoff():
    queue = MemoryQueue()
    lock = _taken(queue)
    guard = _RunGuard(queue, lock, deadline=0.05, grace=0.01, renew_every=0.01, ttl=120)
    guard.start()
    guard.join(timeout=30)
    assert not guard.is_alive()
    assert guard.abandoned
    assert guard.fence() == "reconcile deadline of 0.05 s passed"
    assert not queue.holds(lock)  # released, not left to expire
    assert queue.failures(KEY) == 1 and queue.due_in(KEY) is not None  # retried with backoff
    assert queue.begin(KEY, "worker-b") is not None  # another worker can take it now
    # The late run settles nothing: its outcome must not override the guard's.
    assert guard.settle(Requeue.RESYNC, resync_seconds=300) is False
    assert queue.failures(KEY) == 1


def test_a_run_that_ends_in_time_settles_once_and_is_not_abandoned():
    queue = MemoryQueue()
    lock = _taken(queue)
    guard = _RunGuard(queue, lock, deadline=60, renew_every=30, ttl=120)
    guard.start()
    assert guard.fence() is None
    assert guard.settle(Requeue.RESYNC, resync_seconds=300) is True
    guard.done.set()
    guard.join(timeout=30)
    assert not guard.abandoned
    assert guard.settle(Requeue.BACKOFF) is False
    assert queue.failures(KEY) == 0 and queue.due_in(KEY) == pytest.approx(300, rel=0.11)


def test_a_lock_taken_over_fences_the_run():
    now = [0.0]
    queue = MemoryQueue(clock=lambda: now[0])
    lock = _taken(queue)
    guard = _RunGuard(queue, lock, deadline=1e9, renew_every=30, ttl=120, clock=lambda: now[0])
    now[0] = 121.0  # the lock expired (no renewal ran on this clock) and another took it
    assert queue.begin(KEY, "worker-b") is not None
    assert guard.fence() == "per-key lock no longer held"


def test_renewals_stop_at_the_deadline():
    """The renewer never extends the lock past the deadline: a run stuck beyond it cannot
    hold its key for ever."""
    renewals: list[float] = []

    class CountingQueue(MemoryQueue):
        def renew(self, lock, ttl=120.0):
            renewals.append(ttl)
            return super().renew(lock, ttl)

    queue = CountingQueue()
    lock = _taken(queue)
    guard = _RunGuard(queue, lock, deadline=0.3, grace=0.01, renew_every=0.01, ttl=120)
    guard.start()
    guard.join(timeout=30)
    assert renewals  # it did renew before the deadline
    assert guard.abandoned and not guard.is_alive()  # and then stopped for good
