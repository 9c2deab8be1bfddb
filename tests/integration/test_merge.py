"""S11.4 on the real apiserver: creationPolicy Merge writes only this CR's keys into a Secret
another tool made, with server-side apply, and never creates, adopts or empties it."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest
from kubernetes import client

from k8s.errors import Conflict
from k8s.gateway import KubeCluster
from tests.support.clocks import ShiftedClock, on_clock
from workers.engine.merge import MERGE_FINALIZER, KeysOwnedElsewhere, merge_keys
from workers.engine.ports import FIELD_MANAGER

MERGE_TARGET = {"name": "app-env", "creationPolicy": "Merge"}
OURS = {"DATABASE_URL", "log-level"}


def _helm_secret(world, data: dict[str, bytes], **metadata) -> client.V1Secret:
    """The Secret as a chart's install makes it: another field manager owns its keys."""
    return world.core.create_namespaced_secret(
        world.namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="app-env", **metadata),
            data={k: base64.b64encode(v).decode() for k, v in data.items()},
        ),
        field_manager="helm",
    )


def _settled(world) -> str:
    """Reconciles past R2's finalizer patch; the reason of the run that did the work."""
    result = world.reconcile()
    if result.outcome.reason == "FinalizerAdded":
        result = world.reconcile()
    return result.outcome.reason


def test_merge_adds_only_its_keys_and_an_unchanged_resync_writes_nothing(world):
    _helm_secret(world, {"helm-key": b"from-the-chart"})
    values = world.ready(target=MERGE_TARGET)

    secret = world.target()
    assert secret.data == {
        "helm-key": b"from-the-chart",
        "DATABASE_URL": values["DATABASE_URL"].encode(),
        "log-level": values["LOG_LEVEL"].encode(),
    }
    assert secret.owner_references == []  # never taken: no ownerReference
    assert secret.keys_managed_by(FIELD_MANAGER) == OURS
    assert secret.keys_managed_by("helm") == {"helm-key"}
    status = world.status()
    assert status["keyCount"] == 2 and status["managedSecretUID"] == secret.uid
    assert MERGE_FINALIZER in world.cr()["metadata"]["finalizers"]

    world.reconcile()  # Delivered -> Current: one status write
    before = world.target().resource_version
    result = world.reconcile()
    assert result.outcome.reason == "Current" and not result.status_written
    assert world.target().resource_version == before  # S4.17: the stamp covers our keys


def test_a_missing_target_is_refused_before_any_fetch_and_never_created(world):
    world.prepare(target=MERGE_TARGET)

    assert _settled(world) == "MergeTargetMissing"
    assert world.conditions()["Conflict"] == ("True", "MergeTargetMissing")
    assert world.status()["lifecycle"] == "Refused"
    assert world.target() is None
    assert world.requests() == []  # R8 stops before the fetch


def test_a_key_another_manager_owns_is_refused_by_name_and_nothing_is_written(world):
    _helm_secret(world, {"log-level": b"chart-default"})
    world.prepare(target=MERGE_TARGET)
    before = world.target()

    assert _settled(world) == "KeyOwnedElsewhere"
    assert world.conditions()["Conflict"] == ("True", "KeyOwnedElsewhere")
    assert "log-level" in world.message("Conflict")
    assert "chart-default" not in world.message("Conflict")
    after = world.target()
    assert after.resource_version == before.resource_version
    assert after.data == {"log-level": b"chart-default"}


def test_a_key_no_longer_delivered_goes_and_deletion_removes_only_ours(world):
    _helm_secret(world, {"helm-key": b"from-the-chart"})
    world.ready(target=MERGE_TARGET)

    world.patch_cr("app", {"mapping": [{"key": "DATABASE_URL"}]})
    assert world.reconcile().outcome.reason == "Delivered"
    assert set(world.target().data) == {"helm-key", "DATABASE_URL"}
    assert world.status()["keyCount"] == 1

    world.custom.delete_namespaced_custom_object(
        "hikyo.dev", "v1alpha1", world.namespace, "hikyosecrets", "app"
    )
    assert world.reconcile().outcome.reason == "Finalized"
    secret = world.target()
    assert secret is not None and secret.data == {"helm-key": b"from-the-chart"}
    assert secret.keys_managed_by(FIELD_MANAGER) == frozenset()
    with pytest.raises(client.ApiException) as gone:
        world.cr()
    assert gone.value.status == 404  # the finalizer went once our keys had


def test_a_secret_another_controller_manages_is_never_written(world):
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "controller": True}
    made = world.core.create_namespaced_config_map(
        world.namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x"))
    )
    owner["uid"] = made.metadata.uid
    _helm_secret(world, {"helm-key": b"h"}, owner_references=[owner])
    world.prepare(target=MERGE_TARGET)

    assert _settled(world) == "ManagedSecretNotOwned"
    assert world.target().data == {"helm-key": b"h"}


def test_an_apply_never_recreates_a_secret_deleted_since_it_was_read(world):
    """An apply creates an absent object even with a resourceVersion precondition; the UID the
    gateway also sends makes it a 409 instead."""
    _helm_secret(world, {"helm-key": b"h"})
    gateway = KubeCluster(world.api_client)
    read = gateway.get_secret(world.namespace, "app-env")
    world.delete_target()
    with pytest.raises(Conflict):
        gateway.apply_secret_data(
            world.namespace, "app-env", read.uid, read.resource_version, {"k": b"v"}
        )
    assert world.target() is None


def test_a_withdrawn_authorization_removes_only_our_keys_and_keeps_the_secret(world):
    """S4.10.1 under Merge (S11.4): the scrub applies an empty set."""
    _helm_secret(world, {"helm-key": b"from-the-chart"})
    world.ready(target=MERGE_TARGET)
    clock = ShiftedClock()
    world.engine = on_clock(world.engine, clock)
    world.devserver.set_grants(world.token, ())
    world.reconcile()  # the first 404 is confirmed before anything is scrubbed (S4.10.0)
    clock.advance(world.engine.settings.not_found_confirmation_seconds)

    assert world.reconcile().outcome.reason == "AuthorizationWithdrawn"
    secret = world.target()
    assert secret is not None and secret.data == {"helm-key": b"from-the-chart"}
    assert secret.keys_managed_by(FIELD_MANAGER) == frozenset()
    assert world.status()["keyCount"] == 0
    assert "left without this HikyoSecret's keys" in world.message("Scrubbed")


def test_a_409_field_conflict_from_the_apiserver_is_keys_owned_elsewhere_not_a_failure(world):
    """S11.4's second line: the pre-check reads managedFields before applying; should it miss
    an owner, the apiserver's 409 names the keys (FieldManagerConflict causes), and the apply
    becomes KeysOwnedElsewhere with those names, not a plain write failure."""
    _helm_secret(world, {"log-level": b"from-the-chart", "helm-key": b"x"})
    cluster = KubeCluster(world.api_client)
    read = cluster.get_secret(world.namespace, "app-env")
    assert read is not None and read.keys_managed_by("helm") == {"log-level", "helm-key"}
    blind = replace(read, data_managers={})  # as if the pre-check had seen no other owner
    result = merge_keys(
        cluster, world.namespace, "app-env", {"log-level": b"ours", "DATABASE_URL": b"u"}, blind
    )
    assert result == KeysOwnedElsewhere(("log-level",))
    after = cluster.get_secret(world.namespace, "app-env")
    assert after is not None and after.data["log-level"] == b"from-the-chart"  # nothing written
    assert "DATABASE_URL" not in after.data
