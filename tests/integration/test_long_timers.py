"""The rules that take hours of real time, proven on a clock the test moves (issue 34 item 8):
the 5-minute backoff cap after repeated 401s (S4.1.3, S4.11), the aggregation of 30 minutes of
failure events (S5.5.1), the 1-hour pause after a refused report (S7.5) and the 24-hour cap
of the report heartbeat (S7.4).

The real runner and report task run against the real apiserver and the devserver; only the
keyed queues and the event sink read the fake clock, which is what times these rules.
"""

from __future__ import annotations

import random

import pytest

from devserver import Fault
from k8s.events import EventSink
from k8s.gateway import KubeCluster
from k8s.slim_api import CoreV1
from tests.support.clocks import FakeClock
from workers.engine.settings import OperatorSettings
from workers.keys import ObjectKey
from workers.queue.memory import MemoryQueue
from workers.reporting import run_report
from workers.runner import run_reconcile
from workers.runtime import Runtime

from .conftest import OPERATOR_NAMESPACE

REPORTING = ("read", "reveal", "report-delivery-status")
HOUR = 3600.0
CAP = 300.0  # S4.1.3: backoff doubles from 1 s to 5 min


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def runtime(api_client, crds, operator_namespace, clock) -> Runtime:
    events = EventSink(CoreV1(api_client), clock=clock)
    return Runtime(
        settings=OperatorSettings(operator_namespace=OPERATOR_NAMESPACE),
        cluster=KubeCluster(api_client, events=events),
        queue=MemoryQueue(clock=clock, rng=random.Random(7)),
        reports=MemoryQueue(clock=clock, rng=random.Random(8)),
    )


def _delivered(world, runtime, name="app", grants=REPORTING, **spec) -> ObjectKey:
    """A CR delivered by the runner, its first report not yet sent."""
    if name == "app":
        world.publish(DATABASE_URL="postgres://x", LOG_LEVEL="info")
        world.grant(grants)
        world.create_instance()
        world.create_credential()
        world.create_cr(**spec)
    else:
        world.create_cr(name, target={"name": f"{name}-env"}, **spec)
    key = ObjectKey(world.namespace, name, world.cr(name)["metadata"]["uid"])
    result = run_reconcile(runtime, key)
    assert result is not None and result.outcome.reason == "Delivered", result.outcome.message
    return key


def _due(queue: MemoryQueue) -> list[ObjectKey]:
    """As the leader's dispatcher does: the keys due now, handed out."""
    return [ticket.key for ticket in queue.take_due()]


def _reports(world) -> list[str]:
    """The names in the reports the devserver accepted for this test's namespace."""
    bodies = world.devserver.status_reports
    return [body["name"] for body in bodies if body["namespace"] == world.namespace]


def _failing_for(runtime: Runtime, clock: FakeClock, key: ObjectKey, seconds: float) -> list[float]:
    """Runs the CR whenever its backoff comes due, for ``seconds`` of the fake clock; returns
    the delay the queue set after each run. The last delay is not waited out."""
    delays: list[float] = []
    end = clock.now + seconds
    runtime.queue.add(key)
    while True:
        assert _due(runtime.queue) == [key]
        result = run_reconcile(runtime, key)
        assert result is not None and result.outcome.reason == "FetchFailed"
        delay = runtime.queue.due_in(key)
        assert delay is not None
        delays.append(delay)
        if clock.now + delay > end:
            return delays
        clock.advance(delay - 1)
        assert _due(runtime.queue) == []  # not a second early
        clock.advance(1)


def test_repeated_401s_back_off_to_the_five_minute_cap_and_a_success_resets_it(
    world, runtime, clock
):
    """S4.11, S4.1.3: every 401 keeps the Secret and backs off 1 s doubling, x [0.8, 1.2],
    clamped to [1 s, 5 min]; half an hour of 401s never waits longer than 5 min."""
    key = _delivered(world, runtime)
    secret = world.target()
    fetches = len(world.requests())
    world.devserver.set_fault(world.token, Fault.unauthorized())

    delays = _failing_for(runtime, clock, key, 30 * 60)

    assert len(world.requests()) - fetches == len(delays)  # each run fetched its 401
    for failures, delay in enumerate(delays, start=1):
        grown = 2.0 ** (failures - 1)
        assert max(min(0.8 * grown, CAP), 1.0) <= delay <= min(1.2 * grown, CAP), failures
    assert len(delays) >= 12 and delays[-3:] == [CAP] * 3  # the cap, however long it fails
    assert world.target().data == secret.data
    assert runtime.queue.failures(key) == len(delays)

    world.devserver.clear_fault(world.token)
    clock.advance(delays[-1])
    assert _due(runtime.queue) == [key]
    recovered = run_reconcile(runtime, key)
    assert recovered is not None and recovered.outcome.reason in ("Current", "Delivered")
    assert runtime.queue.failures(key) == 0  # a resync outcome resets the count
    assert 0.9 * CAP <= runtime.queue.due_in(key) <= 1.1 * CAP  # resyncInterval 5m, jittered


def test_thirty_minutes_of_failures_make_at_most_three_events_whose_counts_add_up(
    world, runtime, clock
):
    """S5.5.1: an equal event within 10 min is a PATCH (count + 1), not a new object."""
    key = _delivered(world, runtime)
    world.devserver.set_fault(world.token, Fault.unauthorized())

    runs = len(_failing_for(runtime, clock, key, 30 * 60))

    listed = world.core.list_namespaced_event(
        world.namespace, field_selector=f"involvedObject.uid={key.uid}"
    ).items
    failures = [event for event in listed if event.reason == "FetchFailed"]
    assert 1 <= len(failures) <= 3
    assert sum(event.count for event in failures) == runs
    assert {event.type for event in failures} == {"Warning"}


def test_a_refused_report_pauses_the_cr_for_one_hour_then_reports_resume(world, runtime, clock):
    """S7.5: a 404 (the report grant missing) pauses the CR's reports for 1 h; once the hour
    has passed, the next report goes and is accepted."""
    key = _delivered(world, runtime, grants=("read", "reveal"))
    assert _due(runtime.reports) == [key]
    refused = run_report(runtime, key)
    assert refused is not None and refused.http_status == 404
    world.devserver.set_grants(world.token, REPORTING)  # granted now: the pause still holds

    clock.advance(HOUR - 1)
    assert _due(runtime.reports) == []
    assert _reports(world) == []

    clock.advance(1)
    assert _due(runtime.reports) == [key]
    accepted = run_report(runtime, key)
    assert accepted is not None and accepted.http_status == 204
    assert _reports(world) == ["app"]


def test_the_heartbeat_of_a_cr_resyncing_every_two_days_comes_after_24_hours(world, runtime, clock):
    """S7.4: P = min(max(resyncInterval, 5 min), 24 h): a 48 h resync reports every 24 h."""
    key = _delivered(world, runtime, resyncInterval="48h")
    assert _due(runtime.reports) == [key]
    first = run_report(runtime, key)
    assert first is not None and first.http_status == 204

    # Another CR of the instance fetches at 12 h, which keeps the instance's capability set
    # (S7.2, 24 h after the latest valid 200); its own report goes then.
    clock.advance(12 * HOUR)
    other = _delivered(world, runtime, "other", resyncInterval="48h")
    assert _due(runtime.reports) == [other]
    assert run_report(runtime, other).http_status == 204  # type: ignore[union-attr]

    clock.advance(12 * HOUR - 1)
    assert _due(runtime.reports) == []
    clock.advance(1)
    assert _due(runtime.reports) == [key]
    heartbeat = run_report(runtime, key)
    assert heartbeat is not None and heartbeat.http_status == 204
    assert _reports(world) == ["app", "other", "app"]
    assert runtime.reports.due_in(key) == 24 * HOUR
