"""Issue 33 item 6: the keys a dead worker took are handed out again as soon as its slot
advertisement expires, not after the 150 s stale-dispatch window; a live worker's runs and a
cleanly stopped worker's keys are left alone. The dispatcher runs for real on both backends;
only the clock is injected, so the advertisement's 30 s pass at once."""

from __future__ import annotations

import threading

import pytest

from tests.queue.contract import APP, JOB, WEB
from tests.support.clocks import FakeClock
from tests.support.waiting import wait_for
from workers.broker_window import SLOTS_TTL_SECONDS
from workers.keys import ObjectKey
from workers.leader.dispatcher import Dispatcher
from workers.queue.base import KeyedQueue, Ticket
from workers.queue.memory import MemoryQueue
from workers.queue.orphans import run_owner
from workers.queue.redis import RedisQueue

STALE_NEVER = 10**9  # the stale-dispatch window plays no part here


@pytest.fixture(params=["memory", "redis"])
def queue(request, clock: FakeClock) -> KeyedQueue:
    if request.param == "memory":
        return MemoryQueue(clock=clock)
    return RedisQueue(request.getfixturevalue("redis_client"), prefix="dead", clock=clock)


class Leader:
    """A dispatcher whose housekeeping runs every round, and what it handed out."""

    def __init__(self, queue: KeyedQueue) -> None:
        self.queue = queue
        self.sent: list[Ticket] = []
        self.stop = threading.Event()
        self.dispatcher = Dispatcher(
            queue,
            self.sent.append,
            self.stop,
            workers_gone=queue.workers_gone,
            stale_after=STALE_NEVER,
            tick=0.01,
            housekeeping_every=0.0,
        )

    def __enter__(self) -> Leader:
        self.dispatcher.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.dispatcher.join(timeout=10)

    def sent_keys(self) -> list[ObjectKey]:
        return [ticket.key for ticket in self.sent]

    def rounds(self, count: int) -> None:
        """Wait for ``count`` more housekeeping rounds (each one judges the workers)."""
        target = self.dispatcher.housekept + count
        wait_for(lambda: self.dispatcher.housekept >= target, timeout=30, what="housekeeping")


def test_a_dead_workers_keys_are_handed_out_once_its_advertisement_expires(queue, clock):
    queue.advertise_slots("celery@a~1", 2, ttl=SLOTS_TTL_SECONDS)
    queue.advertise_slots("celery@b~1", 2, ttl=SLOTS_TTL_SECONDS)
    queue.add(APP)
    queue.add(WEB)
    with Leader(queue) as leader:
        wait_for(lambda: len(leader.sent) == 2, timeout=30, what="both keys handed out")
        dead = queue.begin(APP, run_owner("celery@a~1"), dispatched_only=True)
        live = queue.begin(WEB, run_owner("celery@b~1"), dispatched_only=True)
        assert dead is not None and live is not None
        leader.rounds(2)
        assert leader.sent_keys() == [APP, WEB]  # both workers live: nothing handed out again
        # b says it still lives before the clock jumps, for longer than the jump: a round running
        # between the jump and a later advertisement would find b gone too (a loaded CI lane did).
        queue.advertise_slots("celery@b~1", 2, ttl=3 * SLOTS_TTL_SECONDS)
        clock.advance(SLOTS_TTL_SECONDS + 1)
        wait_for(lambda: len(leader.sent) == 3, timeout=30, what="a's key handed out again")
        leader.rounds(2)
    assert leader.sent_keys() == [APP, WEB, APP]
    assert not queue.holds(dead)  # a's run, were it alive, fails its fencing check
    assert queue.holds(live)


def test_a_newly_dead_worker_sends_the_unlocked_keys_again(queue, clock):
    """The broker does not say which messages the dead worker had prefetched: every handed-out
    key nobody runs is sent again, once (the copy that comes first runs)."""
    queue.advertise_slots("celery@a~1", 2, ttl=SLOTS_TTL_SECONDS)
    queue.add(APP)
    queue.add(JOB)
    with Leader(queue) as leader:
        wait_for(lambda: len(leader.sent) == 2, timeout=30, what="both keys handed out")
        clock.advance(SLOTS_TTL_SECONDS + 1)
        wait_for(lambda: len(leader.sent) == 4, timeout=30, what="both sent again")
        leader.rounds(3)  # a is no longer newly gone: sent again once, not every round
    assert sorted(key.name for key in leader.sent_keys()) == ["app", "app", "job", "job"]


def test_a_worker_that_stopped_cleanly_leaves_its_keys_to_their_runs(queue, clock):
    queue.advertise_slots("celery@a~1", 2, ttl=SLOTS_TTL_SECONDS)
    queue.add(APP)
    with Leader(queue) as leader:
        wait_for(lambda: len(leader.sent) == 1, timeout=30, what="the key handed out")
        run = queue.begin(APP, run_owner("celery@a~1"), dispatched_only=True)
        assert run is not None
        queue.withdraw_slots("celery@a~1")
        clock.advance(SLOTS_TTL_SECONDS + 1)
        leader.rounds(3)
    assert leader.sent_keys() == [APP]
    assert queue.holds(run)
