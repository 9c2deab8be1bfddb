"""S8.4: the dispatcher reports a lost store only when the store really lost its marker; a
normal start (a fresh process, an empty reports queue) is no loss."""

from __future__ import annotations

import threading

import pytest

from tests.support.waiting import wait_for
from workers.leader.dispatcher import Dispatcher
from workers.queue.memory import MemoryQueue
from workers.queue.redis import RedisQueue


def _start(queue, lost: list[int]) -> tuple[Dispatcher, threading.Event]:
    stop = threading.Event()
    dispatcher = Dispatcher(
        queue,
        lambda ticket: None,
        stop,
        on_store_lost=lambda: lost.append(1),
        tick=0.01,
        housekeeping_every=0.01,
    )
    dispatcher.start()
    return dispatcher, stop


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_a_normal_start_reports_no_loss(backend, request, caplog):
    """Before the fix the first housekeeping round found no marker (nothing had set it) and
    re-enqueued every CR at every start."""
    if backend == "memory":
        queue = MemoryQueue()
    else:
        queue = RedisQueue(request.getfixturevalue("redis_client"), prefix="marker-test")
    lost: list[int] = []
    dispatcher, stop = _start(queue, lost)
    try:
        wait_for(lambda: dispatcher.housekept >= 3, timeout=30, what="housekeeping rounds")
    finally:
        stop.set()
        dispatcher.join(timeout=10)
    assert lost == []
    assert "store was lost" not in caplog.text


def test_a_store_that_comes_back_empty_is_reported_once(redis_client):
    queue = RedisQueue(redis_client, prefix="marker-test")
    lost: list[int] = []
    dispatcher, stop = _start(queue, lost)
    try:
        wait_for(lambda: dispatcher.housekept >= 1, timeout=30, what="a housekeeping round")
        redis_client.flushdb()  # Redis restarted empty
        wait_for(lambda: lost, timeout=30, what="the loss to be noticed")
        rounds = dispatcher.housekept
        wait_for(lambda: dispatcher.housekept >= rounds + 3, timeout=30, what="more rounds")
    finally:
        stop.set()
        dispatcher.join(timeout=10)
    assert lost == [1]  # the marker was written again at once: one loss, one re-enqueue
