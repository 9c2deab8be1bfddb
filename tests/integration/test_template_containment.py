"""S11.2 Containment on a running operator (embedded mode, a real apiserver, the devserver):
while one namespace's template holds a CPU in a big-integer division, another namespace's
HikyoSecret delivers a changed value, /healthz answers every probe, the Lease never changes
hands, and the hostile CR ends InvalidTemplate "exceeds its CPU budget" (or, on a host too busy
to give it the CPU, "exceeds its time budget") without a traceback."""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.hostile_templates import CONTAINED
from tests.support.operator_harness import Operator
from tests.support.waiting import wait_for
from tests.support.world import World, canary
from workers.engine.ports import LEASE_NAME
from workers.engine.template_bounds import OVER_CPU, OVER_TIME

from .conftest import OPERATOR_NAMESPACE

BIG_DIVISION, _ = CONTAINED["big-division"]
# The kernel's CPU limit stops it; on a host too busy to give it 2 s of CPU in 5 s, the wall
# budget does first. Either way it is contained.
STOPPED = (
    f"the template of data key boom is invalid: {OVER_CPU}",
    f"the template of data key boom is invalid: {OVER_TIME}",
)
PROBE_TIMEOUT_SECONDS = 3.0  # the readiness/liveness probes' own timeout in the chart


class _HealthProbes(threading.Thread):
    """/healthz every 0.25 s, as a kubelet would: each failure kept as one line."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/healthz"
        self.answered, self.failures = 0, []  # type: ignore[var-annotated]
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            try:
                with urllib.request.urlopen(self.url, timeout=PROBE_TIMEOUT_SECONDS) as answer:
                    answer.read()
                self.answered += 1
            except OSError as error:
                self.failures.append(f"{time.strftime('%X')} {type(error).__name__}: {error}")


@pytest.fixture
def second_namespace(api_client) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def _lease(api_client) -> client.V1Lease:
    return client.CoordinationV1Api(api_client).read_namespaced_lease(
        LEASE_NAME, OPERATOR_NAMESPACE
    )


def _holder(api_client) -> str | None:
    """The Lease's holder; None until the leader has created it."""
    try:
        return _lease(api_client).spec.holder_identity
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def _delivery(world: World) -> str:
    conditions = world.status().get("conditions") or []
    return next((c["message"] for c in conditions if c["type"] == "Delivery"), "")


def _holds(world: World, name: str, value: str) -> bool:
    secret = world.target(name)
    return secret is not None and secret.data.get("DATABASE_URL") == value.encode()


@pytest.mark.timeout(300)
def test_a_cpu_hog_template_in_one_namespace_costs_another_namespace_nothing(
    world, kubeconfig, api_client, tmp_path, second_namespace
):
    values = world.prepare(
        target={"name": "hog-env", "template": {"data": {"boom": BIG_DIVISION}}},
        resyncInterval="10s",
    )
    other = dataclasses.replace(world, namespace=second_namespace, results=[])
    other.create_credential()
    other.create_cr("other", target={"name": "other-env"}, resyncInterval="10s")
    operator = Operator(tmp_path, kubeconfig, None)
    probes = _HealthProbes(operator.http_port)
    try:
        operator.start_leader()
        probes.start()
        first = wait_for(lambda: _holder(api_client), what="a leader")
        wait_for(lambda: _holds(other, "other-env", values["DATABASE_URL"]), timeout=120)
        wait_for(lambda: _delivery(world) in STOPPED, timeout=120, what="the hog refused")
        changed = canary("value")
        world.publish(DATABASE_URL=changed, LOG_LEVEL=values["LOG_LEVEL"])
        wait_for(lambda: _holds(other, "other-env", changed), timeout=120, what="the new value")
        lease = _lease(api_client)
    finally:
        probes.stop.set()
        probes.join()
        operator.stop()
    assert probes.failures == [] and probes.answered > 10, probes.failures
    assert lease.spec.holder_identity == first  # never lost, never taken over
    assert world.conditions()["Delivery"] == ("False", "InvalidTemplate")
    assert world.message("Delivery") in STOPPED
    assert world.target("hog-env") is None
    assert "Traceback" not in operator.logs()
