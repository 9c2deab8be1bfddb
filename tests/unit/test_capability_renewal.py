"""S7.2 rev 4: the capability note lives 25 h and a 204 to a report renews it like a valid 200,
so a CR alone on its instance with a 48 h resync (fetching every 48 h, reporting every 24 h)
still finds reporting offered at every heartbeat. Injected clocks, the real report attempt."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.support.clocks import FakeClock
from tests.unit.decide_fixtures import (
    INSTANCE_UID,
    SETTINGS,
    cr,
    credential_secret,
    instance,
)
from workers import reporting
from workers.engine.fetched import ReportResult
from workers.engine.reports import (
    CAPABILITY_TTL,
    capabilities_note,
    heartbeat_period,
    reporting_offered,
)
from workers.keys import ObjectKey
from workers.queue.memory import MemoryQueue
from workers.reporting import CLUSTER_ID_NOTE, _attempt
from workers.runtime import Runtime

HOUR = 3600.0
STATUS = {
    "lifecycle": "Synced",
    "observedGeneration": 1,
    "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled", "message": ""}],
}


class Cluster:
    def __init__(self, the_cr: dict[str, Any]) -> None:
        self.cr = the_cr

    def get_hikyosecret(self, namespace: str, name: str) -> dict[str, Any]:
        return self.cr

    def get_instance(self, name: str) -> dict[str, Any]:
        return instance()

    def get_secret(self, namespace: str, name: str):
        return credential_secret()


class AcceptingClient:
    def __init__(self) -> None:
        self.reports = 0

    def report_status(self, scope, *, token: str, report: dict[str, Any]) -> ReportResult:
        self.reports += 1
        return ReportResult(204, "")


def test_a_cr_alone_with_a_48_hour_resync_keeps_reporting(monkeypatch):
    clock = FakeClock(1000.0)
    monkeypatch.setattr(reporting, "_renewed_at", {})
    monkeypatch.setattr(reporting, "_monotonic", clock)
    the_cr = cr(status=STATUS, spec={"resyncInterval": "48h"})
    client = AcceptingClient()
    store = MemoryQueue(clock=clock)
    store.put_note(CLUSTER_ID_NOTE, "2f0c4bd6-0b7e-4d7e-9f55-3a1b1c7e9d10", 1000 * HOUR)
    runtime = Runtime(
        settings=replace(SETTINGS, fetch_qps=100.0, fetch_burst=100),
        cluster=Cluster(the_cr),  # type: ignore[arg-type]
        queue=store,
        clients=lambda _instance: client,  # type: ignore[arg-type]
    )
    key = ObjectKey(the_cr["metadata"]["namespace"], the_cr["metadata"]["name"], "uid-m")
    assert heartbeat_period(48 * HOUR) == 24 * HOUR

    store.put_note(capabilities_note(INSTANCE_UID), "status-report", CAPABILITY_TTL)  # the fetch
    for day in (1, 2, 3):  # no fetch in between: the resync is 48 h, only heartbeats
        clock.advance(24 * HOUR)
        assert reporting_offered(store.get_note(capabilities_note(INSTANCE_UID))), day
        attempt, _ = _attempt(runtime, key)
        assert attempt is not None and attempt.http_status == 204, day
    assert client.reports == 3


def test_without_a_204_the_note_ends_25_hours_after_the_fetch():
    clock = FakeClock(1000.0)
    store = MemoryQueue(clock=clock)
    store.put_note(capabilities_note(INSTANCE_UID), "status-report", CAPABILITY_TTL)
    clock.advance(24 * HOUR)
    assert reporting_offered(store.get_note(capabilities_note(INSTANCE_UID)))  # the heartbeat
    clock.advance(1 * HOUR)
    assert store.get_note(capabilities_note(INSTANCE_UID)) is None
