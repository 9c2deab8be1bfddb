"""The reconcile against the real apiserver and the devserver over HTTPS: the happy paths,
restoration, and retain-on-failure (S3.5, S4.2, S4.3, S4.8, S4.9, S4.11, S4.17)."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest

from devserver import MALFORMED_KINDS, Fault
from tests.support.world import canary
from workers.engine.outcome import Requeue
from workers.engine.pacing import RESUME_WINDOW
from workers.engine.stamp_root import ROOT_REUSE_SECONDS, STAMP_ROOT_SECRET, RecentStampRoot


def test_first_delivery_creates_the_owned_secret(world):
    """S4.8.1: type, exact data, one controller ownerReference, no labels or annotations."""
    values = world.ready()
    secret = world.target()
    assert secret is not None
    assert secret.type == "Opaque"
    assert secret.data == {
        "DATABASE_URL": values["DATABASE_URL"].encode(),
        "log-level": values["LOG_LEVEL"].encode(),
    }
    assert secret.labels == {} and secret.annotations == {}
    (owner,) = secret.owner_references
    assert owner["kind"] == "HikyoSecret" and owner["controller"] is True
    assert owner["blockOwnerDeletion"] is True and owner["uid"] == world.cr()["metadata"]["uid"]

    conditions = world.conditions()
    assert conditions["Ready"] == ("True", "Reconciled")
    assert conditions["Synced"] == ("True", "Delivered")
    status = world.status()
    assert status["lifecycle"] == "Synced"
    assert status["keyCount"] == 2
    assert status["cursor"] and status["cursorBinding"] and status["stamp"].startswith("v1:")
    assert status["managedSecretUID"] == secret.uid
    assert status["operatorNamespace"] == "hikyo-system"
    assert ("Normal", "Delivered") in world.events()

    (request,) = world.requests()
    assert request.cursor_present is False
    assert request.query == {"projection": "full"}  # no acknowledged_keys when empty (S3.3)
    assert request.authorization_present is True


def test_unchanged_resync_presents_the_cursor_and_writes_nothing(world):
    """S4.17: cursor presented, current answer, zero Kubernetes writes.

    The first current answer after a delivery moves Synced from Delivered to Current (one
    status write); every later unchanged resync writes nothing at all.
    """
    world.ready()
    first = world.reconcile()
    assert first.outcome.reason == "Current" and first.status_written
    assert world.conditions()["Synced"] == ("True", "Current")
    before_secret = world.target()
    before_cr = world.cr()
    events_before = world.events()

    result = world.reconcile()

    assert result.outcome.reason == "Current"
    assert result.status_written is False
    assert result.events_emitted == []
    assert world.requests()[-1].cursor_present is True
    assert world.target().resource_version == before_secret.resource_version
    assert world.cr()["metadata"]["resourceVersion"] == before_cr["metadata"]["resourceVersion"]
    assert world.events() == events_before
    assert result.outcome.requeue is Requeue.RESYNC


def test_deleted_target_is_restored_although_the_server_would_answer_current(world):
    """S4.3.1(2): no target, no cursor: a full delivery recreates it."""
    values = world.ready()
    world.delete_target()

    result = world.reconcile()

    assert result.outcome.reason == "Delivered"
    assert world.requests()[-1].cursor_present is False
    assert world.target().data["DATABASE_URL"] == values["DATABASE_URL"].encode()


def test_edited_target_is_restored(world):
    """S4.3.1(3): the stamp over the real data differs, so the cursor is withheld."""
    values = world.ready()
    secret = world.target()
    world.core.patch_namespaced_secret(
        "app-env",
        world.namespace,
        {
            "data": {
                "DATABASE_URL": base64.b64encode(b"tampered").decode(),
                "EXTRA": base64.b64encode(b"x").decode(),
            }
        },
    )
    result = world.reconcile()
    assert result.outcome.reason == "Delivered"
    assert world.requests()[-1].cursor_present is False
    restored = world.target()
    assert restored.uid == secret.uid
    assert restored.data == {
        "DATABASE_URL": values["DATABASE_URL"].encode(),
        "log-level": values["LOG_LEVEL"].encode(),
    }


def test_published_change_updates_the_secret(world):
    world.ready()
    new_value = canary("value")
    world.publish(DATABASE_URL=new_value, LOG_LEVEL="debug")
    result = world.reconcile()
    assert result.outcome.reason == "Delivered"
    assert world.requests()[-1].cursor_present is True  # the server answered in full anyway
    assert world.target().data["DATABASE_URL"] == new_value.encode()


def test_mapping_edit_invalidates_the_cursor(world):
    """S4.3.2: the binding covers the mapping, so an edit forces a full fetch."""
    world.ready()
    world.patch_cr("app", {"mapping": [{"key": "DATABASE_URL"}]})
    result = world.reconcile()
    assert result.outcome.reason == "Delivered"
    assert world.requests()[-1].cursor_present is False
    assert set(world.target().data) == {"DATABASE_URL"}


def test_forced_full_fetch_withholds_the_cursor(world):
    """S8.6: a forced resync is cursor-less; unchanged content writes nothing to the Secret."""
    world.ready()
    secret = world.target()
    result = world.reconcile(forced_full=True)
    assert world.requests()[-1].cursor_present is False
    assert result.outcome.reason == "Delivered"
    assert result.outcome.wrote_secret is False
    assert world.target().resource_version == secret.resource_version


def _retained(world, expected_data, expected_rv):
    secret = world.target()
    assert secret.data == expected_data
    assert secret.resource_version == expected_rv
    assert world.status()["lifecycle"] == "Retained"
    assert world.conditions()["Synced"] == ("False", "FetchFailed")
    assert world.conditions()["Ready"] == ("False", "Blocked")
    assert ("Warning", "FetchFailed") in world.events()


FAILURES = [
    pytest.param(Fault.unauthorized(), "status 401", id="401"),
    pytest.param(Fault.status(500), "status 500", id="500"),
    pytest.param(Fault.status(503), "status 503", id="503"),
    pytest.param(Fault.status(403), "status 403", id="403"),
    pytest.param(Fault.status(400), "status 400", id="400"),
    pytest.param(Fault.not_found(hikyo_body=False), "status 404", id="404-proxy-page"),
    pytest.param(Fault.slow(5.0), "timeout", id="timeout"),
    pytest.param(Fault.redirect(status=302), "redirect", id="redirect-302"),
    pytest.param(Fault.redirect(status=307), "redirect", id="redirect-307"),
]


@pytest.mark.parametrize(("fault", "detail"), FAILURES)
def test_failures_retain_the_secret_byte_for_byte(world, fault, detail):
    """S4.11: every failure keeps the Secret exactly, sets FetchFailed and backs off."""
    world.ready()
    secret = world.target()
    cursor = world.status()["cursor"]
    world.devserver.set_fault(world.token, fault)

    result = world.reconcile(forced_full=True)

    assert result.outcome.reason == "FetchFailed"
    assert detail in result.outcome.message
    assert result.outcome.requeue is Requeue.BACKOFF
    _retained(world, secret.data, secret.resource_version)
    assert world.status()["cursor"] == cursor  # failures leave the cursor alone


def test_redirect_never_carries_the_bearer_to_the_second_origin(world):
    """S3.2: redirects are refused, so the other origin never sees the Authorization header."""
    world.ready()
    world.devserver.set_fault(world.token, Fault.redirect(status=307))
    world.reconcile(forced_full=True)
    second = [r for r in world.devserver.requests if r.origin == "second"]
    assert all(not r.authorization_present for r in second)
    assert not [r for r in second if world.environment in r.path]


def test_429_pauses_without_a_backoff_step(world):
    """S3.5/S4.1.6: FetchFailed, retained, requeued after Retry-After (and after the CRs that
    waited for the pause, rev 3)."""
    world.ready()
    secret = world.target()
    world.devserver.set_fault(world.token, Fault.rate_limited(retry_after="7"))
    result = world.reconcile(forced_full=True)
    assert result.outcome.requeue is Requeue.AFTER
    assert result.outcome.delay == 7 + RESUME_WINDOW
    _retained(world, secret.data, secret.resource_version)


@pytest.mark.parametrize("kind", MALFORMED_KINDS)
def test_every_invalid_200_retains_the_secret(world, kind):
    """S3.4: any invalid body is FetchFailed; nothing is written, the cursor stays."""
    world.ready()
    secret = world.target()
    cursor = world.status()["cursor"]
    world.devserver.set_fault(world.token, Fault.malformed(kind))
    result = world.reconcile(forced_full=True)
    assert result.outcome.reason == "FetchFailed", result.outcome.message
    _retained(world, secret.data, secret.resource_version)
    assert world.status()["cursor"] == cursor


def test_current_answer_to_a_cursorless_fetch_is_a_failure(world):
    """S3.5: `current: true` without a presented cursor is a protocol violation."""
    world.ready()
    secret = world.target()
    world.devserver.set_fault(world.token, Fault.claim_current())
    result = world.reconcile(forced_full=True)
    assert result.outcome.reason == "FetchFailed"
    _retained(world, secret.data, secret.resource_version)


def test_conflict_409_is_not_materialized_and_creates_nothing(world):
    """S4.12: no published revision: nothing created, resync (not backoff)."""
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr()
    world.devserver.unpublish(*world.scope)
    result = world.reconcile()
    assert result.outcome.reason == "NotMaterialized"
    assert result.outcome.requeue is Requeue.RESYNC
    assert world.target() is None
    assert world.conditions()["Synced"] == ("False", "NotMaterialized")
    assert world.status()["lifecycle"] == "Retained"
    assert ("Warning", "NotMaterialized") in world.events()


def test_missing_instance_fails_without_a_request(world):
    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.grant()
    world.create_credential()
    world.create_cr()
    result = world.reconcile()
    assert result.outcome.reason == "FetchFailed"
    assert f"HikyoInstance {world.instance} not found" in result.outcome.message
    assert world.requests() == []


def test_instance_with_a_bad_ca_bundle_fails_without_a_request(world):
    """S3.2: bad trust never falls back to system roots; no request is made."""
    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.grant()
    world.create_instance(caBundle=base64.b64encode(b"not a certificate").decode())
    world.create_credential()
    world.create_cr()
    result = world.reconcile()
    assert result.outcome.reason == "FetchFailed"
    assert world.requests() == []


def test_instance_trusting_another_ca_fails_tls(world):
    from devserver.pki import generate

    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.grant()
    other = generate().ca_pem
    world.create_instance(caBundle=base64.b64encode(other).decode())
    world.create_credential()
    world.create_cr()
    result = world.reconcile()
    assert result.outcome.reason == "FetchFailed"
    assert "TLS" in result.outcome.message


def test_one_process_reads_the_stamp_root_once_a_minute(world):
    """S6.3 rev 3: runs of one process within 60 s reuse one uncached read of the root; after
    the window the next run reads it again (the engine's timer, moved by the test)."""
    now = [1000.0]
    reads: list[str] = []
    cluster = world.engine.cluster

    class Counting(type(cluster)):  # the real gateway, counting the root's GETs
        def get_secret(self, namespace, name):
            if name == STAMP_ROOT_SECRET:
                reads.append(namespace)
            return super().get_secret(namespace, name)

    world.engine = replace(
        world.engine,
        cluster=Counting(world.api_client),
        timer=lambda: now[0],
        recent_root=RecentStampRoot(lambda: now[0]),
    )
    world.ready()  # the root is read (and, the session's first time, created)
    assert world.reconcile().outcome.reason == "Current"  # a root that is there: kept
    reads.clear()
    world.create_cr("second", target={"name": "second-env"})
    for _ in range(2):
        assert world.reconcile("second").outcome.reason in {"Delivered", "Current"}
    assert world.reconcile(forced_full=True).outcome.reason in {"Delivered", "Current"}
    assert reads == []
    now[0] += ROOT_REUSE_SECONDS
    assert world.reconcile(forced_full=True).outcome.reason in {"Delivered", "Current"}
    assert len(reads) == 1
