"""The keyed queue of a sharded install (S4.1.8, docs/scaling.md) on real Redis: each shard
takes only the keys it scheduled, while the per-key lock and the fencing counter are shared by
every shard and every shard layout, so a CR scheduled by two layouts at once (a rolling change
of the shard count) runs once at a time and is never dropped."""

from __future__ import annotations

import random

import pytest
import redis

from tests.queue.contract import APP, WEB, KeyedQueueContract
from tests.support.clocks import FakeClock
from tests.support.waiting import wait_for
from workers.engine.outcome import Requeue
from workers.queue.base import KeyedQueue, Lock
from workers.queue.redis import BUSY_ELSEWHERE_RETRY_SECONDS, RedisQueue
from workers.shards import ShardLayout, of_another_layout


def layout_queue(
    client: redis.Redis, prefix: str, clock: FakeClock, layout: ShardLayout
) -> RedisQueue:
    return RedisQueue(
        client, prefix=prefix, clock=clock, rng=random.Random(7),
        scheduling=layout.schedule_prefix(prefix),
    )  # fmt: skip


class TestShardedRedisQueue(KeyedQueueContract):
    """Everything an unsharded queue promises, one shard's view keeps."""

    @pytest.fixture
    def queue(self, clock: FakeClock, redis_client: redis.Redis, prefix: str) -> RedisQueue:
        return layout_queue(redis_client, prefix, clock, ShardLayout(1, 3))

    def expire_lock(self, queue: KeyedQueue, clock: FakeClock, lock: Lock) -> None:
        wait_for(lambda: not queue.holds(lock), timeout=5, interval=0.02, what="lock expiry")


@pytest.fixture
def two_shards(redis_client, prefix, clock) -> tuple[RedisQueue, RedisQueue]:
    return (
        layout_queue(redis_client, prefix, clock, ShardLayout(0, 2)),
        layout_queue(redis_client, prefix, clock, ShardLayout(1, 2)),
    )


def test_each_shard_takes_only_the_keys_it_scheduled(two_shards):
    first, second = two_shards
    first.add(APP)
    second.add(WEB)
    assert [t.key for t in second.take_due()] == [WEB]
    assert [t.key for t in first.take_due()] == [APP]
    assert first.dispatched_count() == second.dispatched_count() == 1


def test_the_lock_and_the_fencing_numbers_are_shared_by_every_layout(redis_client, prefix, clock):
    """An old layout's run holds APP; the new layout dispatched APP too: its run does not
    start, and the key is due again shortly in the new layout (not left dispatched until the
    stale check, and not marked dirty for a finish that never comes there)."""
    old = layout_queue(redis_client, prefix, clock, ShardLayout(1, 2))
    new = layout_queue(redis_client, prefix, clock, ShardLayout(2, 3))
    old.add(APP)
    new.add(APP)
    [ticket] = old.take_due()
    held = old.begin(ticket.key, "old-worker", dispatched_only=True)
    assert held is not None
    assert [t.key for t in new.take_due()] == [APP]
    assert new.begin(APP, "new-worker", dispatched_only=True) is None
    assert new.dispatched_count() == 0
    assert new.due_in(APP) == pytest.approx(BUSY_ELSEWHERE_RETRY_SECONDS)

    # A trigger that arrives in the new layout meanwhile waits there, due now.
    new.add(APP)
    assert new.due_in(APP) == pytest.approx(0)

    old.finish(held, Requeue.RESYNC)
    [again] = new.take_due()
    lock = new.begin(again.key, "new-worker", dispatched_only=True)
    assert lock is not None
    assert int(lock.token) > int(held.token)  # one fencing counter for all layouts
    assert not old.holds(held)
    assert new.holds(lock) and old.holds(lock)  # and one lock


def test_a_stale_run_of_the_old_layout_is_fenced_out(redis_client, prefix, clock):
    old = layout_queue(redis_client, prefix, clock, ShardLayout(0, 2))
    new = layout_queue(redis_client, prefix, clock, ShardLayout(0, 3))
    stale = old.begin(APP, "old-worker", ttl=0.05)
    assert stale is not None
    wait_for(lambda: not old.holds(stale), timeout=5, interval=0.02, what="lock expiry")
    current = new.begin(APP, "new-worker")
    assert current is not None
    assert old.finish(stale, Requeue.RESYNC) is None  # fenced: changes nothing
    assert new.holds(current)


def test_a_new_layout_retires_only_the_other_layouts_scheduling(redis_client, prefix, clock):
    unsharded = layout_queue(redis_client, prefix, clock, ShardLayout())
    old = layout_queue(redis_client, prefix, clock, ShardLayout(1, 2))
    new = layout_queue(redis_client, prefix, clock, ShardLayout(0, 3))
    for queue in (unsharded, old, new):
        queue.add(APP)
        queue.mark_generation()
    unsharded.record_not_found("uid-1", "digest", 1.0)
    unsharded.advertise_slots("worker-1", 2, ttl=60)
    lock = new.begin(WEB, "worker-1")
    assert lock is not None

    gone = new.retire(lambda key: of_another_layout(key, prefix, ShardLayout(0, 3)))

    assert gone > 0
    assert unsharded.depth() == old.depth() == 0
    assert new.depth() == 1
    assert new.mark_generation()  # its own marker stayed
    assert new.not_found_seen("uid-1") == ("digest", 1.0)
    assert new.live_slots() == (1, 2)
    assert new.holds(lock)
