"""Refusals and withdrawals against the real apiserver and the devserver: designation (S2.4),
target conflicts (R7-R9), Delivery refusals (S4.4-S4.7), authoritative 404 (S4.10), expiry and
pins (S4.13), ownership (S4.14) and namespaces the operator is not bound to (S4.15)."""

from __future__ import annotations

import base64
import datetime as dt
import logging
from dataclasses import replace

import pytest
from django.conf import settings
from kubernetes import client

from devserver import Fault
from k8s.gateway import KubeCluster
from tests.support.clocks import FakeClock, ShiftedClock, on_clock
from tests.support.waiting import wait_for
from tests.support.world import canary
from workers.engine.outcome import Requeue
from workers.engine.pacing import MAX_PAUSE, RESUME_WINDOW
from workers.engine.reconcile import Engine
from workers.engine.settings import OperatorSettings
from workers.keys import ObjectKey
from workers.queue.memory import MemoryQueue
from workers.runner import run_reconcile
from workers.runtime import Runtime

from .conftest import make_engine
from .limited_identity import without_secret_rights

# --- designation (S2.1, S2.2, S2.4) --------------------------------------------------------------


def _prepared(world, **credential):
    world.publish(DATABASE_URL=canary("value"), LOG_LEVEL="info")
    world.grant()
    world.create_instance()
    if credential is not None:
        world.create_credential(**credential)
    world.create_cr()


@pytest.mark.parametrize(
    ("credential", "reason", "phrase"),
    [
        pytest.param(
            {"labels": {"hikyo.dev/instance": "x"}},
            "SecretNotDesignated",
            "hikyo.dev/delivery",
            id="no-delivery-label",
        ),
        pytest.param(
            {"labels": {"hikyo.dev/delivery": "yes"}},
            "SecretNotDesignated",
            "hikyo.dev/delivery",
            id="delivery-label-not-true",
        ),
        pytest.param(
            {"labels": {"hikyo.dev/delivery": "true"}},
            "SecretNotDesignated",
            "hikyo.dev/instance",
            id="no-instance-label",
        ),
        pytest.param(
            {"labels": {"hikyo.dev/delivery": "true", "hikyo.dev/instance": "other"}},
            "InstanceMismatch",
            "other",
            id="instance-mismatch",
        ),
        pytest.param({"data": {}}, "SecretNotDesignated", "missing", id="token-absent"),
        pytest.param(
            {"data": {"hikyo-token": b"\n"}}, "SecretNotDesignated", "empty", id="token-empty"
        ),
        pytest.param(
            {"data": {"hikyo-token": b"tok en"}},
            "SecretNotDesignated",
            "visible ASCII",
            id="token-with-space",
        ),
        pytest.param(
            {"data": {"hikyo-token": b"tok\n\n"}},
            "SecretNotDesignated",
            "visible ASCII",
            id="token-two-newlines",
        ),
    ],
)
def test_undesignated_credential_is_never_sent(world, credential, reason, phrase):
    """S2.1: naming is not permission; nothing reaches the server."""
    _prepared(world, **credential)
    result = world.reconcile()
    assert result.outcome.reason == reason
    assert world.conditions()["Designation"] == ("False", reason)
    assert phrase in world.message("Designation")
    assert world.status()["lifecycle"] == "Refused"
    assert world.requests() == []
    assert world.target() is None
    assert ("Warning", reason) in world.events()
    assert result.outcome.requeue is Requeue.RESYNC


def test_missing_credential_secret(world):
    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.create_instance()
    world.create_cr()
    result = world.reconcile()
    assert result.outcome.reason == "SecretNotDesignated"
    assert "not found" in world.message("Designation")
    assert world.requests() == []


def test_crlf_terminated_token_is_accepted_and_designation_clears(world):
    """S2.2.3: one trailing CRLF is stripped (the CLI writes one); success removes Designation."""
    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.grant()
    world.create_instance()
    world.create_credential(labels={"hikyo.dev/delivery": "true"})
    world.create_cr()
    assert world.reconcile().outcome.reason == "SecretNotDesignated"
    world.core.patch_namespaced_secret(
        world.credential,
        world.namespace,
        {
            "metadata": {"labels": {"hikyo.dev/instance": world.instance}},
            "data": {"hikyo-token": base64.b64encode(world.token.encode() + b"\r\n").decode()},
        },
    )
    result = world.reconcile()
    assert result.outcome.reason == "Delivered"
    assert "Designation" not in world.conditions()


def test_federation_without_an_audience_is_refused(world):
    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.create_instance()
    world.core.create_namespaced_service_account(
        world.namespace,
        client.V1ServiceAccount(
            metadata=client.V1ObjectMeta(
                name="builder",
                labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": world.instance},
            )
        ),
    )
    world.create_cr(auth={"secretRef": None, "serviceAccountRef": {"name": "builder"}})
    result = world.reconcile()
    assert result.outcome.reason == "AudienceMissing"
    assert world.conditions()["Designation"] == ("False", "AudienceMissing")
    assert world.requests() == []


@pytest.mark.parametrize("labelled", [False, True], ids=["unlabelled", "not-in-list"])
def test_undesignated_service_account_is_refused(world, api_client, labelled):
    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.create_instance(audience="https://hikyo.test/k8s")
    labels = (
        {"hikyo.dev/delivery": "true", "hikyo.dev/instance": world.instance} if labelled else {}
    )
    world.core.create_namespaced_service_account(
        world.namespace,
        client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="builder", labels=labels)),
    )
    world.create_cr(auth={"secretRef": None, "serviceAccountRef": {"name": "builder"}})
    engine = make_engine(api_client, designated_service_accounts={world.namespace: ("other",)})
    result = world.reconcile(engine=engine)
    assert result.outcome.reason == "ServiceAccountNotDesignated"
    assert world.requests() == []


# --- target conflicts (R7-R9) ---


def test_existing_unowned_secret_is_never_adopted(world):
    _prepared(world)
    world.core.create_namespaced_secret(
        world.namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="app-env"), string_data={"mine": "keep"}),
    )
    result = world.reconcile()
    assert result.outcome.reason == "ManagedSecretNotOwned"
    assert world.conditions()["Conflict"] == ("True", "ManagedSecretNotOwned")
    assert world.target().data == {"mine": b"keep"}
    assert world.target().owner_references == []


def test_second_hikyosecret_on_the_same_target_loses(world):
    """R7: the earliest creationTimestamp wins (ties: lowest UID)."""
    world.ready()
    created = world.cr()["metadata"]["creationTimestamp"]
    # creationTimestamp has whole seconds: make "late" really later, not a UID coin toss.
    wait_for(
        lambda: dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ") > created,
        timeout=5,
        what="the next second",
    )
    world.create_cr("late")
    result = world.reconcile("late")
    assert result.outcome.reason == "TargetClaimed"
    assert world.conditions("late")["Conflict"] == ("True", "TargetClaimed")
    assert "HikyoSecret app" in world.message("Conflict", "late")
    assert world.target().controlled_by(world.cr()["metadata"]["uid"])


def test_type_change_against_an_existing_target_is_refused(world):
    world.ready()
    world.patch_cr(
        "app",
        {
            "target": {"type": "kubernetes.io/tls"},
            "mapping": [
                {"key": "DATABASE_URL", "secretKey": "tls.crt"},
                {"key": "LOG_LEVEL", "secretKey": "tls.key"},
            ],
        },
    )
    result = world.reconcile()
    assert result.outcome.reason == "TargetTypeImmutable"
    assert world.target().type == "Opaque"


def test_conflict_clears_once_resolved(world):
    _prepared(world)
    world.core.create_namespaced_secret(
        world.namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="app-env"), string_data={"mine": "keep"}),
    )
    world.reconcile()
    world.delete_target()
    assert world.reconcile().outcome.reason == "Delivered"
    assert "Conflict" not in world.conditions()
    assert world.conditions()["Ready"] == ("True", "Reconciled")


# --- Delivery refusals and findings (S4.4-S4.7) ---


def test_presence_only_secret_refuses_the_whole_delivery(world):
    """S4.4.1: no write at all, the previous Secret retained, cursor cleared, Synced unchanged."""
    world.ready()
    secret = world.target()
    world.publish_keys(
        [
            {"name": "DATABASE_URL", "classification": "secret", "value": canary("value")},
            {"name": "LOG_LEVEL", "classification": "config", "value": "info"},
        ]
    )
    world.devserver.set_machine_reveal(world.org, world.project, False)
    result = world.reconcile()
    assert result.outcome.reason == "UndeliveredSecrets"
    assert "DATABASE_URL" in world.message("Delivery")
    assert "machine-reveal" in world.message("Delivery")
    assert world.target().data == secret.data
    assert "cursor" not in world.status()
    assert world.conditions()["Synced"] == ("True", "Delivered")
    assert world.conditions()["Ready"] == ("False", "Blocked")


def test_config_only_projection_treats_secret_keys_as_missing(world):
    """S4.4: under config-only, mapped secret keys are missing, not presence-only."""
    world.publish_keys(
        [
            {"name": "DATABASE_URL", "classification": "secret", "value": canary("value")},
            {"name": "LOG_LEVEL", "classification": "config", "value": "info"},
        ]
    )
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr(projection="config-only")
    result = world.reconcile()
    assert result.outcome.reason == "Delivered"
    assert world.requests()[-1].query["projection"] == "config-only"
    assert world.target().data == {"log-level": b"info"}
    assert world.conditions()["Delivery"] == ("False", "KeysMissing")
    assert world.conditions()["Ready"] == ("True", "Reconciled")  # informational only


def test_revealed_secret_is_delivered(world):
    value = canary("value")
    world.publish_keys(
        [
            {"name": "DATABASE_URL", "classification": "secret", "value": value},
            {"name": "LOG_LEVEL", "classification": "config", "value": "info"},
        ]
    )
    world.devserver.set_machine_reveal(world.org, world.project, True)
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr()
    assert world.reconcile().outcome.reason == "Delivered"
    assert world.target().data["DATABASE_URL"] == value.encode()


def test_env_from_skip_is_a_warning(world):
    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr(mapping=[{"key": "DATABASE_URL", "secretKey": "1db"}])
    assert world.reconcile().outcome.reason == "Delivered"
    assert world.conditions()["Delivery"] == ("True", "EnvFromSkip")
    assert world.conditions()["Ready"] == ("True", "Reconciled")
    assert ("Warning", "EnvFromSkip") in world.events()


def test_unacknowledged_loader_key_is_refused_before_any_request(world):
    """S4.6.2: mapping mode needs the exact acknowledgement; no request is made."""
    world.publish(PATH="/opt/bin", LOG_LEVEL="y")
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr(mapping=[{"key": "PATH"}, {"key": "LOG_LEVEL"}])
    result = world.reconcile()
    assert result.outcome.reason == "LoaderControlUnacknowledged"
    assert "PATH" in world.message("Delivery")
    assert world.requests() == []

    world.patch_cr("app", {"acknowledgedLoaderKeys": ["PATH"]})
    assert world.reconcile().outcome.reason == "Delivered"
    assert world.requests()[-1].acknowledged_keys == ("PATH",)
    assert "Delivery" not in world.conditions()


def test_all_keys_delivers_everything_and_checks_loader_keys_after_the_fetch(world):
    """S4.5, S4.6.3: additions appear; an unacknowledged protected key refuses the whole
    replacement, keeps the Secret and clears the cursor."""
    first, second = canary("value"), canary("value")
    world.publish(A_KEY=first, B_KEY=second)
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr(allKeys=True, mapping=None)
    assert world.reconcile().outcome.reason == "Delivered"
    assert world.target().data == {"A_KEY": first.encode(), "B_KEY": second.encode()}

    world.publish(A_KEY=first, LD_PRELOAD="/evil.so")
    result = world.reconcile()
    assert result.outcome.reason == "LoaderControlUnacknowledged"
    assert "LD_PRELOAD" in world.message("Delivery")
    assert world.target().data == {"A_KEY": first.encode(), "B_KEY": second.encode()}
    assert "cursor" not in world.status()

    world.patch_cr("app", {"acknowledgedLoaderKeys": ["LD_PRELOAD", "PATH"]})
    assert world.reconcile().outcome.reason == "Delivered"
    assert set(world.target().data) == {"A_KEY", "LD_PRELOAD"}


def test_typed_target_needs_its_required_destinations(world):
    """R10: a tls mapping without tls.key is refused before any request."""
    world.publish(CERT="c", KEY="k")
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr(
        target={"type": "kubernetes.io/tls"}, mapping=[{"key": "CERT", "secretKey": "tls.crt"}]
    )
    result = world.reconcile()
    assert result.outcome.reason == "KeysMissing"
    assert "tls.key" in world.message("Delivery")
    assert world.status()["lifecycle"] == "Refused"
    assert world.conditions()["Ready"] == ("False", "Blocked")
    assert world.requests() == []


def _typed_world(world, engine=None):
    world.publish(CERT=canary("value"), KEY=canary("value"))
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr(
        target={"type": "kubernetes.io/tls"},
        mapping=[{"key": "CERT", "secretKey": "tls.crt"}, {"key": "KEY", "secretKey": "tls.key"}],
    )
    return world.reconcile(engine=engine)


def test_typed_target_is_created_with_its_type(world):
    assert _typed_world(world).outcome.reason == "Delivered"
    assert world.target().type == "kubernetes.io/tls"


def test_native_types_disabled_refuses_typed_targets(world, api_client):
    """S4.7.6: refused at R4, before credential use or fetch."""
    result = _typed_world(world, engine=make_engine(api_client, native_secret_types=False))
    assert result.outcome.reason == "NativeSecretTypesDisabled"
    assert world.requests() == []
    assert world.target() is None


def test_withdrawn_required_source_deletes_the_typed_target(world):
    """S4.10.2 via a valid 200: the typed Secret cannot be empty, so it is deleted."""
    _typed_world(world)
    world.publish(CERT="c")
    result = world.reconcile()
    assert result.outcome.reason == "AuthorizationWithdrawn"
    assert world.target() is None
    assert world.conditions()["Scrubbed"] == ("True", "AuthorizationWithdrawn")
    assert world.conditions()["Delivery"] == ("False", "KeysMissing")
    status = world.status()
    assert "managedSecretUID" not in status and "cursor" not in status
    assert status["lifecycle"] == "Scrubbed"

    world.publish(CERT="c", KEY="k")  # a later complete delivery recreates it
    assert world.reconcile().outcome.reason == "Delivered"
    assert world.target().type == "kubernetes.io/tls"
    assert "Scrubbed" not in world.conditions()


def test_docker_config_must_be_a_json_object(world):
    """S4.7.3: invalid content is refused by name, the last Secret kept, the cursor cleared."""
    world.publish(DOCKER='{"auths": {}}')
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr(
        target={"type": "kubernetes.io/dockerconfigjson"},
        mapping=[{"key": "DOCKER", "secretKey": ".dockerconfigjson"}],
    )
    assert world.reconcile().outcome.reason == "Delivered"
    world.publish(DOCKER="[1, 2]")
    result = world.reconcile()
    assert result.outcome.reason == "InvalidSecretData"
    assert ".dockerconfigjson" in world.message("Delivery")
    assert world.target().data == {".dockerconfigjson": b'{"auths": {}}'}
    assert "cursor" not in world.status()


def test_oversize_content_is_refused_before_writing(world):
    """S4.4.3, D15: more than 1 MiB in total is refused before the API server sees it."""
    big = "x" * 60_000
    world.publish(**{f"K{i}": big for i in range(18)})
    world.grant()
    world.create_instance()
    world.create_credential()
    world.create_cr(allKeys=True, mapping=None)
    result = world.reconcile()
    assert result.outcome.reason == "InvalidSecretData"
    assert "exceeds 1048576" in world.message("Delivery")
    assert world.target() is None


# --- authoritative 404 (S4.10) -------------------------------------------------------------------

CONFIRMATION_SECONDS = 30.0  # S4.10.0's window, proven on a clock the test moves


def _confirming_on(engine: Engine, clock: ShiftedClock) -> Engine:
    """``engine`` with the production 404 confirmation window, on ``clock``."""
    settings = replace(engine.settings, not_found_confirmation_seconds=CONFIRMATION_SECONDS)
    return on_clock(replace(engine, settings=settings), clock)


def test_authoritative_404_is_confirmed_then_empties_an_opaque_target(world):
    world.ready()
    secret = world.target()
    clock = ShiftedClock()
    world.engine = _confirming_on(world.engine, clock)
    world.devserver.set_grants(world.token, ())  # read withdrawn: the uniform 404
    first = world.reconcile()
    assert first.outcome.reason == "FetchFailed"
    assert "confirming" in first.outcome.message
    assert first.outcome.requeue is Requeue.AFTER
    assert world.target().data == secret.data  # nothing acts on a first 404

    clock.advance(CONFIRMATION_SECONDS - 10)  # inside the window: still confirming
    early = world.reconcile()
    assert early.outcome.reason == "FetchFailed" and "confirming" in early.outcome.message
    assert world.target().data == secret.data

    clock.advance(10)
    second = world.reconcile()
    assert world.requests()[-1].cursor_present is False
    assert second.outcome.reason == "AuthorizationWithdrawn"
    emptied = world.target()
    assert emptied.uid == secret.uid and emptied.data == {}
    conditions = world.conditions()
    assert conditions["Scrubbed"] == ("True", "AuthorizationWithdrawn")
    assert "Synced" not in conditions
    status = world.status()
    assert status["lifecycle"] == "Scrubbed" and status["keyCount"] == 0
    assert "cursor" not in status
    assert ("Warning", "AuthorizationWithdrawn") in world.events()

    third = world.reconcile()  # repeated refusals keep it as it is
    assert third.outcome.reason == "AuthorizationWithdrawn"
    assert third.status_written is False


def test_404_without_the_hikyo_body_never_scrubs(world):
    world.ready()
    secret = world.target()
    clock = ShiftedClock()
    world.engine = _confirming_on(world.engine, clock)
    world.devserver.set_fault(world.token, Fault.not_found(hikyo_body=False))
    for _ in range(2):
        result = world.reconcile()
        assert result.outcome.reason == "FetchFailed"
        clock.advance(CONFIRMATION_SECONDS)
    assert world.target().data == secret.data


def test_confirmed_404_deletes_a_typed_target(world):
    _typed_world(world)
    clock = ShiftedClock()
    world.engine = _confirming_on(world.engine, clock)
    world.devserver.set_grants(world.token, ())
    world.reconcile()
    clock.advance(CONFIRMATION_SECONDS)
    result = world.reconcile()
    assert result.outcome.reason == "AuthorizationWithdrawn"
    assert world.target() is None


class _ReplacingCluster(KubeCluster):
    """Recreates the target just before the operator's delete lands (a real race, replayed)."""

    def delete_secret(self, namespace, name, uid, resource_version):
        core = client.CoreV1Api(self.api_client)
        core.delete_namespaced_secret(name, namespace)
        replacement = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name),
            type="kubernetes.io/tls",
            string_data={"tls.crt": "someone else's", "tls.key": "k"},
        )
        core.create_namespaced_secret(namespace, replacement)
        super().delete_secret(namespace, name, uid, resource_version)


def test_replacement_secret_with_a_new_uid_is_never_deleted(world, api_client):
    _typed_world(world)
    world.devserver.set_grants(world.token, ())
    engine = make_engine(api_client)
    racing = Engine(_ReplacingCluster(api_client), engine.store, engine.settings, engine.client_for)
    clock = ShiftedClock()
    racing = _confirming_on(racing, clock)
    world.reconcile(engine=racing)
    clock.advance(CONFIRMATION_SECONDS)
    result = world.reconcile(engine=racing)
    assert result.outcome.reason == "FetchFailed"
    assert "precondition" in result.outcome.message
    survivor = world.target()
    assert survivor is not None and survivor.data["tls.crt"] == b"someone else's"
    assert "cursor" not in world.status()


# --- expiry, pins (S4.13) ------------------------------------------------------------------------


def test_credential_expiring_soon_is_flagged_without_blocking(world):
    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.grant(expires_at=dt.datetime.now(dt.UTC) + dt.timedelta(days=2))
    world.create_instance()
    world.create_credential()
    world.create_cr()
    assert world.reconcile().outcome.reason == "Delivered"
    assert world.conditions()["CredentialExpiry"] == ("True", "ExpiresSoon")
    assert world.conditions()["Ready"] == ("True", "Reconciled")
    assert world.status()["credentialExpiresAt"]
    assert ("Warning", "ExpiresSoon") in world.events()


def test_credential_past_its_expiry_by_our_clock_is_expired(world, api_client):
    """S4.13: `now >= expiry` gives Expired (the server may still accept it for a moment)."""
    expiry = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    world.publish(DATABASE_URL="x", LOG_LEVEL="y")
    world.grant(expires_at=expiry)
    world.create_instance()
    world.create_credential()
    world.create_cr()
    engine = make_engine(api_client)
    engine.clock = lambda: expiry + dt.timedelta(seconds=1)
    assert world.reconcile(engine=engine).outcome.reason == "Delivered"
    assert world.conditions()["CredentialExpiry"] == ("True", "Expired")
    assert expiry.strftime("%Y-%m-%dT%H:%M:%SZ") in world.message("CredentialExpiry")
    assert ("Warning", "Expired") in world.events()


def test_expired_pin_is_reported_on_every_answer(world):
    world.ready()
    world.devserver.pin(world.token, 1, expired=True)
    world.reconcile()
    assert world.conditions()["PinExpiry"] == ("True", "PinExpired")
    assert world.status()["pinnedRevision"] == 1
    assert ("Warning", "PinExpired") in world.events()
    world.devserver.unpin(world.token)
    world.reconcile()
    assert "PinExpiry" not in world.conditions()
    assert "pinnedRevision" not in world.status()


# --- ownership (S4.14) ---------------------------------------------------------------------------


def test_orphan_policy_leaves_the_secret_on_deletion(world):
    values = world.ready(target={"creationPolicy": "Orphan"})
    cr = world.cr()
    assert "hikyo.dev/orphan" in cr["metadata"]["finalizers"]
    world.custom.delete_namespaced_custom_object(
        "hikyo.dev", "v1alpha1", world.namespace, "hikyosecrets", "app"
    )
    result = world.reconcile()
    assert result.outcome.reason == "Finalized"
    secret = world.target()
    assert secret.owner_references == []
    assert secret.data["DATABASE_URL"] == values["DATABASE_URL"].encode()
    assert (
        world.custom.list_namespaced_custom_object(
            "hikyo.dev", "v1alpha1", world.namespace, "hikyosecrets"
        )["items"]
        == []
    )


# --- namespace not bound (S4.15) -----------------------------------------------------------------


def test_missing_rbac_in_a_namespace_is_named(world, api_client, operator_namespace):
    """S4.15: a 403 the access review confirms gives Unreconciled/NamespaceNotBound."""
    _prepared(world)
    name = f"limited-{world.namespace}"
    with without_secret_rights(api_client, operator_namespace, name) as limited:
        result = world.reconcile(engine=make_engine(limited))
    assert result.outcome.reason == "NamespaceNotBound"
    assert world.conditions()["Unreconciled"] == ("True", "NamespaceNotBound")
    assert "secrets" in world.message("Unreconciled")
    assert world.status()["lifecycle"] == "Unreconciled"

    assert world.reconcile().outcome.reason == "Delivered"  # bound again: the condition goes
    assert "Unreconciled" not in world.conditions()


def test_a_namespace_not_bound_is_one_log_line(world, api_client, operator_namespace, caplog):
    """Issue 35 item 4: the expected 403 of a run (S4.15) is the run's one structured line,
    formatted as settings.LOGGING's console prints it: no traceback, no second line."""
    _prepared(world)
    key = ObjectKey(world.namespace, "app", world.cr()["metadata"]["uid"])
    with without_secret_rights(api_client, operator_namespace, f"quiet-{world.namespace}") as lim:
        runtime = Runtime(
            settings=OperatorSettings(operator_namespace=operator_namespace),
            cluster=KubeCluster(lim),
            queue=MemoryQueue(),
        )
        caplog.clear()
        with caplog.at_level(logging.INFO):
            result = run_reconcile(runtime, key)
        records = [r for r in caplog.records if not r.name.startswith(("urllib3", "kubernetes"))]
    assert result is not None and result.outcome.reason == "NamespaceNotBound"
    formatter = logging.Formatter(settings.LOGGING["formatters"]["plain"]["format"])
    printed = "\n".join(formatter.format(record) for record in records).splitlines()
    assert len(printed) == 1, printed
    assert "outcome=NamespaceNotBound" in printed[0] and f"uid={key.uid}" in printed[0]
    assert records[0].exc_info is None


# --- foreign owner (S4.1.7) ---------------------------------------------------------------------


def test_a_cr_of_another_live_operator_is_left_alone_until_its_lease_goes_stale(world):
    world.ready()
    other = f"{world.namespace}-op"
    world.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    coordination = client.CoordinationV1Api(world.api_client)
    now = dt.datetime.now(dt.UTC)
    coordination.create_namespaced_lease(
        other,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="hikyo-operator.hikyo.dev"),
            spec=client.V1LeaseSpec(
                holder_identity="them", lease_duration_seconds=15, renew_time=now
            ),
        ),
    )
    try:
        world.custom.patch_namespaced_custom_object_status(
            "hikyo.dev",
            "v1alpha1",
            world.namespace,
            "hikyosecrets",
            "app",
            {"status": {"operatorNamespace": other}},
        )
        world.delete_target()
        before = world.cr()["metadata"]["resourceVersion"]
        result = world.reconcile()
        assert result.outcome.reason == "ForeignOwner"
        assert world.target() is None  # nothing written, not even the restore
        assert world.cr()["metadata"]["resourceVersion"] == before

        coordination.patch_namespaced_lease(
            "hikyo-operator.hikyo.dev",
            other,
            {"spec": {"renewTime": (now - dt.timedelta(hours=1)).isoformat()}},
        )
        assert world.reconcile().outcome.reason == "Delivered"  # stale: we take over
        assert world.status()["operatorNamespace"] == "hikyo-system"
        assert world.target() is not None
    finally:
        world.core.delete_namespace(other)


# --- outbound pacing (S4.1.6) --------------------------------------------------------------------


def test_a_429_pauses_every_cr_of_that_instance_and_org(world, api_client):
    """The pause is per (instance, org): a second CR of the org makes no request until the
    pause ends (another org's CRs: tests/integration/test_pause_per_org.py). The engine's wall
    clock and its store's clock are injected and stand still between the two runs, so the
    second meets the whole pause however long the host takes in between."""
    world.ready()
    world.create_cr("second", target={"name": "second-env"})
    clock = FakeClock(world.engine.wall_seconds())
    world.engine = replace(world.engine, wall_seconds=clock, store=MemoryQueue(clock=clock))
    world.devserver.set_fault(world.token, Fault.rate_limited(retry_after="30"), times=1)
    first = world.reconcile(forced_full=True)
    assert first.outcome.requeue is Requeue.AFTER
    assert first.outcome.delay == 30 + RESUME_WINDOW  # after the CRs that wait for the pause
    sent = len(world.requests())
    second = world.reconcile("second")
    assert second.outcome.reason == "InstancePaused"
    # All 30 s of the pause left, then its place in the window the waiting CRs come back in:
    # one that met more of the pause became due earlier, so it comes back earlier in it.
    assert second.outcome.delay == pytest.approx(30 + RESUME_WINDOW * (1 - 30 / MAX_PAUSE))
    assert second.status_written is False
    assert len(world.requests()) == sent  # nothing went to the paused instance


def test_the_token_bucket_paces_fetches_without_failing(world, api_client):
    """S4.1.6 on an injected clock: the bucket's time moves only when the run sleeps."""
    world.ready()
    now = [1000.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    engine = make_engine(api_client, fetch_qps=0.5, fetch_burst=1)
    engine.store = MemoryQueue(clock=lambda: now[0])
    engine.sleep = sleep
    assert world.reconcile(engine=engine).outcome.reason in ("Current", "Delivered")
    assert slept == []
    assert world.reconcile(engine=engine).outcome.reason == "Current"
    assert slept == [pytest.approx(2.0)]  # 1 / 0.5 QPS to the next token, well within 5 s

    strict = make_engine(api_client, fetch_qps=0.1, fetch_burst=1)  # 10 s to the next token
    strict.sleep = slept.append
    world.reconcile(engine=strict)
    paced = world.reconcile(engine=strict)
    assert paced.outcome.reason == "Paced" and paced.outcome.requeue is Requeue.AFTER
    assert paced.status_written is False
