"""The keyed-queue contract on the embedded mode's in-memory backend (S8.4)."""

from __future__ import annotations

import random

import pytest

from tests.queue.conftest import FakeClock
from tests.queue.contract import APP, SHORT_TTL, KeyedQueueContract
from workers.queue.base import KeyedQueue, Lock
from workers.queue.memory import MemoryQueue


class TestMemoryQueue(KeyedQueueContract):
    @pytest.fixture
    def queue(self, clock: FakeClock) -> MemoryQueue:
        return MemoryQueue(clock=clock, rng=random.Random(7))

    def expire_lock(self, queue: KeyedQueue, clock: FakeClock, lock: Lock) -> None:
        clock.advance(SHORT_TTL)  # expiry is on the injected clock: exactly at the TTL


def test_a_fresh_process_starts_with_an_empty_store():
    """S8.4: embedded mode loses its store on restart, and says so to the leader."""
    first = MemoryQueue()
    assert first.mark_generation() is False
    assert MemoryQueue().mark_generation() is False


def test_superseded_entries_are_compacted(clock: FakeClock):
    """Many re-adds that move a key earlier do not grow memory without bound."""
    queue = MemoryQueue(clock=clock)
    for step in range(5000):
        queue.add(APP, delay=10_000 - step)
    heaps = queue._heaps.values()
    assert sum(len(heap) for heap in heaps) <= 2 * 1024 + 2
    clock.advance(10_000)
    assert [t.key for t in queue.take_due()] == [APP]
