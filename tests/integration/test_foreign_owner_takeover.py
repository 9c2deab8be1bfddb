"""S4.1.7 with two real operators (distinct operator namespaces, so distinct Leases and stamp
roots, both watching the same namespace): B stands off a CR while A's Lease is live, and takes
it over once A has stopped, re-marking ``status.operatorNamespace`` and delivering again."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.operator_harness import Operator, populate
from tests.support.waiting import wait_for
from tests.support.world import World, canary

RESYNC_SECONDS = 10
RESYNC = f"{RESYNC_SECONDS}s"  # a stopped owner's Lease goes stale 30 s after its last renewal


def _operator(tmp: Path, kubeconfig: Path, home: str, watched: str) -> Operator:
    operator = Operator(tmp, kubeconfig, None)
    operator.env["HIKYO_OPERATOR_NAMESPACE"] = home  # its own Lease and stamp root
    operator.env["HIKYO_OPERATOR_NAMESPACES"] = watched  # leave the rest of the cluster alone
    return operator


def _ready_and_owned_by(world: World, home: str) -> dict | None:
    cr = world.cr("app-0")
    status = cr.get("status") or {}
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
    )
    owned = status.get("operatorNamespace") == home
    current = status.get("observedGeneration") == cr["metadata"]["generation"]
    return status if ready and owned and current else None


def _last_write(obj: dict, subresource: str = "") -> datetime:
    """When the operator's field manager last changed ``obj`` (or its status subresource), by
    the apiserver's own record: managedFields' time, in whole seconds."""
    times = [
        datetime.fromisoformat(entry["time"])
        for entry in obj["metadata"].get("managedFields") or []
        if entry.get("manager") == "hikyo-operator" and entry.get("subresource", "") == subresource
    ]
    assert times, f"no write by hikyo-operator to {subresource or 'the object'}"
    return max(times)


def _lease_renewed(core_api: client.ApiClient, home: str) -> datetime:
    lease = client.CoordinationV1Api(core_api).read_namespaced_lease(
        "hikyo-operator.hikyo.dev", home
    )
    return lease.spec.renew_time


def _delivered(world: World, value: str) -> bool:
    secret = world.core.read_namespaced_secret("app-env-0", world.namespace)
    return base64.b64decode((secret.data or {}).get("log-level", "")).decode() == value


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "stop",
    [
        pytest.param("released", id="owner-stopped-cleanly-lease-released"),
        pytest.param("killed", id="owner-killed-lease-ages-past-3x-resync"),
    ],
)
def test_a_second_operator_takes_the_cr_over_once_the_owner_stops(
    world, kubeconfig, tmp_path, stop
):
    core = client.CoreV1Api(world.api_client)
    suffix = uuid.uuid4().hex[:8]
    home_a, home_b = f"op-a-{suffix}", f"op-b-{suffix}"
    for home in (home_a, home_b):
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=home)))
    populate(world, 1, resyncInterval=RESYNC)
    a = _operator(tmp_path / "a", kubeconfig, home_a, world.namespace)
    b = _operator(tmp_path / "b", kubeconfig, home_b, world.namespace)
    try:
        first = a.start_leader("operator-a")
        wait_for(lambda: _ready_and_owned_by(world, home_a), timeout=120, what="A delivers")
        second = b.start_leader("operator-b")
        standing_off = f"belongs to the live operator in namespace {home_a}"
        wait_for(lambda: standing_off in second.log(), timeout=60, what="B stands off")
        assert world.status("app-0")["operatorNamespace"] == home_a  # B wrote nothing

        if stop == "released":
            first.stop()  # SIGTERM: A hands its Lease back (holderIdentity "")
        else:
            first.kill()  # SIGKILL: A's Lease keeps its holder and just stops being renewed
        last_renewal = _lease_renewed(world.api_client, home_a)
        changed = canary("value")
        world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=changed)  # only B is left to see it

        wait_for(
            lambda: _ready_and_owned_by(world, home_b) if _delivered(world, changed) else None,
            timeout=180,
            interval=0.5,
            what="B takes the CR over and delivers the new value",
        )
        # S4.1.7 rev 3: B's first write (the only one that delivers the new value, with the
        # status that records it) comes 3 x resyncInterval after A's last renewal, whether A
        # released its Lease or not (whole seconds: the apiserver's managedFields resolution).
        stale_at = last_renewal + timedelta(seconds=3 * RESYNC_SECONDS - 1)
        secret = world.api_client.sanitize_for_serialization(
            core.read_namespaced_secret("app-env-0", world.namespace)
        )
        assert _last_write(secret) >= stale_at
        assert _last_write(world.cr("app-0"), "status") >= stale_at
    finally:
        b.stop()
        a.stop()
        for home in (home_a, home_b):
            core.delete_namespace(home)
    log = second.log()
    assert "stamp root missing" not in log  # S6.3: A's stamps are not B's to protect
    assert "Traceback" not in log
