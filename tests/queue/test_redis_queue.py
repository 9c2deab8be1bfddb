"""The keyed-queue contract on the scaled mode's Redis backend, plus what only Redis promises:
state that outlives processes, server-side TTLs, and a store free of values (S8.4, S0.4.1)."""

from __future__ import annotations

import multiprocessing
import random
import re

import pytest
import redis

from tests.queue.contract import APP, JOB, WEB, KeyedQueueContract
from tests.queue.hammer import hammer
from tests.support.clocks import FakeClock
from tests.support.processes import locate_redis_server
from tests.support.waiting import wait_for
from workers.engine.outcome import Requeue
from workers.keys import ObjectKey
from workers.queue.base import KeyedQueue, Lock, Priority
from workers.queue.redis import RedisQueue, key_of, member


class TestRedisQueue(KeyedQueueContract):
    @pytest.fixture
    def queue(self, clock: FakeClock, redis_client: redis.Redis, prefix: str) -> RedisQueue:
        return RedisQueue(redis_client, prefix=prefix, clock=clock, rng=random.Random(7))

    def expire_lock(self, queue: KeyedQueue, clock: FakeClock, lock: Lock) -> None:
        # Locks are PX keys: Redis expires them on its own clock, so wait (briefly) for it.
        wait_for(lambda: not queue.holds(lock), timeout=5, interval=0.02, what="lock expiry")


@pytest.fixture
def queue(clock: FakeClock, redis_client: redis.Redis, prefix: str) -> RedisQueue:
    return RedisQueue(redis_client, prefix=prefix, clock=clock, rng=random.Random(7))


def test_state_survives_the_processes_that_wrote_it(
    queue: RedisQueue, redis_server, clock: FakeClock, prefix: str
):
    """S8.4: a worker crash or a leader failover resets nothing; a new process sees it all."""
    lock = queue.begin(APP, "worker-1")
    assert lock is not None
    queue.finish(lock, Requeue.BACKOFF)
    queue.add(WEB, priority=Priority.FIRST)
    queue.take_due(limit=1)  # WEB dispatched by the old leader, then the leader dies
    queue.add(JOB, delay=60)
    queue.record_not_found(JOB.uid, "d" * 64, 5.0)
    assert queue.mark_generation() is False

    other = redis_server.client()
    try:
        successor = RedisQueue(other, prefix=prefix, clock=clock)
        assert successor.mark_generation() is True
        assert successor.failures(APP) == 1
        assert successor.due_in(JOB) == pytest.approx(60)
        assert successor.depth() == 2
        assert successor.not_found_seen(JOB.uid) == ("d" * 64, 5.0)
        clock.advance(200)
        assert successor.redispatch_stale(older_than=150) == 1
        assert [t.key for t in successor.take_due()] == [WEB, APP, JOB]
    finally:
        other.close()


def test_store_lost_is_reported_by_the_generation_marker(
    queue: RedisQueue, redis_client: redis.Redis
):
    """S8.4: a flushed or restarted (non-persistent) Redis loses the marker: re-enqueue all."""
    assert queue.mark_generation() is False
    assert queue.mark_generation() is True
    redis_client.flushdb()
    assert queue.mark_generation() is False


def test_locks_and_not_found_records_expire_on_the_server(
    queue: RedisQueue, redis_client: redis.Redis, prefix: str
):
    """S4.1.4 lock TTL and S4.10.0's 1 h record TTL are Redis PX TTLs: nothing leaks."""
    lock = queue.begin(APP, "worker-1", ttl=120)
    assert lock is not None
    assert 0 < redis_client.pttl(f"{prefix}:lock:{member(APP)}") <= 120_000
    assert queue.renew(lock, ttl=60)
    assert 0 < redis_client.pttl(f"{prefix}:lock:{member(APP)}") <= 60_000
    queue.record_not_found(APP.uid, "e" * 64, 1.0)
    assert 3_500_000 < redis_client.pttl(f"{prefix}:notfound:{APP.uid}") <= 3_600_000


def test_works_with_a_decoding_client(redis_server, clock: FakeClock, prefix: str):
    """The caller may build its client with decode_responses either way."""
    client = redis_server.client(decode_responses=True)
    try:
        queue = RedisQueue(client, prefix=prefix, clock=clock)
        queue.add(APP, forced_full=True)
        [ticket] = queue.take_due()
        assert ticket.forced_full and ticket.key == APP
        lock = queue.begin(APP, "worker-1")
        assert lock is not None and queue.holds(lock)
        assert queue.finish(lock, Requeue.AFTER, delay=3) == pytest.approx(3)
        queue.record_not_found(APP.uid, "f" * 64, 2.0)
        assert queue.not_found_seen(APP.uid) == ("f" * 64, 2.0)
    finally:
        client.close()


class _CountingClient(redis.Redis):
    """Counts the commands sent to the server (a script call is one)."""

    sent = 0

    def execute_command(self, *args, **options):
        type(self).sent += 1
        return super().execute_command(*args, **options)


@pytest.mark.parametrize(
    ("requeue", "options", "round_trips"),
    [
        (Requeue.RESYNC, {"resync_seconds": 60}, 1),
        (Requeue.AFTER, {"delay": 30}, 1),
        (Requeue.NONE, {}, 1),
        (Requeue.BACKOFF, {}, 2),  # the failure count read first, for its delay
    ],
)
def test_only_a_backoff_reads_the_failure_count_before_it_finishes(
    redis_server, clock: FakeClock, prefix: str, requeue, options, round_trips
):
    """Issue 13: finishing a run is one round trip unless its timer depends on the count."""
    client = _CountingClient.from_url(redis_server.url)
    try:
        queue = RedisQueue(client, prefix=prefix, clock=clock, rng=random.Random(7))
        queue.finish(queue.begin(APP, "worker-1"), Requeue.BACKOFF)  # a count of 1
        lock = queue.begin(APP, "worker-1")
        assert lock is not None
        _CountingClient.sent = 0
        queue.finish(lock, requeue, **options)
        assert _CountingClient.sent == round_trips
        assert queue.failures(APP) == {Requeue.AFTER: 1, Requeue.BACKOFF: 2}.get(requeue, 0)
    finally:
        client.close()


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(APP, id="plain"),
        pytest.param(ObjectKey("ns", "odd/name", "u-1"), id="slash-in-name"),
    ],
)
def test_member_round_trips(key: ObjectKey):
    assert key_of(member(key)) == key


def test_member_rejects_a_slash_in_namespace_or_uid():
    with pytest.raises(ValueError, match="'/'"):
        member(ObjectKey("a/b", "name", "uid"))


def test_processes_never_hold_one_key_twice(redis_server, redis_client: redis.Redis, prefix: str):
    """S4.1.4 across processes: four worker processes race on three keys, real clock."""
    check = f"{prefix}-check"
    keys = [(k.namespace, k.name, k.uid) for k in (APP, WEB, JOB)]
    context = multiprocessing.get_context("spawn")  # no fork of a threaded pytest process
    processes = [
        context.Process(target=hammer, args=(redis_server.port, prefix, check, keys, seed))
        for seed in range(4)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    assert int(redis_client.get(f"{check}:runs") or 0) > 0
    assert redis_client.get(f"{check}:overlaps") is None
    assert redis_client.get(f"{check}:fenced") is None
    assert redis_client.keys(f"{prefix}:lock:*") == []  # every lock released


# -- S0.4.1 / S8.4: references, digests, counts and times only ------------------------------

FIELD_NAMES = {
    "prio", "forced", "dprio", "dforced", "failures", "dirty", "dirty_forced",
    "pdue", "pprio", "pforced", "binding", "at", "seen",
}  # fmt: skip
KEY_WORDS = {"due", "dispatched", "state", "lock", "fence", "generation", "notfound", "stall"}
WORKLOAD = "Deployment/web"  # S6.5 stall maps are keyed by workload kind/name
OWNERS = {"worker-1", "worker-2"}
DIGEST = "0123456789abcdef" * 4
NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")


def _exercise(queue: RedisQueue, clock: FakeClock) -> None:
    """Touch every kind of state the queue keeps, leaving some of each behind."""
    queue.mark_generation()
    queue.add(APP, priority=Priority.FIRST, forced_full=True)
    queue.add(WEB, delay=30)
    queue.schedule(JOB, delay=0)
    [first, *_] = queue.take_due(limit=2)
    lock = queue.begin(first.key, "worker-1")
    assert lock is not None
    assert queue.begin(first.key, "worker-2") is None  # dirty mark
    queue.schedule(first.key, delay=5, priority=Priority.NORMAL)  # pending timer
    queue.finish(lock, Requeue.BACKOFF, forced_full_next=True)
    held = queue.begin(WEB, "worker-2")
    assert held is not None
    queue.add(WEB, forced_full=True)  # dirty while held: left in the store
    queue.schedule(WEB, delay=5)  # a pending timer, also left behind
    queue.record_not_found(APP.uid, DIGEST, clock())
    queue.set_stall_first_seen(WEB.uid, {WORKLOAD: clock()})
    clock.advance(200)
    queue.redispatch_stale(older_than=150)
    queue.take_due(limit=1)  # leave one key dispatched


def _allowed_text(text: str, prefix: str, members: set[str], uids: set[str]) -> bool:
    if (
        text in FIELD_NAMES
        or text in members
        or text in (DIGEST, WORKLOAD)
        or NUMBER.fullmatch(text)
    ):
        return True
    token, _, owner = text.partition(" ")  # a lock: "<fencing number> <owner>"
    if NUMBER.fullmatch(token) and owner in OWNERS:
        return True
    if text.startswith(f"{prefix}:"):  # a key name: prefix, fixed words, members, uids
        head, _, rest = text[len(prefix) + 1 :].partition(":")
        return head in KEY_WORDS and (
            rest in members or rest in uids or rest in {"", "0", "1", "2"}
        )
    return False


def test_store_holds_only_references_numbers_and_field_names(
    queue: RedisQueue, redis_client: redis.Redis, clock: FakeClock, prefix: str
):
    """S0.4.1, S8.4: scan every key and value; nothing but our keys' identity, numbers, fixed
    field names, the binding digest and lock owners is there (no payload can hide)."""
    _exercise(queue, clock)
    members = {member(k) for k in (APP, WEB, JOB)}
    uids = {k.uid for k in (APP, WEB, JOB)}
    seen: list[str] = []
    for raw_key in redis_client.scan_iter(match="*"):
        key = raw_key.decode()
        seen.append(key)
        kind = redis_client.type(key).decode()
        if kind == "string":
            texts = [redis_client.get(key)]
        elif kind == "hash":
            texts = [t for pair in redis_client.hgetall(key).items() for t in pair]
        elif kind == "zset":
            texts = [m for m, _ in redis_client.zrange(key, 0, -1, withscores=True)]
        else:
            pytest.fail(f"unexpected Redis type {kind} at {key}")
        for text in [key, *(t.decode() for t in texts if t is not None)]:
            assert _allowed_text(text, prefix, members, uids), f"{key}: {text!r}"
    assert all(key.startswith(f"{prefix}:") for key in seen)
    kinds = {key[len(prefix) + 1 :].split(":")[0] for key in seen}
    assert kinds == KEY_WORDS


# -- the Redis fixture's own gate ------------------------------------------------------------


def test_missing_redis_server_fails_with_a_clear_message(tmp_path):
    """design.md: a missing service fails; it is never skipped silently."""
    with pytest.raises(pytest.fail.Exception, match="redis-server not found"):
        locate_redis_server(skip_integration=False, candidate=str(tmp_path / "redis-server"))


def test_missing_redis_server_skips_only_when_told(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="HIKYO_SKIP_INTEGRATION"):
        locate_redis_server(skip_integration=True, candidate=str(tmp_path / "redis-server"))
