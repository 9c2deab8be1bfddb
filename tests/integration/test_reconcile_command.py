"""`manage.py reconcile NAMESPACE/NAME` runs one reconcile, prints it, and records it."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from kubernetes import client

from controlplane.observations.models import ConditionChange, EventRecord, ReconcileRun
from workers.engine.outcome import Requeue
from workers.engine.ports import LEASE_NAME
from workers.engine.settings import OperatorSettings
from workers.keys import ObjectKey
from workers.runtime import build_queue


@pytest.fixture
def operator_settings(world, kubeconfig):
    settings = OperatorSettings(operator_namespace="hikyo-system")
    with override_settings(HIKYO_OPERATOR=settings, KUBECONFIG=str(kubeconfig)):
        yield settings


def test_reconcile_command_delivers_and_records(world, operator_settings):
    world.publish(DATABASE_URL="postgres://x", LOG_LEVEL="info")
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr()
    out = StringIO()
    call_command("reconcile", f"{world.namespace}/app", stdout=out)
    text = out.getvalue()
    assert text.startswith(f"{world.namespace}/app: Delivered")
    assert "Ready=True Reconciled" in text
    assert world.target() is not None

    run = ReconcileRun.objects.get(namespace=world.namespace, name="app")
    assert (run.reason, run.fetched, run.wrote_secret, run.status_written) == (
        "Delivered",
        True,
        True,
        True,
    )
    assert set(ConditionChange.objects.filter(name="app").values_list("type", flat=True)) == {
        "Ready",
        "Synced",
    }
    assert EventRecord.objects.filter(namespace=world.namespace, reason="Delivered").exists()

    again = StringIO()
    call_command("reconcile", f"{world.namespace}/app", stdout=again)
    assert ": Current" in again.getvalue()


def test_reconcile_command_bad_input(world, operator_settings):
    with pytest.raises(CommandError, match="NAMESPACE/NAME"):
        call_command("reconcile", "no-slash", stdout=StringIO())
    with pytest.raises(CommandError, match="not found"):
        call_command("reconcile", f"{world.namespace}/absent", stdout=StringIO())


def test_reconcile_command_needs_the_operator_namespace(world, kubeconfig):
    with (
        override_settings(
            HIKYO_OPERATOR=OperatorSettings(operator_namespace=""), KUBECONFIG=str(kubeconfig)
        ),
        pytest.raises(CommandError, match="HIKYO_OPERATOR_NAMESPACE"),
    ):
        call_command("reconcile", f"{world.namespace}/app", stdout=StringIO())


def _ready_to_deliver(world) -> str:
    world.publish(DATABASE_URL="postgres://x", LOG_LEVEL="info")
    world.grant()
    world.create_instance()
    world.create_credential()
    return world.create_cr()["metadata"]["uid"]


def test_reconcile_command_refuses_beside_a_live_embedded_operator(world, operator_settings):
    """S4.1.4: an embedded operator's locks are in its memory; while its Lease is live the
    command must not write beside it."""
    _ready_to_deliver(world)
    leases = client.CoordinationV1Api(world.api_client)
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name=LEASE_NAME, namespace="hikyo-system"),
        spec=client.V1LeaseSpec(
            holder_identity="another-operator",
            lease_duration_seconds=15,
            renew_time=datetime.now(UTC),
        ),
    )
    try:  # an earlier operator test may have left its released Lease behind
        leases.delete_namespaced_lease(LEASE_NAME, "hikyo-system")
    except client.exceptions.ApiException as error:
        if error.status != 404:
            raise
    leases.create_namespaced_lease("hikyo-system", lease)
    try:
        with pytest.raises(CommandError, match=r"another-operator\) holds the leader Lease"):
            call_command("reconcile", f"{world.namespace}/app", stdout=StringIO())
    finally:
        leases.delete_namespaced_lease(LEASE_NAME, "hikyo-system")
    assert world.status() == {} and world.target() is None  # nothing was written


def test_reconcile_command_takes_the_shared_lock_in_scaled_mode(
    world, operator_settings, redis_server
):
    """S4.1.4: with the operator's Redis, a key a worker is running is left alone."""
    uid = _ready_to_deliver(world)
    queue = build_queue(redis_server.url)
    key = ObjectKey(world.namespace, "app", uid)
    lock = queue.begin(key, "a-worker", ttl=60)
    assert lock is not None
    try:
        with (
            override_settings(REDIS_URL=redis_server.url),
            pytest.raises(CommandError, match="per-key lock is held"),
        ):
            call_command("reconcile", f"{world.namespace}/app", stdout=StringIO())
        assert world.status() == {} and world.target() is None
    finally:
        queue.finish(lock, Requeue.NONE)
    out = StringIO()
    with override_settings(REDIS_URL=redis_server.url):
        call_command("reconcile", f"{world.namespace}/app", stdout=out)
    assert out.getvalue().startswith(f"{world.namespace}/app: Delivered")
    assert not queue.holds(lock)
