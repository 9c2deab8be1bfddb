"""workers/queue/lag.py: how late the reconcile queue runs keys, as a ride decision reads it."""

from __future__ import annotations

from tests.support.clocks import FakeClock
from workers.keys import ObjectKey
from workers.queue.base import Priority
from workers.queue.lag import LagObserver, ScheduleLag
from workers.queue.memory import MemoryQueue


def test_the_largest_wait_of_the_last_minute_counts():
    clock = FakeClock()
    lag = ScheduleLag(clock, window=60.0)
    assert lag.seconds() == 0.0
    lag.note(200.0)
    lag.note(3.0)  # a fresh edit taken at once does not hide the backlog
    assert lag.seconds() == 200.0
    clock.now += 45  # a new half-window: the old one still counts
    lag.note(5.0)
    assert lag.seconds() == 200.0
    clock.now += 30  # the half-window with 200 s has rolled off
    assert lag.seconds() == 5.0
    clock.now += 120  # nothing taken for two half-windows: no lag known
    assert lag.seconds() == 0.0


class _Recorded:
    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def added(self, count: int = 1) -> None:
        self.calls.append(("added", count))

    def taken(self, waited_seconds: float) -> None:
        self.calls.append(("taken", waited_seconds))

    def retried(self) -> None:
        self.calls.append(("retried", 0))


def test_a_queue_taking_a_key_notes_how_long_it_waited_and_still_tells_its_metrics():
    clock = FakeClock()
    lag, inner = ScheduleLag(clock), _Recorded()
    queue = MemoryQueue(clock)
    queue.observer = LagObserver(inner, lag)
    key = ObjectKey("ns", "app", "uid-1")
    queue.schedule(key, delay=10.0, priority=Priority.RESYNC)
    clock.now += 10 + 212  # due 212 s ago when taken
    [ticket] = queue.take_due()
    assert ticket.key == key
    assert lag.seconds() == 212.0
    assert inner.calls == [("added", 1), ("taken", 212.0)]
