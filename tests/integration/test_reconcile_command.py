"""`manage.py reconcile NAMESPACE/NAME` runs one reconcile, prints it, and records it."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from controlplane.observations.models import ConditionChange, EventRecord, ReconcileRun
from workers.engine.settings import OperatorSettings


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
