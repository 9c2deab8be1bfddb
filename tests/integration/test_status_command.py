"""``manage.py status`` (issue 9): the HikyoSecrets as the cluster has them, with the Ready
rule's first blocker, filtered by ``--not-ready`` and ``-n``, as a table or ``-o json``; never
a value, token, cursor or stamp."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from tests.support.kube import unreachable_kubeconfig
from tests.support.world import CANARIES, canary
from workers.engine.settings import OperatorSettings


@pytest.fixture
def operator_settings(world, kubeconfig):
    with override_settings(
        HIKYO_OPERATOR=OperatorSettings(operator_namespace="hikyo-system"),
        KUBECONFIG=str(kubeconfig),
    ):
        yield


def status(*args: str) -> str:
    out = StringIO()
    call_command("status", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def _world(world) -> None:
    """Four CRs: delivered, refused (designation), failing (no instance), never reconciled."""
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL=canary("value"))
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr("good", target={"name": "good"})
    world.create_cr("refused", target={"name": "refused"}, auth={"secretRef": {"name": "absent"}})
    world.create_cr("lost", target={"name": "lost"}, instanceRef={"name": "absent-inst"})
    world.create_cr("pending", target={"name": "pending"})
    assert world.reconcile("good").outcome.reason == "Delivered"
    assert world.reconcile("refused").outcome.reason == "SecretNotDesignated"
    assert world.reconcile("lost").outcome.reason == "FetchFailed"


def _no_secrets(text: str, world) -> None:
    leaked = [c for c in CANARIES if c in text]
    assert not leaked, leaked
    assert world.status("good")["cursor"] not in text
    assert world.status("good")["stamp"] not in text


def test_status_table_shows_the_first_blocker(world, operator_settings):
    _world(world)
    text = status("-n", world.namespace)
    lines = text.splitlines()
    header = lines[0].split()
    assert header[:8] == [
        "NAMESPACE",
        "NAME",
        "INSTANCE",
        "TARGET",
        "LIFECYCLE",
        "READY",
        "REASON",
        "MESSAGE",
    ]
    rows = {line.split()[1]: line for line in lines[1:]}
    assert sorted(rows) == ["good", "lost", "pending", "refused"]
    good = rows["good"].split()
    assert good[:7] == [world.namespace, "good", world.instance, "good", "Synced", "True", "-"]
    refused = rows["refused"].split()
    assert refused[4:7] == ["Refused", "False", "Designation/SecretNotDesignated"]
    assert "Secret absent not found" in rows["refused"]
    lost = rows["lost"].split()
    assert lost[4:7] == ["Retained", "False", "Synced/FetchFailed"]
    assert "HikyoInstance absent-inst not found" in rows["lost"]
    pending = rows["pending"].split()
    assert pending[4:7] == ["-", "-", "Synced/absent"]
    _no_secrets(text, world)

    wide = status("-n", world.namespace, "-o", "wide")
    assert "CREDENTIAL" in wide.splitlines()[0] and "Secret/hikyo-credential" in wide
    _no_secrets(wide, world)


def test_status_not_ready_filters_and_json_parses(world, operator_settings):
    _world(world)
    text = status("-n", world.namespace, "--not-ready")
    names = [line.split()[1] for line in text.splitlines()[1:]]
    assert names == ["lost", "pending", "refused"]

    listed = json.loads(status("-n", world.namespace, "-o", "json"))
    by_name = {item["name"]: item for item in listed}
    assert set(by_name) == {"good", "lost", "pending", "refused"}
    good = by_name["good"]
    assert (good["ready"], good["lifecycle"], good["reason"]) == ("True", "Synced", None)
    assert good["remediation"].startswith("Nothing to do")
    assert good["lastDelivery"] and good["keyCount"] == 2
    refused = by_name["refused"]
    assert refused["reason"] == "Designation/SecretNotDesignated"
    assert (refused["conditionType"], refused["conditionReason"]) == (
        "Designation",
        "SecretNotDesignated",
    )
    assert refused["message"] == "Secret absent not found"
    assert 'hikyo.dev/delivery="true"' in refused["remediation"]
    assert f"hikyo.dev/instance={world.instance}" in refused["remediation"]
    lost = by_name["lost"]
    assert lost["reason"] == "Synced/FetchFailed"
    assert "HikyoInstance absent-inst does not exist" in lost["remediation"]
    assert by_name["pending"]["reason"] == "Synced/absent"
    assert "operator.namespaces" in by_name["pending"]["remediation"]
    # the stored Ready condition names the same first blocker (S5.2)
    for name in ("refused", "lost"):
        ready = next(c for c in world.status(name)["conditions"] if c["type"] == "Ready")
        assert ready["message"] == f"not ready: {by_name[name]['reason']}"

    not_ready = json.loads(status("-n", world.namespace, "-o", "json", "--not-ready"))
    assert sorted(item["name"] for item in not_ready) == ["lost", "pending", "refused"]
    _no_secrets(json.dumps(listed), world)


def test_status_lists_every_namespace_by_default(world, operator_settings):
    _world(world)
    text = status()
    mine = [line for line in text.splitlines() if line.startswith(world.namespace + " ")]
    assert len(mine) == 4
    assert status("-n", f"{world.namespace}-none").startswith("No HikyoSecrets found")
    assert json.loads(status("-n", f"{world.namespace}-none", "-o", "json")) == []


def test_status_errors_are_one_line(world, operator_settings, kubeconfig, tmp_path):
    with pytest.raises(CommandError):
        status("-o", "yaml")
    unreachable = unreachable_kubeconfig(kubeconfig, tmp_path)
    with (
        override_settings(KUBECONFIG=str(unreachable)),
        pytest.raises(CommandError, match="cannot reach the cluster"),
    ):
        status()
