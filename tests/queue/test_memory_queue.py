"""The keyed-queue contract on the embedded mode's in-memory backend (S8.4)."""

from __future__ import annotations

import random

import pytest

from tests.queue.contract import APP, SHORT_TTL, KeyedQueueContract
from tests.support.clocks import FakeClock
from workers.keys import ObjectKey
from workers.queue.base import KeyedQueue, Lock, Priority
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


def test_due_at_least_agrees_with_due_count_over_deep_heaps():
    """The memory backend walks only the heap entries due now (MemoryQueue.due_at_least): over
    hundreds of keys moved, taken and forgotten at random, it answers as counting every key."""
    clock, rng = FakeClock(), random.Random(11)
    queue = MemoryQueue(clock=clock, rng=random.Random(7))
    keys = [ObjectKey("team-d", f"k{i}", f"0b5e1f0c-0000-4000-8000-{i:012d}") for i in range(300)]
    for step in range(600):
        key, roll = rng.choice(keys), rng.random()
        if roll < 0.6:
            queue.add(key, priority=rng.choice(list(Priority)), delay=rng.uniform(-5, 60))
        elif roll < 0.7:
            queue.forget(key)
        elif roll < 0.8:
            queue.take_due(limit=rng.randint(1, 5))
        else:
            clock.advance(rng.uniform(0, 5))
        due = queue.due_count()
        for count in {0, 1, due - 1, due, due + 1, rng.randint(0, 300)}:
            assert queue.due_at_least(count) == (due >= count), (step, count, due)
