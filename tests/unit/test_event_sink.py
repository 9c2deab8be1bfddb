"""k8s/events.py, the S5.5.1 aggregation, over a recording stand-in for the core/v1 calls: an
equal event within 10 minutes is a PATCH (count + 1), at most one create per CR and reason per
minute, and the records of both expire, so they do not grow with every CR ever seen."""

from __future__ import annotations

from typing import Any

from k8s.events import CREATE_INTERVAL_SECONDS, SERIES_WINDOW_SECONDS, EventSink, LocalRecords
from workers.engine.ports import Event
from workers.queue.memory import MemoryQueue


class RecordingCore:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def create_namespaced_event(self, namespace: str, body: Any) -> None:
        self.calls.append(("create", namespace, body.metadata.name))

    def patch_namespaced_event(self, name: str, namespace: str, body: Any) -> None:
        self.calls.append(("patch", name, body["count"]))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _cr(uid: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "namespace": "team", "name": f"app-{uid}"}}


DELIVERED = Event("Normal", "Delivered", "delivered 3 keys")


def test_an_equal_event_within_the_window_is_counted_on_the_first():
    core, clock = RecordingCore(), Clock()
    sink = EventSink(core, clock=clock)  # type: ignore[arg-type]
    sink.emit(_cr("a"), DELIVERED)
    clock.now += 30
    sink.emit(_cr("a"), DELIVERED)
    (_, _, name), second = core.calls
    assert second == ("patch", name, 2)


def test_a_different_message_within_a_minute_is_not_created():
    core, clock = RecordingCore(), Clock()
    sink = EventSink(core, clock=clock)  # type: ignore[arg-type]
    sink.emit(_cr("a"), DELIVERED)
    clock.now += CREATE_INTERVAL_SECONDS / 2
    sink.emit(_cr("a"), Event("Normal", "Delivered", "delivered 4 keys"))
    assert [call[0] for call in core.calls] == ["create"]


def test_expired_records_are_forgotten_and_the_next_event_is_created_anew():
    core, clock = RecordingCore(), Clock()
    records = LocalRecords(clock)
    sink = EventSink(core, records=records)  # type: ignore[arg-type]
    for n in range(100):
        sink.emit(_cr(f"uid-{n}"), DELIVERED)
    assert len(records) == 200  # a series and a create limit per CR
    clock.now += SERIES_WINDOW_SECONDS + 1
    sink.emit(_cr("uid-0"), DELIVERED)
    assert len(records) == 2  # the others are gone
    assert core.calls[-1][0] == "create"  # outside the window: a new event, not a patch


def test_workers_sharing_the_store_aggregate_together():
    """S5.5.1 in scaled mode: two workers (two sinks) over one keyed-queue store count one
    series, and a third started later (a restarted worker) still patches it."""
    core, clock = RecordingCore(), Clock()
    store = MemoryQueue(clock=clock)
    first, second = (EventSink(core, records=store) for _ in range(2))  # type: ignore[arg-type]
    first.emit(_cr("a"), DELIVERED)
    clock.now += 10
    second.emit(_cr("a"), DELIVERED)
    clock.now += 10
    EventSink(core, records=store).emit(_cr("a"), DELIVERED)  # type: ignore[arg-type]
    (_, _, name), *patches = core.calls
    assert patches == [("patch", name, 2), ("patch", name, 3)]
    second.emit(_cr("a"), Event("Warning", "Delivered", "another message"))
    assert len(core.calls) == 3  # the create limit is shared too
