"""S4.1.6 after a restart, walked minute by minute on the queue's fake clock (issue 34 item 8):
a fresh leader's initial list runs every CR that is not Synced at its generation first, and
spreads the Synced ones evenly over min(resyncInterval, 5 min) at resync priority."""

from __future__ import annotations

import random

import pytest

from tests.support.clocks import FakeClock
from tests.unit.test_sources import cr
from workers.leader.sources import EventRouter
from workers.queue.base import Priority
from workers.queue.memory import MemoryQueue

HEALTHY = 500


def _restarted(resync: str) -> tuple[FakeClock, MemoryQueue, list[str]]:
    """A fresh process (embedded: an empty queue) fed the initial list; returns the names that
    must go first."""
    clock = FakeClock()
    queue = MemoryQueue(clock=clock, rng=random.Random(1))
    router = EventRouter(queue, "hikyo-system", rng=random.Random(2))
    others = [
        cr("new", resync=resync),  # never reconciled
        cr("edited", generation=2, observed=1, lifecycle="Synced", resync=resync),
        cr("retained", observed=1, lifecycle="Retained", resync=resync),  # failing
    ]
    healthy = [
        cr(f"h{index}", observed=1, lifecycle="Synced", resync=resync) for index in range(HEALTHY)
    ]
    for obj in [*healthy[:250], *others, *healthy[250:]]:  # the list's order does not matter
        router.on_secret("ADDED", obj, True)
    return clock, queue, [obj["metadata"]["name"] for obj in others]


def _taken(queue: MemoryQueue) -> list[str]:
    tickets = queue.take_due(limit=10 * HEALTHY)
    assert all(ticket.priority is Priority.RESYNC for ticket in tickets)
    return [ticket.key.name for ticket in tickets]


@pytest.mark.parametrize(("resync", "spread"), [("1h", 300.0), ("2m", 120.0)])
def test_after_a_restart_others_go_first_and_synced_crs_resync_evenly(resync, spread):
    clock, queue, first = _restarted(resync)

    at_start = queue.take_due(limit=10 * HEALTHY)
    assert sorted(ticket.key.name for ticket in at_start) == sorted(first)
    assert {ticket.priority for ticket in at_start} == {Priority.FIRST}

    # Five equal slices of the spread: each gets about a fifth of the Synced CRs.
    per_slice = []
    for _ in range(5):
        clock.advance(spread / 5)
        per_slice.append(len(_taken(queue)))
    assert sum(per_slice) == HEALTHY and queue.depth() == 0  # all within the spread
    assert all(0.7 * HEALTHY / 5 <= count <= 1.3 * HEALTHY / 5 for count in per_slice), per_slice
