"""client-go's workqueue metrics (S8.6) from both keyed-queue backends alike: the in-memory
queue (embedded) and the Redis queue (scaled, real redis-server). Adds count keys entering the
waiting state once, takes observe how long a key had been due, backoff settlements count as
retries, and the depth read at scrape time tells due keys from scheduled ones."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import CollectorRegistry

from tests.support.waiting import wait_for
from workers.engine.outcome import Requeue
from workers.keys import ObjectKey
from workers.metrics import Metrics
from workers.queue.base import KeyedQueue, Priority
from workers.queue.memory import MemoryQueue
from workers.queue.redis import RedisQueue

A = ObjectKey("ns", "a", "uid-a")
B = ObjectKey("ns", "b", "uid-b")
NAME = {"name": "hikyosecret"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.25

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", "redis"])
def queue_and_clock(request) -> tuple[KeyedQueue, Clock]:
    clock = Clock()
    if request.param == "memory":
        return MemoryQueue(clock=clock), clock
    server = request.getfixturevalue("redis_server")
    client = server.client()
    request.addfinalizer(client.close)
    return RedisQueue(client, prefix=f"metrics-{uuid.uuid4().hex[:8]}", clock=clock), clock


def value(registry: CollectorRegistry, metric: str) -> float:
    found = registry.get_sample_value(metric, NAME)
    return 0.0 if found is None else found


def test_both_backends_report_adds_waits_retries_and_due_depth(queue_and_clock):
    queue, clock = queue_and_clock
    registry = CollectorRegistry()
    queue.observer = Metrics(registry).workqueue("hikyosecret")

    queue.add(A)
    queue.add(A, priority=Priority.FIRST)  # dedupe: A is already waiting
    queue.schedule(B, delay=60.0)
    queue.schedule(B, delay=90.0, only_if_unscheduled=True)
    assert value(registry, "workqueue_adds_total") == 2
    assert (queue.depth(), queue.due_count()) == (2, 1)  # B is scheduled, not due

    clock.now += 4.5
    [ticket] = queue.take_due()
    assert ticket.key == A
    assert value(registry, "workqueue_queue_duration_seconds_count") == 1
    assert value(registry, "workqueue_queue_duration_seconds_sum") == pytest.approx(4.5)
    assert queue.due_count() == 0

    queue.add(A)  # in flight: marked dirty, not added
    assert value(registry, "workqueue_adds_total") == 2
    lock = queue.begin(A, "worker")
    assert lock is not None
    queue.finish(lock, Requeue.BACKOFF)
    assert value(registry, "workqueue_retries_total") == 1
    assert value(registry, "workqueue_adds_total") == 3  # back in (dirty: at once)

    [again] = queue.take_due()
    stale = queue.begin(A, "worker", ttl=0.2)  # Redis expires it in real time (PX)
    assert again.key == A and stale is not None
    clock.now += 200  # the memory queue expires it on its clock
    taken = wait_for(lambda: queue.begin(A, "other"), timeout=10, interval=0.05)
    queue.finish(stale, Requeue.BACKOFF)  # fenced: changes nothing, counts nothing
    assert value(registry, "workqueue_retries_total") == 1
    queue.finish(taken, Requeue.RESYNC, resync_seconds=300.0)
    assert value(registry, "workqueue_adds_total") == 4  # its resync timer
    assert value(registry, "workqueue_retries_total") == 1


def test_a_dispatched_key_that_never_ran_is_added_again(queue_and_clock):
    queue, clock = queue_and_clock
    registry = CollectorRegistry()
    queue.observer = Metrics(registry).workqueue("hikyosecret")
    queue.add(A)
    assert [t.key for t in queue.take_due()] == [A]
    clock.now += 200
    assert queue.redispatch_stale(150.0) == 1
    assert value(registry, "workqueue_adds_total") == 2
