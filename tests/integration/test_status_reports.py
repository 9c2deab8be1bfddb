"""Status reports to the devserver (S7): the closed body, capability gating, the verdicts, and
what the observation store keeps (time, HTTP status, conditions sent)."""

from __future__ import annotations

import pytest
from kubernetes import client

from controlplane.observations.models import StatusReport
from controlplane.observations.recording import record_report
from k8s.gateway import KubeCluster
from tests.support.clocks import FakeClock
from workers.engine.settings import OperatorSettings
from workers.keys import ObjectKey
from workers.queue.memory import MemoryQueue
from workers.reporting import run_report
from workers.runner import run_reconcile
from workers.runtime import Runtime

from .conftest import OPERATOR_NAMESPACE

REPORTING = ("read", "reveal", "report-delivery-status")


@pytest.fixture
def runtime(api_client, crds, operator_namespace):
    attempts = []
    built = Runtime(
        settings=OperatorSettings(operator_namespace=OPERATOR_NAMESPACE),
        cluster=KubeCluster(api_client),
        queue=MemoryQueue(),
        reports=MemoryQueue(),
        record_report=attempts.append,
    )
    built.attempts = attempts
    return built


def _key(world) -> ObjectKey:
    return ObjectKey(world.namespace, "app", world.cr()["metadata"]["uid"])


def _deliver(world, runtime, grants=REPORTING) -> ObjectKey:
    world.publish(DATABASE_URL="postgres://x", LOG_LEVEL="info")
    world.grant(grants)
    world.create_instance()
    world.create_credential()
    world.create_cr()
    key = _key(world)
    result = run_reconcile(runtime, key)
    assert result is not None and result.outcome.reason == "Delivered"
    world.devserver.clear_status_reports()
    return key


def _report(runtime, key):
    """As the leader's report dispatcher does: take the due key, then run the attempt."""
    assert key in [ticket.key for ticket in runtime.reports.take_due()]
    return run_report(runtime, key)


def test_a_status_write_is_reported_with_the_closed_body(world, runtime, api_client):
    key = _deliver(world, runtime)
    assert runtime.reports.due_in(key) <= 0  # S7.4: after every successful status write

    attempt = _report(runtime, key)

    assert attempt is not None and attempt.http_status == 204
    (body,) = world.devserver.status_reports
    cr = world.cr()
    kube_system = client.CoreV1Api(api_client).read_namespace("kube-system").metadata.uid
    assert body == {
        "cluster_id": kube_system,
        "namespace": world.namespace,
        "name": "app",
        "uid": cr["metadata"]["uid"],
        "target": "app-env",
        "generation": cr["metadata"]["generation"],
        "observed_generation": cr["status"]["observedGeneration"],
        "lifecycle": "Synced",
        "conditions": [
            {"type": c["type"], "status": c["status"], "reason": c["reason"]}
            for c in cr["status"]["conditions"]
        ],
    }
    # S7.4 rev 4: the heartbeat is due P = max(5 min, resync) later; the report queue sends it
    # alone one resync after that (jitter's high end) unless a run carries it first.
    assert 270 + 330 <= runtime.reports.due_in(key) <= 300 + 330
    assert runtime.attempts == [attempt]


def test_no_report_to_a_server_without_the_capability(world, runtime):
    world.devserver.set_capabilities(None)
    try:
        key = _deliver(world, runtime)
        assert _report(runtime, key) is None
    finally:
        world.devserver.set_capabilities(["status-report"])
    assert world.devserver.status_reports == []
    assert not [r for r in world.requests() if r.path.endswith("/status")]


def test_a_refused_report_pauses_that_cr_for_an_hour(world, runtime):
    """S7.5: without the report grant the server answers the uniform 404: pause 1 h."""
    key = _deliver(world, runtime, grants=("read", "reveal"))
    first = _report(runtime, key)
    assert first is not None and first.http_status == 404
    assert runtime.reports.due_in(key) > 3500
    reports_sent = len([r for r in world.requests() if r.path.endswith("/status")])
    runtime.reports.add(key)  # another status write while paused
    assert _report(runtime, key) is None
    assert len([r for r in world.requests() if r.path.endswith("/status")]) == reports_sent


def test_server_errors_drop_the_report_until_the_next_heartbeat(world, runtime):
    from devserver import Fault

    key = _deliver(world, runtime)
    world.devserver.set_fault(world.token, Fault.status(503), route="status")
    attempt = _report(runtime, key)
    assert attempt is not None and attempt.http_status == 503
    assert "dropped" in attempt.outcome
    assert 270 <= runtime.reports.due_in(key) <= 300


def test_reporting_off_sends_nothing(world, runtime):
    runtime.settings = OperatorSettings(
        operator_namespace=OPERATOR_NAMESPACE, status_reporting=False
    )
    key = _deliver(world, runtime)
    assert runtime.reports.due_in(key) is None


def test_the_observation_store_keeps_status_and_conditions_only(world, runtime):
    key = _deliver(world, runtime)
    attempt = _report(runtime, key)
    record_report(attempt)
    row = StatusReport.objects.get(uid=key.uid)
    assert (row.http_status, row.outcome) == (204, "accepted")
    assert {c["type"] for c in row.conditions} == {"Ready", "Synced"}
    assert all(set(c) == {"type", "status", "reason"} for c in row.conditions)


def test_a_report_waits_for_the_probe_gate_of_an_instance_that_stopped_answering(world, runtime):
    """A report to a hanging instance would hold a worker slot like a fetch: while another
    request probes the instance, the report is deferred without a request."""
    from workers.engine.pacing import note_answer, requester

    key = _deliver(world, runtime)
    instance_uid = runtime.cluster.get_instance(world.instance)["metadata"]["uid"]
    # Fetches for two credentials timed out with no answer in between (S4.1.9): judged.
    note_answer(runtime.queue, instance_uid, "timeout", requester("org", "ns/alice"))
    note_answer(runtime.queue, instance_uid, "timeout", requester("org", "ns/bob"))
    assert _report(runtime, key) is None
    assert world.devserver.status_reports == []
    assert runtime.reports.due_in(key) > 0  # deferred to the next probe, not dropped

    note_answer(runtime.queue, instance_uid, None, requester("org", "ns/bob"))  # answered
    runtime.reports.add(key)  # the next status write asks again
    attempt = _report(runtime, key)
    assert attempt is not None and attempt.http_status == 204


class _Counting:
    """The real gateway, counting the reads S7.1 lets a report skip, and the instance's read
    (a report on its reconcile's reads takes that reconcile's instance, issue 37)."""

    def __init__(self, cluster: KubeCluster) -> None:
        self._cluster, self.reads = cluster, []

    def __getattr__(self, name):
        attribute = getattr(self._cluster, name)
        if name not in ("get_hikyosecret", "get_instance", "get_secret", "get_service_account"):
            return attribute

        def counted(*args, **kwargs):
            self.reads.append(name)
            return attribute(*args, **kwargs)

        return counted


def test_a_report_after_its_reconcile_reuses_the_cr_and_credential_reads(world, runtime):
    """S7.1 rev 3: same process, within 30 s: no second read of the CR or the credential, and
    the body still describes the status the reconcile wrote."""
    counting = _Counting(runtime.cluster)
    runtime.cluster = counting
    key = _deliver(world, runtime)
    counting.reads.clear()

    attempt = _report(runtime, key)

    assert attempt is not None and attempt.http_status == 204
    assert counting.reads == []
    (body,) = world.devserver.status_reports
    assert body["observed_generation"] == world.cr()["status"]["observedGeneration"]
    assert body["lifecycle"] == "Synced"

    runtime.reports.add(key)  # a second report has no reconcile of its own to follow
    counting.reads.clear()
    assert _report(runtime, key) is not None
    assert counting.reads == ["get_hikyosecret", "get_instance", "get_secret"]


def test_a_due_heartbeat_goes_with_an_unchanged_run_s_reads_and_never_before(world, runtime):
    """S7.4 rev 4 with S7.1 rev 3: an unchanged resync writes nothing (S4.17) but keeps its
    reads; a heartbeat that is due goes with them at once, reading nothing, and one that is not
    due yet stays where it is, however soon it will be."""
    clock = FakeClock()
    runtime.reports = MemoryQueue(clock)
    key = _deliver(world, runtime)
    assert _report(runtime, key) is not None  # the delivery's report
    result = run_reconcile(runtime, key)  # the first resync records Synced=Current (S4.17)
    assert result is not None and result.status_written
    assert _report(runtime, key) is not None
    counting = _Counting(runtime.cluster)
    runtime.cluster = counting

    early = run_reconcile(runtime, key)  # P is not over: the heartbeat stays
    assert early is not None and early.outcome.reason == "Current" and not early.status_written
    assert runtime.reports.take_due() == []
    clock.advance(300.0)  # P = 5 min after the last 204
    unchanged = run_reconcile(runtime, key)
    assert unchanged is not None and not unchanged.status_written
    counting.reads.clear()
    attempt = _report(runtime, key)  # due now: _report asserts the dispatcher takes it
    assert attempt is not None and attempt.http_status == 204
    assert counting.reads == []
