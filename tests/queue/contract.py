"""The keyed-queue contract: one suite, run against every backend (design.md "The keyed queue").

Like Django's ``SessionTestsMixin``: a subclass provides a ``queue`` fixture built on the
``clock`` fixture, and says how a lock's TTL runs out (the memory backend moves the fake clock;
Redis expires PX keys on its own clock, so that subclass polls with a short TTL).
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests.support.clocks import FakeClock
from workers.engine.outcome import Requeue
from workers.keys import ObjectKey
from workers.queue.base import (
    GONE_KEPT_SECONDS,
    DispatchedRun,
    KeyedQueue,
    Lock,
    Priority,
    Ticket,
)

APP = ObjectKey("team-a", "app", "0b5e1f0c-0000-4000-8000-000000000001")
WEB = ObjectKey("team-a", "web", "0b5e1f0c-0000-4000-8000-000000000002")
JOB = ObjectKey("team-b", "job", "0b5e1f0c-0000-4000-8000-000000000003")

SHORT_TTL = 0.3  # seconds; the Redis subclass really waits this long
EPSILON = 1e-5  # due times are absolute floats near 1.7e9: differences carry rounding


def between(value: float | None, low: float, high: float) -> bool:
    return value is not None and low - EPSILON <= value <= high + EPSILON


def keys_of(tickets: list[Ticket]) -> list[ObjectKey]:
    return [ticket.key for ticket in tickets]


def run_once(queue: KeyedQueue, owner: str = "worker-1") -> tuple[Ticket, Lock]:
    """Take the single due ticket and begin it, as the dispatcher and a worker would."""
    [ticket] = queue.take_due()
    lock = queue.begin(ticket.key, owner)
    assert lock is not None
    return ticket, lock


def run_next(queue: KeyedQueue, clock: FakeClock, key: ObjectKey = APP) -> tuple[Ticket, Lock]:
    """Queue ``key`` if nothing is waiting, wait until it is due, then take and begin it."""
    due_in = queue.due_in(key)
    if due_in is None:
        queue.add(key)
    elif due_in > 0:
        clock.advance(due_in)
    return run_once(queue)


class KeyedQueueContract:
    """Behaviour every ``KeyedQueue`` backend must show (S4.1.2-S4.1.6, S4.10.0, S8.4)."""

    def expire_lock(self, queue: KeyedQueue, clock: FakeClock, lock: Lock) -> None:
        """Let ``lock`` (taken with ``SHORT_TTL``) run out."""
        raise NotImplementedError

    # -- dedupe and ordering -------------------------------------------------------------

    def test_waiting_key_is_queued_once(self, queue: KeyedQueue):
        """Pattern 1: re-adding a waiting key is a no-op."""
        queue.add(APP)
        queue.add(APP)
        queue.add(APP, priority=Priority.FIRST)
        assert queue.depth() == 1
        assert keys_of(queue.take_due()) == [APP]
        assert queue.take_due() == []

    def test_first_syncs_run_before_resyncs_when_both_are_due(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S4.1.6: whenever both are due, first syncs run before resyncs."""
        queue.add(JOB, priority=Priority.RESYNC)
        clock.advance(1)
        queue.add(WEB, priority=Priority.NORMAL)
        clock.advance(1)
        queue.add(APP, priority=Priority.FIRST)
        tickets = queue.take_due()
        assert keys_of(tickets) == [APP, WEB, JOB]
        assert [t.priority for t in tickets] == [Priority.FIRST, Priority.NORMAL, Priority.RESYNC]

    def test_same_priority_runs_in_due_order(self, queue: KeyedQueue, clock: FakeClock):
        queue.add(JOB, delay=3)
        queue.add(APP, delay=1)
        queue.add(WEB, delay=2)
        clock.advance(5)
        assert keys_of(queue.take_due()) == [APP, WEB, JOB]

    def test_take_due_honours_limit_and_keeps_the_rest_waiting(self, queue: KeyedQueue):
        queue.add(APP, priority=Priority.FIRST)
        queue.add(WEB)
        queue.add(JOB, priority=Priority.RESYNC)
        assert keys_of(queue.take_due(limit=2)) == [APP, WEB]
        assert queue.depth() == 1
        assert queue.take_due(limit=0) == []
        assert keys_of(queue.take_due(limit=2)) == [JOB]

    def test_key_not_yet_due_waits(self, queue: KeyedQueue, clock: FakeClock):
        queue.add(APP, delay=10)
        assert queue.take_due() == []
        assert queue.due_in(APP) == pytest.approx(10)
        clock.advance(10)
        assert keys_of(queue.take_due()) == [APP]

    def test_due_at_least_counts_only_the_keys_due_now(self, queue: KeyedQueue, clock: FakeClock):
        """The S7.4 report gate's question: a key due later, a moved entry's old due time, a
        taken key and a forgotten one do not count."""
        k0, k1, k2, k3, k4, k5 = (
            ObjectKey("team-c", f"k{i}", f"0b5e1f0c-0000-4000-8000-0000000001{i:02d}")
            for i in range(6)
        )
        queue.add(k0, priority=Priority.FIRST)
        queue.add(k1, priority=Priority.RESYNC)
        queue.add(k2, delay=10)
        queue.add(k3, delay=10)
        queue.add(k4, priority=Priority.RESYNC, delay=10)
        queue.add(k4, priority=Priority.RESYNC)  # moved earlier: due now
        queue.add(k5)
        queue.forget(k5)
        assert queue.due_count() == 3
        assert queue.due_at_least(0) and queue.due_at_least(3) and not queue.due_at_least(4)
        assert keys_of(queue.take_due(limit=1)) == [k0]
        assert queue.due_at_least(2) and not queue.due_at_least(3)
        clock.advance(10)
        assert queue.due_at_least(4) and not queue.due_at_least(5)

    def test_readd_keeps_higher_priority_and_earlier_due_time(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """Pattern 5: a re-added key keeps the higher priority and the earlier due time."""
        queue.add(APP, priority=Priority.RESYNC, delay=100)
        queue.add(APP, priority=Priority.FIRST, delay=200)
        assert queue.due_in(APP) == pytest.approx(100)
        queue.add(APP, priority=Priority.RESYNC, delay=50)
        assert queue.due_in(APP) == pytest.approx(50)
        clock.advance(50)
        [ticket] = queue.take_due()
        assert ticket.priority is Priority.FIRST

    def test_forced_full_is_ored_in_on_readd(self, queue: KeyedQueue):
        """S4.10.0: a request to withhold the cursor is never lost to dedupe."""
        queue.add(APP, forced_full=True)
        queue.add(APP, forced_full=False)
        [ticket] = queue.take_due()
        assert ticket.forced_full is True

    def test_schedule_only_if_unscheduled_keeps_an_existing_due_time(self, queue: KeyedQueue):
        """S4.1.2: ADDED (initial list, relist) for a CR that already has a due time keeps it."""
        queue.schedule(APP, delay=200)
        queue.schedule(APP, delay=5, only_if_unscheduled=True)
        assert queue.due_in(APP) == pytest.approx(200)
        queue.schedule(WEB, delay=7, only_if_unscheduled=True)
        assert queue.due_in(WEB) == pytest.approx(7)

    def test_schedule_moves_a_timer_earlier_never_later(self, queue: KeyedQueue):
        queue.schedule(APP, delay=200)
        queue.schedule(APP, delay=300)
        assert queue.due_in(APP) == pytest.approx(200)
        queue.schedule(APP, delay=20)
        assert queue.due_in(APP) == pytest.approx(20)

    def test_schedule_defaults_to_resync_priority(self, queue: KeyedQueue):
        queue.schedule(APP, delay=0)
        queue.add(WEB)
        assert [t.priority for t in queue.take_due()] == [Priority.NORMAL, Priority.RESYNC]

    def test_depth_counts_waiting_keys_only(self, queue: KeyedQueue):
        assert queue.depth() == 0
        queue.add(APP)
        queue.add(WEB, delay=60)
        assert queue.depth() == 2
        queue.take_due()  # APP is dispatched now, no longer waiting
        assert queue.depth() == 1

    # -- dirty and the per-key lock (S4.1.4) ---------------------------------------------

    def test_trigger_during_run_runs_once_more_at_once(self, queue: KeyedQueue):
        """Pattern 1, S4.1.4: adds during a run mark the key dirty; one more run follows."""
        queue.add(APP, priority=Priority.RESYNC)
        _, lock = run_once(queue)
        queue.add(APP)
        queue.add(APP)
        assert queue.depth() == 0  # not queued beside the running key
        assert queue.take_due() == []
        assert queue.finish(lock, Requeue.RESYNC, resync_seconds=300) == pytest.approx(0)
        [ticket] = queue.take_due()
        assert (ticket.key, ticket.priority) == (APP, Priority.FIRST)
        assert queue.take_due() == []

    def test_add_between_dispatch_and_begin_marks_dirty(self, queue: KeyedQueue):
        queue.add(APP)
        [ticket] = queue.take_due()
        queue.add(APP, forced_full=True)
        assert queue.depth() == 0
        lock = queue.begin(ticket.key, "worker-1")
        assert lock is not None
        queue.finish(lock, Requeue.NONE)
        [again] = queue.take_due()
        assert again.forced_full is True

    def test_delayed_add_during_run_is_applied_at_finish(self, queue: KeyedQueue):
        queue.add(APP)
        _, lock = run_once(queue)
        queue.add(APP, delay=30)
        assert queue.finish(lock, Requeue.RESYNC, resync_seconds=300) == pytest.approx(30)

    def test_schedule_during_run_is_applied_at_finish(self, queue: KeyedQueue):
        """A timer set mid-run is kept: the earlier of it and the run's own timer wins."""
        queue.add(APP)
        _, lock = run_once(queue)
        queue.schedule(APP, delay=5, priority=Priority.NORMAL)
        queue.schedule(APP, delay=1, only_if_unscheduled=True)  # in flight: no-op
        assert queue.finish(lock, Requeue.RESYNC, resync_seconds=300) == pytest.approx(5)

    @pytest.mark.parametrize("claim", [True, False])
    def test_a_run_begun_outside_take_due_may_claim_the_waiting_entry(
        self, queue: KeyedQueue, claim: bool
    ):
        """A report a reconcile hands over (``claim_waiting``) stands for the heartbeat that
        waits: its finish sets the next due time. Unclaimed, the earlier entry still wins."""
        queue.schedule(APP, delay=5, priority=Priority.NORMAL)
        lock = queue.begin(APP, "worker-1", claim_waiting=claim)
        assert lock is not None
        assert queue.due_in(APP) == (None if claim else pytest.approx(5))
        assert queue.take_due() == []
        queue.finish(lock, Requeue.AFTER, delay=300)
        assert queue.due_in(APP) == pytest.approx(300 if claim else 5)

    def test_a_claimed_entry_whose_run_dies_is_due_again_after_the_stale_check(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S8.4: the claim hands the key out; a reporter that dies before its finish leaves it
        to the stale check, as a lost dispatch, not lost from the queue."""
        queue.schedule(APP, delay=5, priority=Priority.NORMAL)
        lock = queue.begin(APP, "worker-1", ttl=SHORT_TTL, claim_waiting=True)
        assert lock is not None and queue.dispatched_count() == 1
        self.expire_lock(queue, clock, lock)
        clock.advance(200)
        assert queue.redispatch_stale(older_than=150) == 1
        assert queue.take_due() == [Ticket(APP, forced_full=False, priority=Priority.NORMAL)]

    def test_a_claiming_run_still_runs_once_more_for_a_trigger_during_it(self, queue: KeyedQueue):
        queue.schedule(APP, delay=5, priority=Priority.NORMAL)
        lock = queue.begin(APP, "worker-1", claim_waiting=True)
        assert lock is not None
        queue.add(APP, priority=Priority.FIRST)  # a status write while the report runs
        queue.finish(lock, Requeue.AFTER, delay=300)
        [ticket] = queue.take_due()
        assert (ticket.key, ticket.priority) == (APP, Priority.FIRST)

    def test_a_refused_claim_leaves_the_waiting_entry(self, queue: KeyedQueue):
        queue.schedule(APP, delay=5, priority=Priority.NORMAL)
        first = queue.begin(APP, "worker-1")  # begun outside take_due, claiming nothing
        assert first is not None
        assert queue.begin(APP, "worker-2", claim_waiting=True) is None
        assert queue.due_in(APP) == pytest.approx(5)
        queue.finish(first, Requeue.AFTER, delay=300)
        assert queue.due_in(APP) == pytest.approx(0)  # dirty from the refused begin: at once

    def test_second_owner_is_refused_and_key_runs_again_after(self, queue: KeyedQueue):
        """S4.1.4: one reconcile per key at a time; a refused start marks the key dirty."""
        queue.add(APP)
        _, first = run_once(queue, "worker-1")
        assert queue.begin(APP, "worker-2") is None
        assert queue.begin(APP, "worker-1") is None  # not re-entrant either
        assert queue.begin(WEB, "worker-2") is not None  # distinct keys run concurrently
        queue.finish(first, Requeue.RESYNC, resync_seconds=300)
        assert keys_of(queue.take_due()) == [APP]

    def test_lock_expires_after_ttl_then_another_owner_takes_over(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S4.1.4: a dead worker's lock runs out; the key is not stuck."""
        first = queue.begin(APP, "worker-1", ttl=SHORT_TTL)
        assert first is not None and queue.holds(first)
        self.expire_lock(queue, clock, first)
        assert not queue.holds(first)
        assert not queue.renew(first)
        second = queue.begin(APP, "worker-2")
        assert second is not None and queue.holds(second)
        assert second.token != first.token

    def test_renew_keeps_the_lock_alive(self, queue: KeyedQueue):
        lock = queue.begin(APP, "worker-1", ttl=SHORT_TTL)
        assert lock is not None
        assert queue.renew(lock, ttl=120)
        assert queue.holds(lock)
        assert queue.begin(APP, "worker-2") is None

    def test_each_acquisition_gets_its_own_token(self, queue: KeyedQueue):
        """Fencing: an old lock of the same owner is not mistaken for the new one."""
        old = queue.begin(APP, "worker-1")
        assert old is not None
        queue.finish(old, Requeue.NONE)
        assert not queue.holds(old)
        new = queue.begin(APP, "worker-1")
        assert new is not None and new.token != old.token
        assert not queue.holds(old)
        assert not queue.renew(old)
        assert queue.holds(new)

    def test_stale_owner_cannot_release_or_reschedule_the_new_owner(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S4.1.4 fencing: after expiry and takeover, the old run's finish changes nothing."""
        stale = queue.begin(APP, "worker-1", ttl=SHORT_TTL)
        assert stale is not None
        self.expire_lock(queue, clock, stale)
        current = queue.begin(APP, "worker-2")
        assert current is not None
        assert queue.finish(stale, Requeue.BACKOFF) is None
        assert queue.holds(current)
        assert queue.failures(APP) == 0
        assert queue.due_in(APP) is None
        assert queue.finish(current, Requeue.AFTER, delay=42) == pytest.approx(42)

    def test_finish_after_expiry_without_takeover_still_schedules(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """No one else holds the key, so the late run's outcome still decides the next run."""
        lock = queue.begin(APP, "worker-1", ttl=SHORT_TTL)
        assert lock is not None
        self.expire_lock(queue, clock, lock)
        assert queue.finish(lock, Requeue.AFTER, delay=9) == pytest.approx(9)

    def test_finish_releases_the_lock(self, queue: KeyedQueue):
        lock = queue.begin(APP, "worker-1")
        assert lock is not None
        queue.finish(lock, Requeue.RESYNC)
        assert not queue.holds(lock)
        assert queue.begin(APP, "worker-2") is not None

    # -- timers (S4.1.3) -----------------------------------------------------------------

    def test_resync_is_jittered_within_ten_percent(self, queue: KeyedQueue, clock: FakeClock):
        delays = []
        for _ in range(40):
            _, lock = run_next(queue, clock)
            delay = queue.finish(lock, Requeue.RESYNC, resync_seconds=100)
            assert delay is not None
            delays.append(delay)
        assert all(between(d, 90, 110) for d in delays)
        assert len({round(d, 6) for d in delays}) > 1  # actually jittered
        assert queue.failures(APP) == 0

    def test_a_resync_at_least_raises_the_draw_but_never_past_the_jitter_s_high_end(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """A run whose report went now asks its next resync to come no earlier than the
        heartbeat it set (``resync_at_least``, S7.4 rev 4): no draw comes before it, and a
        limit past the jitter's range gives its high end (S4.1.3's 1.1). How a draw is raised
        is ``test_resync_timer.py``'s."""
        limited, capped = [], []
        for _ in range(40):
            _, lock = run_next(queue, clock)
            limited.append(
                queue.finish(lock, Requeue.RESYNC, resync_seconds=100, resync_at_least=105)
            )
            _, lock = run_next(queue, clock)
            capped.append(
                queue.finish(lock, Requeue.RESYNC, resync_seconds=100, resync_at_least=150)
            )
        assert all(between(d, 105, 110) for d in limited)
        assert capped == [pytest.approx(110)] * 40

    def test_backoff_grows_clamps_at_five_minutes_and_resets_on_resync(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S4.1.3: 1 s doubling, x[0.8, 1.2], clamped to [1 s, 300 s]; "resync" resets."""
        for failure in range(1, 13):
            _, lock = run_next(queue, clock)
            delay = queue.finish(lock, Requeue.BACKOFF)
            assert delay is not None
            expected = 2.0 ** (failure - 1)
            low, high = max(0.8 * expected, 1.0), 1.2 * expected
            assert between(delay, min(low, 300.0), min(high, 300.0))
            assert queue.failures(APP) == failure
        assert delay == pytest.approx(300.0)
        _, lock = run_next(queue, clock)
        queue.finish(lock, Requeue.RESYNC, resync_seconds=60)
        assert queue.failures(APP) == 0
        _, lock = run_next(queue, clock)
        assert between(queue.finish(lock, Requeue.BACKOFF), 1.0, 1.2)

    def test_after_waits_its_delay_and_keeps_the_failure_count(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S4.10.0/S4.1.6: a first 404 or a paced wait is not a backoff step."""
        for _ in range(2):
            _, lock = run_next(queue, clock)
            queue.finish(lock, Requeue.BACKOFF)
        _, lock = run_next(queue, clock)
        assert queue.finish(lock, Requeue.AFTER, delay=30) == pytest.approx(30)
        assert queue.failures(APP) == 2

    def test_after_needs_a_delay(self, queue: KeyedQueue):
        lock = queue.begin(APP, "worker-1")
        assert lock is not None
        with pytest.raises(ValueError, match="delay"):
            queue.finish(lock, Requeue.AFTER)
        assert queue.holds(lock)  # nothing happened

    def test_none_schedules_nothing_and_forgets_failures(self, queue: KeyedQueue, clock: FakeClock):
        """Pattern 2: success => forget; nothing to do until a watch event."""
        _, lock = run_next(queue, clock)
        queue.finish(lock, Requeue.BACKOFF)
        _, lock = run_next(queue, clock)
        assert queue.finish(lock, Requeue.NONE) is None
        assert queue.due_in(APP) is None
        assert queue.failures(APP) == 0
        assert queue.depth() == 0

    def test_finish_keeps_a_request_that_was_waiting_before_the_run(self, queue: KeyedQueue):
        """A run begun outside the dispatcher never drops a due time already waiting."""
        queue.add(APP, delay=20)
        lock = queue.begin(APP, "worker-1")
        assert lock is not None
        assert queue.finish(lock, Requeue.RESYNC, resync_seconds=300) == pytest.approx(20)

    def test_forced_full_next_reaches_the_next_ticket_only(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S4.10.0: "requeues in 30 s with the cursor withheld"."""
        queue.add(APP)
        _, lock = run_once(queue)
        queue.finish(lock, Requeue.AFTER, delay=30, forced_full_next=True)
        clock.advance(30)
        ticket, lock = run_once(queue)
        assert ticket.forced_full is True
        queue.finish(lock, Requeue.AFTER, delay=0)
        ticket, _ = run_once(queue)
        assert ticket.forced_full is False

    # -- lost dispatches (scaled mode: lost messages, killed workers) ---------------------

    def test_redispatch_stale_makes_lost_dispatches_due_again(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        queue.add(APP, priority=Priority.FIRST, forced_full=True)
        queue.take_due()
        clock.advance(100)
        assert queue.redispatch_stale(older_than=150) == 0
        clock.advance(100)
        assert queue.redispatch_stale(older_than=150) == 1
        assert queue.take_due() == [Ticket(APP, forced_full=True, priority=Priority.FIRST)]
        assert queue.redispatch_stale(older_than=150) == 0

    def test_redispatch_skips_a_run_whose_lock_is_held(self, queue: KeyedQueue, clock: FakeClock):
        """A long run that keeps renewing its lock is not duplicated."""
        queue.add(APP)
        _, lock = run_once(queue)
        for _ in range(5):  # 500 s, renewed well within the 120 s TTL
            clock.advance(60)
            assert queue.renew(lock)
        assert queue.redispatch_stale(older_than=150) == 0
        assert queue.depth() == 0
        queue.finish(lock, Requeue.RESYNC, resync_seconds=300)
        clock.advance(500)
        assert queue.redispatch_stale(older_than=150) == 0  # finished: nothing dispatched

    def test_redispatch_recovers_a_worker_that_died_holding_the_lock(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        queue.add(APP)
        [ticket] = queue.take_due()
        lock = queue.begin(ticket.key, "worker-1", ttl=SHORT_TTL)
        assert lock is not None
        queue.add(APP)  # dirty: carried into the re-run's priority
        self.expire_lock(queue, clock, lock)
        clock.advance(200)
        assert queue.redispatch_stale(older_than=150) == 1
        assert queue.take_due() == [Ticket(APP, forced_full=False, priority=Priority.FIRST)]

    def test_a_message_whose_key_is_not_handed_out_begins_and_marks_nothing(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S8.4: a broker message sent again by the stale check, arriving after its first copy
        ran, finds its key settled; it neither runs nor marks the key dirty."""
        queue.add(APP)
        queue.take_due()
        first = queue.begin(APP, "worker-1", dispatched_only=True)
        assert first is not None
        queue.finish(first, Requeue.RESYNC, resync_seconds=300)
        assert queue.begin(APP, "worker-2", dispatched_only=True) is None
        assert queue.take_due() == []  # not dirty: nothing is due before the resync
        assert between(queue.due_in(APP), 270, 330)
        # A caller that is not a broker message (manage.py reconcile) still takes the key.
        manual = queue.begin(APP, "cli")
        assert manual is not None

    def test_a_message_sent_twice_by_the_stale_check_runs_once(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        queue.add(APP)
        queue.take_due()
        clock.advance(200)  # the first message still waits in the broker
        assert queue.redispatch_stale(older_than=150) == 1
        assert keys_of(queue.take_due()) == [APP]  # handed out again: a second message
        runs = [queue.begin(APP, worker, dispatched_only=True) for worker in ("w-1", "w-2")]
        first, second = runs
        assert first is not None and second is None  # the lock: one copy at a time, and
        # the refused copy marks nothing: no second run follows the first
        queue.finish(first, Requeue.RESYNC, resync_seconds=300)
        assert queue.begin(APP, "w-2", dispatched_only=True) is None  # the later copy
        assert between(queue.due_in(APP), 270, 330)

    def test_dispatched_count_holds_keys_from_take_until_finish(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """The scaled leader bounds the broker with it (workers/broker_window.py): a key counts
        from ``take_due`` through its run, and not once its run finished or it went stale."""
        queue.add(APP)
        queue.add(WEB)
        queue.add(JOB)
        assert queue.dispatched_count() == 0
        taken = queue.take_due(limit=2)
        assert queue.dispatched_count() == 2
        lock = queue.begin(taken[0].key, "worker-1", dispatched_only=True)
        assert lock is not None
        assert queue.dispatched_count() == 2  # running still counts: its slot is taken
        queue.finish(lock, Requeue.RESYNC)
        assert queue.dispatched_count() == 1
        clock.advance(200)
        assert queue.redispatch_stale(older_than=150) == 1
        assert queue.dispatched_count() == 0

    def test_advertised_slots_add_up_until_they_expire_or_are_withdrawn(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        assert queue.live_slots() == (0, 0)
        queue.advertise_slots("celery@worker-a", 2, ttl=30)
        queue.advertise_slots("celery@worker-b", 4, ttl=10)
        assert queue.live_slots() == (2, 6)
        queue.advertise_slots("celery@worker-a", 3, ttl=30)  # again: replaces, never adds
        assert queue.live_slots() == (2, 7)
        clock.advance(15)
        assert queue.live_slots() == (1, 3)  # worker-b stopped saying so: expired
        queue.withdraw_slots("celery@worker-a")
        assert queue.live_slots() == (0, 0)
        queue.advertise_slots("celery@worker-b", 1, ttl=30)  # a worker back after expiry
        assert queue.live_slots() == (1, 1)

    def test_an_expired_advertisement_is_a_worker_gone_and_a_withdrawn_one_is_not(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        queue.advertise_slots("celery@a~1", 2, ttl=30)
        queue.advertise_slots("celery@b~1", 2, ttl=30)
        assert queue.workers_gone() == frozenset()
        queue.withdraw_slots("celery@b~1")  # stopped cleanly: its runs have ended
        clock.advance(31)
        assert queue.workers_gone() == {"celery@a~1"}
        assert queue.live_slots() == (0, 0)  # gone is not live
        queue.advertise_slots("celery@c~1", 4, ttl=30)
        assert queue.live_slots() == (1, 4)
        clock.advance(GONE_KEPT_SECONDS)
        assert queue.live_slots() == (0, 0)  # the prune that forgets a, long gone
        assert queue.workers_gone() == {"celery@c~1"}

    def test_dispatched_runs_name_the_owner_of_each_lock(self, queue: KeyedQueue):
        queue.add(APP)
        queue.add(WEB)
        queue.take_due()
        assert queue.begin(APP, "celery@a~1/7-abc") is not None
        runs = sorted(queue.dispatched_runs(), key=lambda run: run.key.name)
        assert runs == [DispatchedRun(APP, "celery@a~1/7-abc"), DispatchedRun(WEB, None)]

    def test_redispatch_hands_out_a_dead_owners_key_with_its_triggers(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        queue.add(APP)
        queue.add(WEB)
        queue.take_due()
        dead = queue.begin(APP, "celery@a~1/7-abc")
        assert dead is not None
        queue.add(APP, forced_full=True)  # a trigger mid-run: dirty, carried into the re-run
        assert queue.redispatch(queue.dispatched_runs()) == 2
        assert not queue.holds(dead)  # released: its fencing check fails from now on
        assert queue.dispatched_count() == 0
        assert sorted(queue.take_due(), key=lambda t: t.key.name) == [
            Ticket(APP, forced_full=True, priority=Priority.FIRST),
            Ticket(WEB, forced_full=False, priority=Priority.NORMAL),
        ]
        # The dead run's finish neither releases nor reschedules the new one's key.
        new = queue.begin(APP, "celery@b~1/8-def", dispatched_only=True)
        assert new is not None
        queue.finish(dead, Requeue.AFTER, delay=1)
        assert queue.holds(new)

    def test_redispatch_leaves_a_run_that_moved_on_since_it_was_read(self, queue: KeyedQueue):
        queue.add(APP)
        queue.add(WEB)
        queue.add(JOB)
        queue.take_due()
        finished = queue.begin(APP, "celery@a~1/7-abc")
        assert finished is not None
        read = queue.dispatched_runs()
        queue.finish(finished, Requeue.RESYNC, resync_seconds=300)  # settled meanwhile
        assert queue.begin(WEB, "celery@b~1/8-def") is not None  # begun meanwhile
        assert queue.redispatch(read) == 1  # JOB alone: still handed out, still unlocked
        assert keys_of(queue.take_due()) == [JOB]
        assert between(queue.due_in(APP), 270, 330)
        runs = {run.key: run.owner for run in queue.dispatched_runs()}
        assert runs == {WEB: "celery@b~1/8-def", JOB: None}  # JOB handed out once more

    # -- forget, generation, coordination store ------------------------------------------

    def test_forget_drops_timers_failures_and_marks(self, queue: KeyedQueue, clock: FakeClock):
        lock = queue.begin(APP, "worker-1")
        assert lock is not None
        queue.finish(lock, Requeue.BACKOFF)
        queue.add(WEB)
        queue.take_due()
        queue.forget(APP)
        queue.forget(WEB)
        assert (queue.due_in(APP), queue.failures(APP), queue.depth()) == (None, 0, 0)
        clock.advance(1000)
        assert queue.take_due() == []
        assert queue.redispatch_stale(older_than=150) == 0

    def test_forget_during_run_leaves_the_lock_to_its_run(self, queue: KeyedQueue):
        queue.add(APP)
        _, lock = run_once(queue)
        queue.add(APP)  # dirty
        queue.forget(APP)
        assert queue.holds(lock)
        assert queue.finish(lock, Requeue.NONE) is None  # the dirty mark went with forget
        assert queue.take_due() == []

    def test_generation_marker_reports_a_new_store_once(self, queue: KeyedQueue):
        """S8.4: the first leader finds no marker (store new or lost) and re-enqueues all."""
        assert queue.mark_generation() is False
        assert queue.mark_generation() is True
        assert queue.mark_generation() is True

    def test_not_found_records_round_trip_and_expire_after_an_hour(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S4.10.0: (CR UID, binding digest, time) kept 1 h; cleared on a 200 or binding change."""
        binding = "a" * 64
        assert queue.not_found_seen(APP.uid) is None
        queue.record_not_found(APP.uid, binding, 1234.5)
        assert queue.not_found_seen(APP.uid) == (binding, 1234.5)
        assert queue.not_found_seen(WEB.uid) is None
        clock.advance(3599)
        assert queue.not_found_seen(APP.uid) == (binding, 1234.5)
        queue.record_not_found(WEB.uid, "b" * 64, 99.0)
        clock.advance(1)
        assert queue.not_found_seen(APP.uid) is None
        assert queue.not_found_seen(WEB.uid) == ("b" * 64, 99.0)
        queue.clear_not_found(WEB.uid)
        assert queue.not_found_seen(WEB.uid) is None
        queue.clear_not_found(JOB.uid)  # clearing nothing is fine

    def test_notes_keep_a_value_until_their_lifetime_ends(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        """S7.2/S7.5/S7.6: capability sets, report pauses and the cluster id live this way."""
        assert queue.get_note("capabilities:inst-1") is None
        queue.put_note("capabilities:inst-1", "status-report", 86400)
        queue.put_note("reports-paused:cr-1", "1", 3600)
        clock.advance(3599)
        assert queue.get_note("capabilities:inst-1") == "status-report"
        assert queue.get_note("reports-paused:cr-1") == "1"
        clock.advance(1)
        assert queue.get_note("reports-paused:cr-1") is None
        queue.put_note("capabilities:inst-1", "", 10)  # replaced, even by an empty value
        assert queue.get_note("capabilities:inst-1") == ""

    def test_several_notes_are_read_at_once_in_the_order_named(
        self, queue: KeyedQueue, clock: FakeClock
    ):
        queue.put_note("instance-paused:inst-1", "12.5", 60)
        queue.put_note("reports-paused:cr-1", "1", 10)
        assert queue.get_notes() == []
        names = ("reports-paused:cr-1", "never-written", "instance-paused:inst-1")
        assert queue.get_notes(*names) == ["1", None, "12.5"]
        clock.advance(10)  # one note's lifetime ended, the other's not
        assert queue.get_notes(*names) == [None, None, "12.5"]
        assert queue.get_notes(*names) == [queue.get_note(name) for name in names]

    def test_token_bucket_allows_a_burst_then_the_rate(self, queue: KeyedQueue, clock: FakeClock):
        """S4.1.6: burst tokens at once, then `rate` per second; an empty bucket says when."""
        assert [queue.take_token("inst-1", 10.0, 3) for _ in range(3)] == [0.0, 0.0, 0.0]
        assert queue.take_token("inst-1", 10.0, 3) == pytest.approx(0.1)
        assert queue.take_token("inst-2", 10.0, 3) == 0.0  # buckets are per instance
        clock.advance(0.1)
        assert queue.take_token("inst-1", 10.0, 3) == 0.0
        clock.advance(60)
        assert [queue.take_token("inst-1", 10.0, 3) for _ in range(4)][-1] > 0  # burst caps

    def test_not_found_record_is_replaced_by_a_newer_one(self, queue: KeyedQueue):
        queue.record_not_found(APP.uid, "a" * 64, 1.0)
        queue.record_not_found(APP.uid, "c" * 64, 2.0)
        assert queue.not_found_seen(APP.uid) == ("c" * 64, 2.0)

    def test_stall_first_seen_maps_are_replaced_whole_per_cr(self, queue: KeyedQueue):
        """S6.5: "Kind/name" -> first-seen time per CR; set replaces the map, empty removes it."""
        assert queue.stall_first_seen(APP.uid) == {}
        queue.set_stall_first_seen(APP.uid, {"Deployment/web": 10.5, "StatefulSet/db": 11.0})
        queue.set_stall_first_seen(WEB.uid, {"DaemonSet/agent": 12.0})
        returned = queue.stall_first_seen(APP.uid)
        assert returned == {"Deployment/web": 10.5, "StatefulSet/db": 11.0}
        returned["Deployment/web"] = 0.0  # a copy: the caller cannot change the store
        queue.set_stall_first_seen(APP.uid, {"StatefulSet/db": 11.0})
        assert queue.stall_first_seen(APP.uid) == {"StatefulSet/db": 11.0}
        queue.set_stall_first_seen(APP.uid, {})
        assert queue.stall_first_seen(APP.uid) == {}
        assert queue.stall_first_seen(WEB.uid) == {"DaemonSet/agent": 12.0}

    def test_forget_drops_the_crs_coordination_records(self, queue: KeyedQueue):
        queue.record_not_found(APP.uid, "a" * 64, 1.0)
        queue.set_stall_first_seen(APP.uid, {"Deployment/web": 1.0})
        queue.set_stall_first_seen(WEB.uid, {"Deployment/web": 1.0})
        queue.forget(APP)
        assert queue.not_found_seen(APP.uid) is None
        assert queue.stall_first_seen(APP.uid) == {}
        assert queue.stall_first_seen(WEB.uid) == {"Deployment/web": 1.0}

    # -- concurrency ---------------------------------------------------------------------

    def test_threads_never_hold_one_key_twice(self, queue: KeyedQueue):
        """S4.1.4 under contention: dispatchers, workers and watch events race on three keys."""
        keys = [APP, WEB, JOB]
        holding: set[ObjectKey] = set()
        guard = threading.Lock()
        problems: list[str] = []
        runs = [0]
        outcomes = [Requeue.RESYNC, Requeue.BACKOFF, Requeue.NONE]

        def worker(seed: int) -> None:
            rng = random.Random(seed)
            try:
                for _ in range(300):
                    key = rng.choice(keys)
                    queue.add(key, priority=rng.choice(list(Priority)))
                    candidates = [t.key for t in queue.take_due(limit=2)] + [key]
                    for candidate in candidates:
                        lock = queue.begin(candidate, f"worker-{seed}")
                        if lock is None:
                            continue
                        with guard:
                            if candidate in holding:
                                problems.append(f"{candidate} held twice")
                            holding.add(candidate)
                            runs[0] += 1
                        for _ in range(3):  # stay a while so an overlap would show
                            assert queue.holds(lock)
                            time.sleep(0)  # let other threads run
                        with guard:
                            holding.discard(candidate)
                        queue.finish(lock, rng.choice(outcomes), resync_seconds=10)
            except Exception as error:  # surfaced below; a thread's traceback is lost otherwise
                problems.append(repr(error))

        threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads)
        assert problems == []
        assert runs[0] > 0
        assert queue.depth() <= len(keys)
        for key in keys:  # every lock was released
            lock = queue.begin(key, "checker")
            assert lock is not None
            queue.finish(lock, Requeue.NONE)
