"""S4.1.1, S4.1.2, S4.1.6, S8.4: how watch events become queue entries."""

from __future__ import annotations

import random

import pytest

from workers.engine.force_sync import FORCE_SYNC_ANNOTATION
from workers.keys import ObjectKey
from workers.leader.sources import EventRouter
from workers.queue.base import Priority
from workers.queue.memory import MemoryQueue


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
    annotations=None,
    handled=None,
):
    status = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if lifecycle:
        status["lifecycle"] = lifecycle
    if handled is not None:  # status.lastForcedSync.value
        status["lastForcedSync"] = {
            "value": handled,
            "reason": "Delivered",
            "fetched": True,
            "wroteSecret": False,
        }
    metadata = {
        "namespace": ns,
        "name": name,
        "uid": f"uid-{name}",
        "generation": generation,
        "finalizers": list(finalizers),
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
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


# -- hikyo.dev/force-sync (issue 9 item 1) ----------------------------------------------------


def synced(name="app", *, value=None, handled=None, **extra):
    """A CR Synced at its generation, optionally asking for force-sync ``value``."""
    annotations = dict(extra.pop("annotations", None) or {})
    if value is not None:
        annotations[FORCE_SYNC_ANNOTATION] = value
    return cr(
        name, observed=1, lifecycle="Synced", annotations=annotations, handled=handled, **extra
    )


@pytest.fixture
def settled(router, queue):
    """A Synced CR the router knows, with nothing waiting in the queue."""
    router.on_secret("ADDED", synced(), True)
    queue.forget(key())
    return router


def test_a_new_force_sync_value_enqueues_once_with_first_priority(settled, queue):
    settled.on_secret("MODIFIED", synced(value="1700000000"), False)
    [ticket] = queue.take_due()
    assert ticket.key == key() and ticket.priority is Priority.FIRST
    # The queue carries no forced flag: the engine reads the pending value from the CR itself,
    # so a run that finds it already handled fetches with the cursor.
    assert ticket.forced_full is False


def test_the_status_write_recording_the_value_does_not_loop(settled, queue):
    settled.on_secret("MODIFIED", synced(value="v1"), False)
    queue.take_due()
    queue.forget(key())
    settled.on_secret("MODIFIED", synced(value="v1", handled="v1"), False)  # our status write
    assert queue.due_in(key()) is None


def test_the_same_value_again_does_nothing(settled, queue):
    """Seen once, then events carrying the same value (handled or not yet) are no news."""
    settled.on_secret("MODIFIED", synced(value="v1"), False)
    queue.take_due()
    queue.forget(key())
    pending_again = synced(value="v1", annotations={"team": "payments"})
    settled.on_secret("MODIFIED", pending_again, False)  # an unrelated annotation, still pending
    assert queue.due_in(key()) is None
    settled.on_secret("MODIFIED", synced(value="v1", handled="v1"), False)
    bumped = synced(value="v1", handled="v1", annotations={"team": "billing"})
    settled.on_secret("MODIFIED", bumped, False)  # re-applied after it was handled
    assert queue.due_in(key()) is None


def test_a_value_already_handled_is_not_a_request(settled, queue):
    settled.on_secret("MODIFIED", synced(value="v1", handled="v1"), False)
    assert queue.due_in(key()) is None


def test_a_different_value_is_a_new_request(settled, queue):
    settled.on_secret("MODIFIED", synced(value="v1"), False)
    queue.take_due()
    queue.forget(key())
    settled.on_secret("MODIFIED", synced(value="v2"), False)  # replaced before it was handled
    assert queue.due_in(key()) <= 0
    queue.take_due()
    queue.forget(key())
    settled.on_secret("MODIFIED", synced(value="v2", handled="v2"), False)
    settled.on_secret("MODIFIED", synced(value="v3", handled="v2"), False)  # after it was
    [ticket] = queue.take_due()
    assert ticket.priority is Priority.FIRST


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_value_is_no_request(settled, queue, value):
    settled.on_secret("MODIFIED", synced(value=value), False)
    assert queue.due_in(key()) is None


def test_an_unrelated_annotation_change_does_nothing(settled, queue):
    settled.on_secret("MODIFIED", synced(annotations={"owner": "team-a"}), False)
    assert queue.due_in(key()) is None


def test_a_pending_value_at_the_initial_list_goes_first_not_spread(router, queue, clock):
    """A restart or a leader change: a CR asked to resync while nobody watched (or before the
    leader died) is not healthy, so it runs now, ahead of the healthy ones."""
    for index in range(20):
        router.on_secret("ADDED", synced(f"h{index}", resync="1h"), True)
    router.on_secret("ADDED", synced("asked", value="v1", resync="1h"), True)
    assert queue.due_in(key("asked")) <= 0
    tickets = queue.take_due(limit=1)
    assert [(t.key.name, t.priority) for t in tickets] == [("asked", Priority.FIRST)]


def test_a_pending_value_overrides_a_due_time_the_store_kept(queue):
    """Scaled mode: the store outlives a leader, with the CR's resync due in minutes; the new
    leader's initial list sees the pending value and makes it due now."""
    EventRouter(queue, "hikyo-system", rng=random.Random(3)).on_secret(
        "ADDED", synced(resync="1h"), True
    )
    assert queue.due_in(key()) > 0
    fresh = EventRouter(queue, "hikyo-system")  # a new leader term
    fresh.on_secret("ADDED", synced(value="v1", resync="1h"), True)
    assert queue.due_in(key()) <= 0


def test_a_handled_value_at_the_initial_list_is_healthy(router, queue):
    router.on_secret("ADDED", synced(value="v1", handled="v1", resync="1h"), True)
    assert queue.due_in(key()) > 0  # spread, as any healthy CR


def test_a_value_missed_by_the_watch_is_caught_by_the_relist(settled, queue):
    """A watch gap (410, relist): the ADDED of a known CR with a new pending value runs it."""
    settled.on_secret("ADDED", synced(value="v1"), False)
    assert queue.due_in(key()) <= 0


def test_lifecycle_counts_follow_the_known_crs(router):
    assert router.lifecycle_counts() == {
        "Synced": 0,
        "Retained": 0,
        "Scrubbed": 0,
        "Refused": 0,
        "Unreconciled": 0,
    }
    router.on_secret("ADDED", cr("a"), True)  # no status yet
    router.on_secret("ADDED", cr("b", observed=1, lifecycle="Synced"), True)
    router.on_secret("ADDED", cr("c", observed=1, lifecycle="Synced"), True)
    router.on_secret("ADDED", cr("own", ns="hikyo-system", lifecycle="Synced"), True)  # S8.5
    assert router.lifecycle_counts()["Unreconciled"] == 1
    assert router.lifecycle_counts()["Synced"] == 2
    router.on_secret("MODIFIED", cr("a", observed=1, lifecycle="Refused"), False)
    router.on_secret("MODIFIED", cr("b", observed=1, lifecycle="Retained"), False)
    router.on_secret("DELETED", cr("c", observed=1, lifecycle="Synced"), False)
    assert router.lifecycle_counts() == {
        "Synced": 0,
        "Retained": 1,
        "Scrubbed": 0,
        "Refused": 1,
        "Unreconciled": 0,
    }
    router.on_secret("ADDED", cr("a", observed=1, lifecycle="Refused"), False)  # a relist
    assert sum(router.lifecycle_counts().values()) == 2


def test_a_cr_keeps_one_key_object_across_watch_events(router, queue):
    """Issue 13: a MODIFIED event (a new parse, new strings) reuses the key the router and the
    queue already hold, and the strings that repeat across CRs are shared."""
    router.on_secret("ADDED", cr("app", observed=1, lifecycle="Synced"), True)
    first = router.keys()[0]
    router.on_secret("MODIFIED", cr("app", observed=1, lifecycle="Synced"), False)
    router.on_secret("MODIFIED", cr("app", generation=2, observed=1, lifecycle="Synced"), False)
    assert router.keys()[0] is first and queue.due_in(first) is not None
    router.on_secret("ADDED", cr("web", observed=1, lifecycle="Synced"), True)
    app, web = sorted(router.keys())
    assert app.namespace is web.namespace
    assert router._crs[app.uid].lifecycle is router._crs[web.uid].lifecycle
    assert router._crs[app.uid].instance is router._crs[web.uid].instance
