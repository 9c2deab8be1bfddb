"""S4.1.1, S4.1.2, S4.1.6, S8.4: how watch events become queue entries."""

from __future__ import annotations

import random

import pytest

from workers.keys import ObjectKey
from workers.queue.base import Priority
from workers.queue.memory import MemoryQueue
from workers.sources import EventRouter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cr(
    name="app",
    *,
    generation=1,
    observed=None,
    lifecycle=None,
    ns="team",
    instance="primary",
    resync="5m",
    deleting=False,
    finalizers=(),
):
    status = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if lifecycle:
        status["lifecycle"] = lifecycle
    metadata = {
        "namespace": ns,
        "name": name,
        "uid": f"uid-{name}",
        "generation": generation,
        "finalizers": list(finalizers),
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": metadata,
        "status": status,
        "spec": {
            "instanceRef": {"name": instance},
            "target": {"name": f"{name}-env"},
            "resyncInterval": resync,
        },
    }


def key(name="app", ns="team"):
    return ObjectKey(ns, name, f"uid-{name}")


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def queue(clock):
    return MemoryQueue(clock=clock, rng=random.Random(1))


@pytest.fixture
def router(queue):
    return EventRouter(queue, "hikyo-system", rng=random.Random(2))


def test_new_cr_runs_first(router, queue):
    router.on_secret("ADDED", cr(), True)
    assert queue.take_due() and queue.take_due() == []


def test_healthy_crs_are_spread_over_at_most_five_minutes(router, queue):
    for index in range(50):
        router.on_secret(
            "ADDED", cr(f"c{index}", observed=1, lifecycle="Synced", resync="1h"), True
        )
    delays = [queue.due_in(key(f"c{index}")) for index in range(50)]
    assert all(0 <= d <= 300 for d in delays)
    assert max(delays) - min(delays) > 60  # really spread, not all at once


def test_first_syncs_come_before_resyncs(router, queue, clock):
    router.on_secret("ADDED", cr("old", observed=1, lifecycle="Synced", resync="10s"), True)
    router.on_secret("ADDED", cr("new"), True)
    clock.now += 20
    tickets = queue.take_due()
    assert [t.key.name for t in tickets] == ["new", "old"]
    assert tickets[0].priority is Priority.FIRST and tickets[1].priority is Priority.RESYNC


def test_status_only_update_never_enqueues(router, queue):
    router.on_secret("ADDED", cr(observed=1, lifecycle="Synced"), True)
    queue.take_due()
    queue.forget(key())
    router.on_secret("MODIFIED", cr(observed=1, lifecycle="Retained"), False)
    assert queue.due_in(key()) is None


@pytest.mark.parametrize(
    "change", [{"generation": 2}, {"deleting": True}, {"finalizers": ("hikyo.dev/orphan",)}]
)
def test_generation_deletion_or_finalizer_change_enqueues_first(router, queue, change):
    router.on_secret("ADDED", cr(observed=1, lifecycle="Synced"), True)
    queue.forget(key())
    router.on_secret("MODIFIED", cr(observed=1, lifecycle="Synced", **change), False)
    assert queue.due_in(key()) <= 0


def test_relist_keeps_a_due_time_but_not_an_unobserved_generation(router, queue):
    router.on_secret("ADDED", cr(observed=1, lifecycle="Retained"), True)
    queue.take_due()
    lock = queue.begin(key(), "w")
    from workers.engine.outcome import Requeue

    queue.finish(lock, Requeue.BACKOFF)
    backoff = queue.due_in(key())
    fresh = EventRouter(queue, "hikyo-system")  # a new leader term
    fresh.on_secret("ADDED", cr(observed=1, lifecycle="Retained"), True)
    assert queue.due_in(key()) == pytest.approx(backoff)  # S4.1.2: keeps its backoff
    fresh.on_secret("ADDED", cr(generation=2, observed=1, lifecycle="Retained"), True)
    assert queue.due_in(key()) <= 0  # edited while nobody watched: runs now


def test_deleted_cr_is_forgotten(router, queue):
    router.on_secret("ADDED", cr(), True)
    router.on_secret("DELETED", cr(), False)
    assert queue.due_in(key()) is None and router.keys() == []


def test_operator_namespace_is_ignored(router, queue):
    router.on_secret("ADDED", cr(ns="hikyo-system"), True)
    assert queue.depth() == 0


def test_instance_events_fan_out_to_its_crs(router, queue):
    router.on_secret("ADDED", cr("a", observed=1, lifecycle="Synced"), True)
    router.on_secret("ADDED", cr("b", observed=1, lifecycle="Synced", instance="other"), True)
    router.on_instance("ADDED", {"metadata": {"name": "primary"}}, True)
    assert queue.due_in(key("a")) > 0  # the initial list does not re-run everything
    router.on_instance("DELETED", {"metadata": {"name": "primary"}}, False)
    assert queue.due_in(key("a")) <= 0
    assert queue.due_in(key("b")) > 0


def test_store_lost_reenqueues_every_cr(router, queue):
    router.on_secret("ADDED", cr("a", observed=1, lifecycle="Synced"), True)
    router.on_secret("ADDED", cr("b"), True)
    queue.forget(key("a"))
    queue.forget(key("b"))
    assert router.reenqueue_all() == 2
    assert queue.due_in(key("a")) is not None and queue.due_in(key("b")) <= 0
