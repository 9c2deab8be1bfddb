"""Issue 35 item 5: client-go's work-duration and stuck-work gauges, controller-runtime's panics
and max concurrency, and the HikyoSecrets by readiness (ready, or not by first blocker), read
back from a fresh CollectorRegistry; labels stay bounded and value-free."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.unit.test_metrics import CANARY, Clock, fresh, registry, run_result, value
from tests.unit.test_runner import KEY, Harness, _raising
from workers import metrics
from workers.leader.sources import EventRouter, readiness_of
from workers.metrics import Metrics, OperatorCollector
from workers.queue.memory import MemoryQueue

__all__ = ["fresh", "registry"]  # fixtures, used by name

CTRL = {"controller": "hikyosecret"}
QUEUE = {"name": "hikyosecret"}


def test_a_bug_counts_as_a_panic_and_every_run_as_work(monkeypatch, fresh):
    h = Harness(monkeypatch)
    h.fake(lambda engine: run_result(uid=KEY.uid))
    h.run()
    h.fake(_raising(ConnectionError("the apiserver went away")))  # expected: no panic
    h.run()
    h.fake(_raising(RuntimeError("a bug")))
    h.run()
    assert value(fresh, "controller_runtime_reconcile_panics_total", **CTRL) == 1
    assert value(fresh, "controller_runtime_reconcile_errors_total", **CTRL) == 2
    assert value(fresh, "workqueue_work_duration_seconds_count", **QUEUE) == 3


def test_the_in_flight_gauges_grow_with_a_running_reconcile(monkeypatch, fresh):
    clock = Clock()
    metrics.current().in_flight.clock = clock
    seen: dict[str, float] = {}

    def long_run(engine: Any):
        clock.now += 42.0
        metrics.current().in_flight.refresh()  # what the daemon thread does every second
        seen["unfinished"] = value(fresh, "workqueue_unfinished_work_seconds", **QUEUE)
        seen["longest"] = value(fresh, "workqueue_longest_running_processor_seconds", **QUEUE)
        return run_result(uid=KEY.uid)

    h = Harness(monkeypatch)
    h.fake(long_run)
    h.run()
    assert seen == {"unfinished": 42.0, "longest": 42.0}
    assert value(fresh, "workqueue_unfinished_work_seconds", **QUEUE) == 0  # it ended
    assert value(fresh, "workqueue_longest_running_processor_seconds", **QUEUE) == 0


def test_unfinished_work_sums_the_runs_and_longest_takes_the_oldest():
    registry = CollectorRegistry()
    in_flight = Metrics(registry).in_flight
    clock = Clock()
    in_flight.clock = clock
    first = in_flight.begin()
    clock.now += 5.0
    second = in_flight.begin()
    clock.now += 10.0
    in_flight.refresh()
    assert value(registry, "workqueue_unfinished_work_seconds", **QUEUE) == 25.0  # 15 + 10
    assert value(registry, "workqueue_longest_running_processor_seconds", **QUEUE) == 15.0
    in_flight.end(first)
    assert value(registry, "workqueue_longest_running_processor_seconds", **QUEUE) == 10.0
    in_flight.end(second)
    assert value(registry, "workqueue_unfinished_work_seconds", **QUEUE) == 0.0


def test_max_concurrent_reconciles_is_the_pool_size(fresh):
    metrics.set_max_concurrent_reconciles(4)
    assert value(fresh, "controller_runtime_max_concurrent_reconciles", **CTRL) == 4


def _cr(uid: str, conditions: list[dict[str, str]], lifecycle: str | None = None) -> dict:
    status: dict[str, Any] = {"conditions": conditions}
    if lifecycle:
        status["lifecycle"] = lifecycle
    return {
        "metadata": {"namespace": "team", "name": uid, "uid": uid, "generation": 1},
        "spec": {"instanceRef": {"name": "primary"}},
        "status": status,
    }


def _condition(type_: str, status: str, reason: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": f"{CANARY} text"}


READY = _condition("Ready", "True", "Reconciled")
BLOCKED = _condition("Ready", "False", "Blocked")


@pytest.mark.parametrize(
    ("conditions", "lifecycle", "blocker"),
    [
        ([READY, _condition("Synced", "True", "Delivered")], "Synced", ""),
        ([BLOCKED, _condition("Synced", "False", "FetchFailed")], "Retained", "Synced/FetchFailed"),
        (
            [BLOCKED, _condition("Designation", "False", "SecretNotDesignated")],
            "Refused",
            "Designation/SecretNotDesignated",
        ),
        (
            [BLOCKED, _condition("Unreconciled", "True", "NamespaceNotBound")],
            "Unreconciled",
            "Unreconciled/NamespaceNotBound",
        ),
        ([], None, "Synced/absent"),  # never reconciled
        ([BLOCKED, _condition("Synced", "True", "Current")], "Retained", "Lifecycle/Retained"),
    ],
)
def test_readiness_of_names_the_first_blocker(conditions, lifecycle, blocker):
    assert readiness_of(_cr("a", conditions, lifecycle)) == blocker


def _leader_registry(router: EventRouter, **counts: Any) -> CollectorRegistry:
    """A registry with the leader's scrape-time collector over ``router``'s counts."""
    registry = CollectorRegistry()
    registry.register(
        OperatorCollector(
            leader=lambda: True, queues=dict, lifecycles=router.lifecycle_counts, **counts
        )
    )
    return registry


def test_the_leader_serves_hikyosecrets_by_readiness(fresh):
    router = EventRouter(MemoryQueue(), "hikyo-system")
    fetch_failed = [BLOCKED, _condition("Synced", "False", "FetchFailed")]
    router.on_secret("ADDED", _cr("a", [READY], "Synced"), True)
    router.on_secret("ADDED", _cr("b", fetch_failed, "Retained"), True)
    router.on_secret("ADDED", _cr("c", fetch_failed, "Retained"), True)
    router.on_secret("MODIFIED", _cr("c", [READY], "Synced"), False)  # c recovered
    router.on_secret("ADDED", _cr("d", [], None), True)
    router.on_secret("DELETED", _cr("d", [], None), False)
    registry = _leader_registry(
        router, readiness=lambda: {**router.readiness_counts(), f"{CANARY} free text": 1}
    )
    ready = "hikyo_operator_secrets_ready"
    assert value(registry, ready, ready="true", blocker="none") == 2
    assert value(registry, ready, ready="false", blocker="Synced/FetchFailed") == 1
    assert value(registry, ready, ready="false", blocker="Other") == 1  # free text: bucketed
    assert registry.get_sample_value(ready, {"ready": "false", "blocker": "Synced/absent"}) in (
        None,
        0.0,
    )
    assert CANARY not in generate_latest(registry).decode()


def test_the_leader_serves_hikyosecrets_whose_credential_expires(fresh):
    router = EventRouter(MemoryQueue(), "hikyo-system")
    soon = [READY, _condition("CredentialExpiry", "True", "ExpiresSoon")]
    router.on_secret("ADDED", _cr("a", soon, "Synced"), True)
    router.on_secret("ADDED", _cr("b", soon, "Synced"), True)
    router.on_secret("ADDED", _cr("c", [READY], "Synced"), True)
    expired = [BLOCKED, _condition("CredentialExpiry", "True", "Expired")]
    router.on_secret("MODIFIED", _cr("b", expired, "Retained"), False)
    registry = _leader_registry(router, credential_expiry=router.credential_expiry_counts)
    expiry = "hikyo_operator_credential_expiry"
    assert value(registry, expiry, reason="ExpiresSoon") == 1
    assert value(registry, expiry, reason="Expired") == 1
