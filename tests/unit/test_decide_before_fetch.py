"""S4.2 steps R0-R14 on plain ``Observed`` data: ``decide_before_fetch`` stops at the first step
that stops (with the outcome the S4.2 row, S2.4, S4.3, S4.15 or S6.3 names) or plans the fetch.

No cluster, no network, no sleeps: every test builds the record of what a run read.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from tests.support.factories import DELETE
from tests.unit.decide_fixtures import (
    CR_NAME,
    CR_UID,
    CREDENTIAL_RV,
    CREDENTIAL_UID,
    CURSOR,
    DESIGNATED,
    FRESH_ROOT,
    INSTANCE,
    INSTANCE_UID,
    NATIVE,
    NOW,
    NS,
    OP_NS,
    ROLLOUTS,
    ROOT,
    SA,
    SA_RV,
    SA_UID,
    SETTINGS,
    TARGET,
    TLS,
    TLS_MAPPING,
    TOKEN,
    binding_for,
    claimant,
    controlled_target,
    cr,
    credential_secret,
    decide,
    eligible_status,
    instance,
    key_for,
    needs,
    observed,
    only_cr,
    owner_ref,
    planned,
    root_secret,
    sa_cr,
    service_account,
    stamped_cr,
    stopped,
    typed_cr,
    with_status,
)
from workers.engine.decide import ORPHAN_FINALIZER
from workers.engine.facts import Cause
from workers.engine.force_sync import FORCE_SYNC_ANNOTATION
from workers.engine.merge import MERGE_FINALIZER
from workers.engine.observed import UNREAD, ForbiddenRead, Observed
from workers.engine.outcome import Requeue
from workers.engine.plan import FetchPlan, Read, StoreNote
from workers.engine.ports import LeaseRecord, SecretObject
from workers.engine.refusals import forbidden_outcome

# -- assertion helpers --------------------------------------------------------------------------


def assert_failed(plan, *phrases: str, cause: Cause) -> None:
    """S4.11: Synced=False/FetchFailed, Retained, backoff, Warning event, nothing written; the
    condition's cause fact picks the remediation (remediation.py reads no message)."""
    outcome = plan.outcome
    assert outcome.reason == "FetchFailed"
    synced = outcome.conditions["Synced"]
    assert (synced.status, synced.reason) == ("False", "FetchFailed")
    assert outcome.lifecycle == "Retained"
    assert outcome.requeue is Requeue.BACKOFF
    assert [(e.type, e.reason) for e in outcome.events] == [("Warning", "FetchFailed")]
    assert plan.secret is None and plan.finalizers is None
    for phrase in phrases:
        assert phrase in synced.message
    assert synced.facts == {"cause": cause}


def assert_refused(plan, type_: str, status: str, reason: str, *, clears_cursor: bool) -> None:
    """S4.2 "Refused" rows: the condition, lifecycle Refused, resync, Warning event."""
    outcome = plan.outcome
    condition = outcome.conditions[type_]
    assert (condition.type, condition.status, condition.reason) == (type_, status, reason)
    assert outcome.reason == reason
    assert outcome.lifecycle == "Refused"
    assert outcome.requeue is Requeue.RESYNC
    assert outcome.write_status
    assert [(e.type, e.reason) for e in outcome.events] == [("Warning", reason)]
    assert plan.secret is None
    if clears_cursor:
        assert outcome.status["cursor"] is None and outcome.status["cursorBinding"] is None
    else:
        assert "cursor" not in outcome.status


def assert_quiet(plan, reason: str) -> None:
    """No status write, no Secret action, no event."""
    outcome = plan.outcome
    assert outcome.reason == reason
    assert not outcome.write_status
    assert outcome.events == [] and outcome.conditions == {}
    assert plan.secret is None


# -- R0 -----------------------------------------------------------------------------------------


def test_R0_a_gone_cr_stops_without_any_write():
    plan = stopped(Observed(NS, CR_NAME, cr=None))
    assert_quiet(plan, "Gone")
    assert plan.outcome.requeue is Requeue.NONE
    assert plan.finalizers is None and plan.store == ()


def test_R0_S8_5_a_cr_in_the_operator_namespace_is_ignored_before_any_read():
    the_cr = cr(metadata={"namespace": OP_NS})
    obs = replace(only_cr(the_cr), namespace=OP_NS)
    plan = stopped(obs)
    assert_quiet(plan, "OperatorNamespace")
    assert plan.outcome.requeue is Requeue.NONE


def test_R0_S8_5_even_a_deleting_orphan_cr_in_the_operator_namespace_is_not_finalized():
    the_cr = cr(
        metadata={
            "namespace": OP_NS,
            "deletionTimestamp": "2025-05-01T00:00:00Z",
            "finalizers": [ORPHAN_FINALIZER],
        },
        target={"name": TARGET, "creationPolicy": "Orphan"},
    )
    plan = stopped(replace(only_cr(the_cr), namespace=OP_NS))
    assert_quiet(plan, "OperatorNamespace")
    assert plan.finalizers is None


def _foreign(lease: Any, *, readable: bool = True, **cr_fields: Any):
    the_cr = cr(status={"operatorNamespace": "other-operator"}, **cr_fields)
    return replace(only_cr(the_cr), lease=lease, lease_readable=readable)


def _lease(age_seconds: float, holder: str = "other-pod") -> LeaseRecord:
    return LeaseRecord(holder=holder, renewed_at=NOW.at - timedelta(seconds=age_seconds))


def test_R0_S4_1_7_another_operators_namespace_makes_the_lease_the_first_read():
    assert needs(_foreign(UNREAD)) is Read.LEASE


def test_R0_S4_1_7_our_own_recorded_namespace_needs_no_lease():
    the_cr = cr(status={"operatorNamespace": OP_NS})
    assert needs(only_cr(the_cr)) is Read.INSTANCE


@pytest.mark.parametrize(
    ("age", "readable", "resync"),
    [
        pytest.param(60.0, True, None, id="live-lease-renewed-1min-ago"),
        pytest.param(3 * 300.0 - 5, True, None, id="live-lease-just-under-3x-resync"),
        pytest.param(60.0, True, "1h", id="live-lease-long-resync"),
        pytest.param(None, False, None, id="unreadable-lease-counts-as-live"),
    ],
)
def test_R0_S4_1_7_foreign_owner_live_stands_off_without_write_and_rechecks(age, readable, resync):
    spec = {"resyncInterval": resync} if resync else {}
    lease = _lease(age) if age is not None else None
    plan = stopped(_foreign(lease, readable=readable, **spec))
    assert_quiet(plan, "ForeignOwner")
    assert "other-operator" in plan.outcome.message
    # No watch event comes when that operator stops: look again by the time it would be stale.
    assert plan.outcome.requeue is Requeue.AFTER
    resync_seconds = 3600.0 if resync == "1h" else 300.0
    assert plan.outcome.delay is not None and plan.outcome.delay > 0
    if age is not None:
        assert plan.outcome.delay <= 3 * resync_seconds - age + 1.0
    assert plan.outcome.delay <= resync_seconds


def test_R0_S4_1_7_a_released_lease_renewed_lately_stands_off():
    """S4.1.7 rev 3: a clean stop empties holderIdentity and keeps renewTime; it is judged by
    renewTime, so a rolling update of the owner's install hands nothing over."""
    plan = stopped(_foreign(_lease(10.0, holder="")))
    assert_quiet(plan, "ForeignOwner")
    assert plan.outcome.requeue is Requeue.AFTER and plan.outcome.delay == 300.0


@pytest.mark.parametrize(
    "lease",
    [
        pytest.param(_lease(3 * 300.0 + 1), id="stale-lease-over-3x-resync"),
        pytest.param(_lease(3 * 300.0 + 1, holder=""), id="released-lease-stale-by-renew-time"),
        pytest.param(None, id="no-lease-at-all"),
        pytest.param(LeaseRecord("pod", None), id="never-renewed"),
    ],
)
def test_R0_S4_1_7_foreign_owner_stale_is_taken_over(lease):
    assert needs(_foreign(lease)) is Read.INSTANCE


def test_R0_foreign_owner_is_judged_before_R1_finalize():
    obs = _foreign(
        _lease(60.0),
        metadata={"deletionTimestamp": "2025-05-01T00:00:00Z", "finalizers": [ORPHAN_FINALIZER]},
        target={"name": TARGET, "creationPolicy": "Orphan"},
    )
    plan = stopped(obs)
    assert_quiet(plan, "ForeignOwner")
    assert plan.finalizers is None


# -- R1 -----------------------------------------------------------------------------------------

DELETING = "2025-05-01T00:00:00Z"


def test_R1_deleting_without_the_orphan_finalizer_does_nothing():
    the_cr = cr(metadata={"deletionTimestamp": DELETING, "finalizers": ["example.com/other"]})
    plan = stopped(only_cr(the_cr))
    assert_quiet(plan, "Deleting")
    assert plan.finalizers is None  # S4.14.1: garbage collection via the ownerReference


def test_R1_S4_14_3_deleting_with_the_orphan_finalizer_releases_then_drops_only_it():
    the_cr = cr(
        metadata={
            "deletionTimestamp": DELETING,
            "finalizers": ["example.com/keep", ORPHAN_FINALIZER],
        },
        target={"name": TARGET, "creationPolicy": "Orphan"},
    )
    plan = stopped(only_cr(the_cr))
    assert not plan.outcome.write_status
    assert plan.secret is not None
    assert (plan.secret.kind, plan.secret.namespace, plan.secret.name, plan.secret.cr_uid) == (
        "release",
        NS,
        TARGET,
        CR_UID,
    )
    assert plan.finalizers == ["example.com/keep"]


def test_R1_finalizes_even_a_cr_whose_spec_is_invalid():
    the_cr = cr(
        metadata={"deletionTimestamp": DELETING, "finalizers": [ORPHAN_FINALIZER]},
        target={"name": TARGET, "creationPolicy": "Orphan"},
        resyncInterval="1s",
    )
    plan = stopped(only_cr(the_cr))
    assert plan.secret is not None and plan.secret.kind == "release"
    assert plan.finalizers == []


# -- R2 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "finalizers", "expected"),
    [
        pytest.param("Orphan", [], [ORPHAN_FINALIZER], id="orphan-adds-the-finalizer"),
        pytest.param(
            "Orphan",
            ["example.com/x"],
            ["example.com/x", ORPHAN_FINALIZER],
            id="orphan-keeps-others",
        ),
        pytest.param("Owner", [ORPHAN_FINALIZER], [], id="owner-removes-it"),
        pytest.param(
            "Owner",
            ["example.com/x", ORPHAN_FINALIZER, "example.com/y"],
            ["example.com/x", "example.com/y"],
            id="owner-removes-only-it",
        ),
    ],
)
def test_R2_finalizer_patch_stops_without_status_write_and_reruns(policy, finalizers, expected):
    the_cr = cr(
        metadata={"finalizers": finalizers}, target={"name": TARGET, "creationPolicy": policy}
    )
    plan = stopped(only_cr(the_cr))
    assert plan.finalizers == expected
    assert not plan.outcome.write_status and plan.outcome.events == []
    assert plan.secret is None
    assert plan.outcome.requeue is Requeue.AFTER and plan.outcome.delay == 0


def test_R2_no_fetch_before_an_orphan_cr_holds_its_finalizer():
    the_cr = cr(target={"name": TARGET, "creationPolicy": "Orphan"})
    plan = stopped(observed(the_cr))  # every read answered: still no fetch
    assert plan.finalizers == [ORPHAN_FINALIZER]


def test_R2_an_orphan_cr_holding_its_finalizer_goes_on():
    the_cr = cr(
        metadata={"finalizers": [ORPHAN_FINALIZER]},
        target={"name": TARGET, "creationPolicy": "Orphan"},
    )
    assert needs(only_cr(the_cr)) is Read.INSTANCE


# -- R3 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "phrase"),
    [
        pytest.param({"resyncInterval": "5s"}, "invalid resyncInterval", id="resync-below-10s"),
        pytest.param({"resyncInterval": "0s"}, "invalid resyncInterval", id="resync-zero"),
        pytest.param({"resyncInterval": "soon"}, "invalid resyncInterval", id="resync-not-go"),
        pytest.param(
            {"auth": {"serviceAccountRef": {"name": SA}}}, "exactly one", id="both-auth-refs"
        ),
        pytest.param({"scope": {"org": "acme"}}, "scope.org", id="scope-not-an-id"),
        pytest.param({"allKeys": True}, "allKeys", id="both-modes"),
        pytest.param({"target": {"name": "Not_A_Label"}}, "target.name", id="bad-target-name"),
        pytest.param(
            {"target": {"template": {"data": {"a": "x"}}, "format": "json", "formatKey": "a"}},
            "exclude each other",
            id="S1.3.12-template-and-format",
        ),
        pytest.param({"target": {"format": "json"}}, "formatKey", id="S1.3.13-no-format-key"),
        pytest.param(
            {"target": {"template": {"data": {"..x": "x"}}}},
            "template.data key",
            id="S1.3.15-template-key-dotdot",
        ),
        pytest.param(
            {"target": {"template": {"data": {"k": "é" * 8193}}}},
            "16 KiB",
            id="S11.1-template-over-16KiB",
        ),
    ],
)
def test_R3_invalid_spec_is_fetch_failed_before_any_read(spec, phrase):
    plan = stopped(only_cr(cr(**spec)))  # nothing else read
    assert_failed(plan, phrase, cause=Cause.SPEC_INVALID)


def test_R3_merge_on_a_typed_target_is_fetch_failed_once_r2_holds_its_finalizer():
    """S1.3.14 re-checked (S1.3.9); R2 first adds the Merge finalizer, as for any Merge CR."""
    the_cr = cr(
        metadata={"finalizers": [MERGE_FINALIZER]},
        target={"name": TARGET, "type": TLS, "creationPolicy": "Merge"},
    )
    assert_failed(
        stopped(only_cr(the_cr)),
        "creationPolicy Merge requires target.type Opaque",
        cause=Cause.SPEC_INVALID,
    )


# -- R4 -----------------------------------------------------------------------------------------


def test_R4_typed_target_with_native_types_disabled_is_refused_and_clears_the_cursor():
    plan = stopped(only_cr(typed_cr(status={"cursor": CURSOR})))
    assert_refused(plan, "Delivery", "False", "NativeSecretTypesDisabled", clears_cursor=True)
    assert TLS in plan.outcome.message


def test_R4_typed_target_with_native_types_enabled_goes_on():
    assert needs(only_cr(typed_cr()), NATIVE) is Read.INSTANCE


def test_R4_opaque_needs_no_native_types():
    assert isinstance(decide(observed()), FetchPlan)


# -- R5 -----------------------------------------------------------------------------------------


def test_R5_missing_instance_fails_never_scrubs_and_reads_no_credential():
    obs = replace(only_cr(), instance=None)
    plan = stopped(obs)
    assert_failed(plan, INSTANCE, "not found", cause=Cause.INSTANCE_MISSING)
    assert "cursor" not in plan.outcome.status  # never scrub, cursor unchanged


def test_R5_a_later_non_forbidden_outcome_removes_unreconciled():
    plan = stopped(replace(only_cr(), instance=None))
    assert "Unreconciled" in plan.outcome.conditions
    assert plan.outcome.conditions["Unreconciled"] is None


# -- R6 (S2.2, S2.3, S2.4) ------------------------------------------------------------------------

OTHER_INSTANCE = {"hikyo.dev/delivery": "true", "hikyo.dev/instance": "secondary"}


@pytest.mark.parametrize(
    ("secret", "reason", "phrase"),
    [
        pytest.param(None, "SecretNotDesignated", "not found", id="secret-missing"),
        pytest.param(
            credential_secret(labels={}),
            "SecretNotDesignated",
            "hikyo.dev/delivery",
            id="no-labels",
        ),
        pytest.param(
            credential_secret(labels={"hikyo.dev/instance": INSTANCE}),
            "SecretNotDesignated",
            "hikyo.dev/delivery",
            id="delivery-label-missing",
        ),
        pytest.param(
            credential_secret(labels={**DESIGNATED, "hikyo.dev/delivery": "yes"}),
            "SecretNotDesignated",
            "hikyo.dev/delivery",
            id="delivery-label-not-true",
        ),
        pytest.param(
            credential_secret(labels={"hikyo.dev/delivery": "true"}),
            "SecretNotDesignated",
            "hikyo.dev/instance",
            id="instance-label-missing",
        ),
        pytest.param(
            credential_secret(labels=OTHER_INSTANCE),
            "InstanceMismatch",
            "secondary",
            id="instance-label-names-another-instance",
        ),
        pytest.param(
            credential_secret(data={}), "SecretNotDesignated", "hikyo-token", id="token-absent"
        ),
        pytest.param(
            credential_secret(data={"hikyo-token": b"\n"}),
            "SecretNotDesignated",
            "empty",
            id="token-empty-after-newline",
        ),
        pytest.param(
            credential_secret(data={"hikyo-token": b"tok en"}),
            "SecretNotDesignated",
            "visible ASCII",
            id="token-malformed-space",
        ),
        pytest.param(
            credential_secret(data={"hikyo-token": "tökén".encode()}),
            "SecretNotDesignated",
            "visible ASCII",
            id="token-malformed-non-ascii",
        ),
        pytest.param(
            credential_secret(data={"hikyo-token": b"abc\n\n"}),
            "SecretNotDesignated",
            "visible ASCII",
            id="token-two-newlines",
        ),
    ],
)
def test_R6_bootstrap_secret_designation_refusals(secret, reason, phrase):
    plan = stopped(replace(only_cr(), instance=instance(), credential_secret=secret))
    assert_refused(plan, "Designation", "False", reason, clears_cursor=False)
    assert phrase in plan.outcome.conditions["Designation"].message


@pytest.mark.parametrize(
    ("raw", "token"),
    [
        pytest.param(b"abc", "abc", id="bare"),
        pytest.param(b"abc\n", "abc", id="one-lf-stripped"),
        pytest.param(b"abc\r\n", "abc", id="one-crlf-stripped"),
    ],
)
def test_R6_bootstrap_token_strips_exactly_one_trailing_newline(raw, token):
    fetch = planned(observed(credential_secret=credential_secret(data={"hikyo-token": raw})))
    assert fetch.token == token


@pytest.mark.parametrize(
    ("account", "designated", "the_instance", "reason", "phrase"),
    [
        pytest.param(
            None, None, instance(), "ServiceAccountNotDesignated", "not found", id="sa-missing"
        ),
        pytest.param(
            service_account(labels={}),
            None,
            instance(),
            "ServiceAccountNotDesignated",
            "hikyo.dev/delivery",
            id="sa-unlabelled",
        ),
        pytest.param(
            service_account(labels={"hikyo.dev/delivery": "true"}),
            None,
            instance(),
            "ServiceAccountNotDesignated",
            "hikyo.dev/instance",
            id="sa-instance-label-missing",
        ),
        pytest.param(
            service_account(labels=OTHER_INSTANCE),
            None,
            instance(),
            "InstanceMismatch",
            "secondary",
            id="sa-labelled-for-another-instance",
        ),
        pytest.param(
            service_account(),
            {NS: ("someone-else",)},
            instance(),
            "ServiceAccountNotDesignated",
            "designatedServiceAccounts",
            id="sa-not-in-the-configured-list",
        ),
        pytest.param(
            service_account(),
            {},
            instance(),
            "ServiceAccountNotDesignated",
            "designatedServiceAccounts",
            id="sa-configured-list-empty",
        ),
        pytest.param(
            service_account(),
            {"team-b": (SA,)},
            instance(),
            "ServiceAccountNotDesignated",
            "designatedServiceAccounts",
            id="sa-listed-for-another-namespace-only",
        ),
        pytest.param(
            service_account(),
            None,
            instance(audience=None),
            "AudienceMissing",
            "audience",
            id="instance-without-audience",
        ),
        pytest.param(
            service_account(),
            None,
            instance(audience=""),
            "AudienceMissing",
            "audience",
            id="instance-with-empty-audience",
        ),
    ],
)
def test_R6_service_account_refusals_come_before_any_token_request(
    account, designated, the_instance, reason, phrase
):
    settings = replace(SETTINGS, designated_service_accounts=designated)
    obs = replace(only_cr(sa_cr()), instance=the_instance, service_account=account)
    assert obs.token is UNREAD
    plan = stopped(obs, settings)  # no Needs(TOKEN): refused before the TokenRequest
    assert_refused(plan, "Designation", "False", reason, clears_cursor=False)
    assert phrase in plan.outcome.conditions["Designation"].message


def test_R6_a_designated_listed_service_account_asks_for_the_token_request():
    settings = replace(SETTINGS, designated_service_accounts={NS: ("x", SA)})
    obs = replace(only_cr(sa_cr()), instance=instance(), service_account=service_account())
    assert needs(obs, settings) is Read.TOKEN


def test_R6_S2_4_token_request_failure_is_fetch_failed_not_namespace_not_bound():
    obs = replace(observed(sa_cr()), token=None, token_error="serviceaccounts/token is forbidden")
    plan = stopped(obs)
    assert_failed(plan, "TokenRequest", SA, "forbidden", cause=Cause.TOKEN_REQUEST)
    assert "Unreconciled" not in {k for k, v in plan.outcome.conditions.items() if v is not None}


def test_R6_federated_token_is_the_fetch_bearer_and_the_sa_identity_feeds_the_binding():
    the_cr = sa_cr()
    fetch = planned(observed(the_cr))
    assert fetch.token == TOKEN
    assert fetch.binding == binding_for(the_cr, identity=(SA_UID, SA_RV))


def test_R6_the_bootstrap_secrets_identity_feeds_the_binding():
    the_cr = cr()
    fetch = planned(observed(the_cr))
    assert fetch.binding == binding_for(the_cr, identity=(CREDENTIAL_UID, CREDENTIAL_RV))


def test_R6_success_removes_designation():
    fetch = planned(observed())
    assert "Designation" in fetch.passed
    # a stop after R6 removes it too
    plan = stopped(observed(claimants=[claimant("older", "uid-z", "2024-01-01T00:00:00Z")]))
    assert "Designation" in plan.outcome.conditions
    assert plan.outcome.conditions["Designation"] is None


def test_R6_a_refusal_leaves_later_conditions_as_they_are():
    plan = stopped(replace(only_cr(), instance=instance(), credential_secret=None))
    assert "Conflict" not in plan.outcome.conditions  # S5.4: not reached, kept
    assert plan.outcome.conditions["Unreconciled"] is None


# -- R7 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("others", "winner"),
    [
        pytest.param(
            [claimant("older", "uid-z", "2025-01-01T00:00:00Z")], "older", id="earliest-wins"
        ),
        pytest.param([claimant("tie-low", "uid-a")], "tie-low", id="tie-lowest-uid-wins"),
        pytest.param(
            [
                claimant("newer", "uid-b", "2025-03-01T00:00:00Z"),
                claimant("oldest", "uid-y", "2024-06-01T00:00:00Z"),
                claimant("older", "uid-a", "2024-12-01T00:00:00Z"),
            ],
            "oldest",
            id="earliest-of-many",
        ),
    ],
)
def test_R7_loser_is_refused_naming_the_winner_before_reading_the_target(others, winner):
    obs = replace(observed(), claimants=[observed().cr, *others], target=UNREAD)
    plan = stopped(obs)
    assert_refused(plan, "Conflict", "True", "TargetClaimed", clears_cursor=False)
    message = plan.outcome.conditions["Conflict"].message
    assert f"HikyoSecret {winner}" in message and TARGET in message


@pytest.mark.parametrize(
    "others",
    [
        pytest.param([], id="alone"),
        pytest.param([claimant("newer", "uid-a", "2025-02-01T00:00:00Z")], id="we-are-earliest"),
        pytest.param([claimant("tie-high", "uid-z")], id="tie-we-have-the-lower-uid"),
        pytest.param(
            [claimant("older-deleting", "uid-a", "2024-01-01T00:00:00Z", deleting=True)],
            id="deleting-claimant-ignored",
        ),
    ],
)
def test_R7_winner_goes_on_to_read_the_target(others):
    the_cr = cr()
    obs = replace(observed(the_cr), claimants=[the_cr, *others], target=UNREAD)
    assert needs(obs) is Read.TARGET


def test_R7_our_cr_missing_from_a_lagging_list_still_counts():
    obs = replace(observed(), claimants=[claimant("newer", "uid-a", "2025-02-01T00:00:00Z")])
    assert isinstance(decide(obs), FetchPlan)
    obs = replace(observed(), claimants=[claimant("older", "uid-z", "2024-02-01T00:00:00Z")])
    assert stopped(obs).outcome.reason == "TargetClaimed"


# -- R8, R9 -------------------------------------------------------------------------------------


def _foreign_target(**kw: Any) -> SecretObject:
    return SecretObject(NS, TARGET, data={"X": b"1"}, uid="t", resource_version="1", **kw)


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(_foreign_target(), id="no-owner-references"),
        pytest.param(_foreign_target(owner_references=[owner_ref("uid-other")]), id="other-cr"),
        pytest.param(
            _foreign_target(owner_references=[owner_ref(controller=False)]),
            id="our-uid-not-controller",
        ),
        pytest.param(
            _foreign_target(owner_references=[owner_ref(kind="Deployment")]), id="other-kind"
        ),
        pytest.param(
            _foreign_target(owner_references=[owner_ref(api_version="apps/v1")]),
            id="other-group",
        ),
    ],
)
def test_R8_existing_target_not_controlled_is_never_adopted(target):
    plan = stopped(observed(target=target, stamp_root=UNREAD))  # stops before the stamp root
    assert_refused(plan, "Conflict", "True", "ManagedSecretNotOwned", clears_cursor=False)
    assert TARGET in plan.outcome.message
    assert plan.outcome.conditions["Designation"] is None  # R6 passed


def test_R9_controlled_target_of_another_type_is_never_recreated():
    target = controlled_target(secret_type=TLS)
    plan = stopped(observed(target=target))
    assert_refused(plan, "Conflict", "True", "TargetTypeImmutable", clears_cursor=False)
    assert TLS in plan.outcome.message and "Opaque" in plan.outcome.message


def test_R7_R9_passing_removes_conflict():
    fetch = planned(observed(target=controlled_target()))
    assert "Conflict" in fetch.passed


# -- R10, R11 -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret_type", "mapping", "phrase"),
    [
        pytest.param(TLS, [{"key": "C", "secretKey": "tls.crt"}], "tls.key", id="tls-without-key"),
        pytest.param(
            "kubernetes.io/dockerconfigjson", [{"key": "X"}], ".dockerconfigjson", id="docker"
        ),
        pytest.param(
            "kubernetes.io/ssh-auth", [{"key": "X"}], "ssh-privatekey", id="ssh-without-key"
        ),
        pytest.param(
            "kubernetes.io/basic-auth",
            [{"key": "X", "secretKey": "token"}],
            "username or password",
            id="basic-auth-neither",
        ),
    ],
)
def test_R10_typed_target_lacking_a_required_destination_is_keys_missing(
    secret_type, mapping, phrase
):
    the_cr = typed_cr(secret_type, mapping, status={"cursor": CURSOR})
    plan = stopped(observed(the_cr, stamp_root=UNREAD), NATIVE)
    assert_refused(plan, "Delivery", "False", "KeysMissing", clears_cursor=True)
    assert phrase in plan.outcome.message
    assert plan.outcome.conditions["Conflict"] is None  # R7-R9 passed


@pytest.mark.parametrize(
    "mapping",
    [
        pytest.param([{"key": "U", "secretKey": "username"}], id="basic-auth-username-only"),
        pytest.param([{"key": "P", "secretKey": "password"}], id="basic-auth-password-only"),
    ],
)
def test_R10_basic_auth_needs_one_of_username_or_password(mapping):
    the_cr = typed_cr("kubernetes.io/basic-auth", mapping)
    assert isinstance(decide(observed(the_cr), NATIVE), FetchPlan)


@pytest.mark.parametrize(
    ("spec", "phrase"),
    [
        pytest.param(
            {"mapping": [{"key": "PATH"}]}, "mapped but not acknowledged: PATH", id="unacknowledged"
        ),
        pytest.param(
            {"mapping": [{"key": "A", "secretKey": "LD_PRELOAD"}]},
            "LD_PRELOAD",
            id="protected-by-destination-prefix",
        ),
        pytest.param(
            {"acknowledgedLoaderKeys": ["PATH"]},
            "acknowledged but not mapped: PATH",
            id="extra-acknowledgement",
        ),
        pytest.param(
            {"mapping": [{"key": "PATH"}], "acknowledgedLoaderKeys": ["PATH", "PATH"]},
            "more than once",
            id="duplicate",
        ),
        pytest.param(
            {"allKeys": True, "mapping": DELETE, "acknowledgedLoaderKeys": ["LD_*"]},
            "wildcards",
            id="all-keys-wildcard",
        ),
    ],
)
def test_R11_loader_control_precheck_refuses_before_the_fetch(spec, phrase):
    plan = stopped(observed(cr(status={"cursor": CURSOR}, **spec), stamp_root=UNREAD))
    assert_refused(plan, "Delivery", "False", "LoaderControlUnacknowledged", clears_cursor=True)
    assert phrase in plan.outcome.message


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(
            {"mapping": [{"key": "PATH"}], "acknowledgedLoaderKeys": ["PATH"]}, id="exact"
        ),
        pytest.param(
            {"mapping": [{"key": "GITHUB_TOKEN"}, {"key": "LDAP_URL"}]}, id="lookalikes-unprotected"
        ),
        pytest.param(
            {"allKeys": True, "mapping": DELETE, "acknowledgedLoaderKeys": ["LD_PRELOAD"]},
            id="all-keys-absent-acknowledged-ok",
        ),
    ],
)
def test_R11_exact_acknowledgement_goes_on(spec):
    assert isinstance(decide(observed(cr(**spec))), FetchPlan)


def test_R11_applies_to_typed_targets_too():
    the_cr = typed_cr(mapping=[*TLS_MAPPING, {"key": "PATH"}])
    plan = stopped(observed(the_cr), NATIVE)
    assert plan.outcome.reason == "LoaderControlUnacknowledged"


# -- R12 (S6.3) ---------------------------------------------------------------------------------


def test_R12_missing_root_with_a_stamped_cr_in_reach_fails_naming_the_remedy():
    obs = observed(stamp_root=None, fresh_root=FRESH_ROOT, reach=[stamped_cr()], not_found=UNREAD)
    plan = stopped(obs)
    assert_failed(
        plan,
        "stamp root missing",
        "HIKYO_OPERATOR_ALLOW_STAMP_ROOT_RESET=true",
        cause=Cause.STAMP_ROOT,
    )


def test_R12_missing_root_asks_for_the_reach_before_anything_later():
    obs = observed(stamp_root=None, fresh_root=FRESH_ROOT, not_found=UNREAD)
    assert needs(obs) is Read.REACH


@pytest.mark.parametrize(
    "reach",
    [
        pytest.param([], id="nothing-in-reach"),
        pytest.param(
            [{"metadata": {"namespace": "team-b", "name": "x"}, "status": {}}], id="unstamped-only"
        ),
        pytest.param([stamped_cr(namespace=OP_NS)], id="stamped-only-in-operator-namespace"),
    ],
)
def test_R12_missing_root_is_created_when_nothing_in_reach_is_stamped(reach):
    fetch = planned(observed(stamp_root=None, fresh_root=FRESH_ROOT, reach=reach))
    assert fetch.stamp_root == FRESH_ROOT
    assert fetch.key == key_for(FRESH_ROOT)


def test_R12_allow_stamp_root_reset_creates_it_without_listing_the_reach():
    settings = replace(SETTINGS, allow_stamp_root_reset=True)
    obs = observed(stamp_root=None, fresh_root=FRESH_ROOT)
    assert obs.reach is UNREAD
    fetch = planned(obs, settings)
    assert fetch.stamp_root == FRESH_ROOT
    assert fetch.key == key_for(FRESH_ROOT)


def test_R12_an_existing_root_is_used_and_not_recreated():
    fetch = planned(observed())
    assert fetch.stamp_root is None
    assert fetch.key == key_for(ROOT)


@pytest.mark.parametrize(
    "root",
    [
        pytest.param(ROOT[:16], id="16-bytes"),
        pytest.param(ROOT + b"x", id="33-bytes"),
        pytest.param(b"", id="empty"),
        pytest.param(None, id="root-key-absent"),
    ],
)
def test_R12_a_root_of_the_wrong_length_is_refused_never_replaced(root):
    plan = stopped(observed(stamp_root=root_secret(root), not_found=UNREAD))
    assert_failed(plan, "32", cause=Cause.STAMP_ROOT)


# -- R13 (S4.3) ---------------------------------------------------------------------------------


def _eligible(**status_changes: Any):
    """Target controlled, status consistent: S4.3.1 (1)-(5) hold unless changed."""
    target = controlled_target()
    the_cr = cr()
    status = eligible_status(the_cr, target) | status_changes
    return observed(with_status(the_cr, status), target=target)


def test_R13_cursor_is_presented_when_all_S4_3_1_conditions_hold():
    fetch = planned(_eligible())
    assert fetch.cursor == CURSOR
    assert fetch.store == ()


def _withheld_cases():
    target = controlled_target()
    status = eligible_status(cr(), target)

    def world(*, status_changes=None, spec=None, **fields):
        the_cr = with_status(cr(**(spec or {})), status | (status_changes or {}))
        return observed(the_cr, **{"target": target, **fields})

    edited = controlled_target({**target.data, "log-level": b"debug"})
    added = controlled_target({**target.data, "extra": b"x"})
    recreated = {**instance(), "metadata": {"name": INSTANCE, "uid": "inst-uid-2"}}
    cases = {
        "1-no-stored-cursor": world(status_changes={"cursor": None}),
        "1-empty-stored-cursor": world(status_changes={"cursor": ""}),
        "2-target-absent": world(target=None),
        "3-target-edited-stamp-differs": world(target=edited),
        "3-hand-added-key-counts": world(target=added),
        "3-stored-stamp-differs": world(status_changes={"stamp": "v1:0123"}),
        "3-no-stored-stamp": world(status_changes={"stamp": None}),
        "4-stored-binding-differs": world(status_changes={"cursorBinding": "f" * 64}),
        "4-credential-rotated": world(credential_secret=credential_secret(resource_version="8")),
        "4-instance-recreated": world(instance=recreated),
        "4-projection-changed": world(spec={"projection": "config-only"}),
        "4-mapping-changed": world(spec={"mapping": [{"key": "DATABASE_URL"}]}),
        "4-acknowledgement-changed": world(
            spec={"mapping": [{"key": "PATH"}], "acknowledgedLoaderKeys": ["PATH"]}
        ),
        "5-forced-full": replace(world(), forced_full=True),
        "5-pending-404-record": world(not_found=(binding_for(cr()), NOW.wall - 5)),
    }
    return [pytest.param(obs, id=name) for name, obs in cases.items()]


@pytest.mark.parametrize("obs", _withheld_cases())
def test_R13_cursor_is_withheld_unless_every_condition_holds(obs):
    fetch = planned(obs)
    assert fetch.cursor is None
    assert fetch.store == ()  # a record under the same binding is kept (S4.10.0)


def test_R13_a_force_sync_value_withholds_the_cursor_once():
    """A new hikyo.dev/force-sync value asks for one cursor-less fetch; once
    status.lastForcedSync records that value handled, the cursor is presented again."""
    target = controlled_target()
    asked = cr(metadata={"annotations": {FORCE_SYNC_ANNOTATION: "req-7"}})
    status = eligible_status(cr(), target)
    assert planned(observed(with_status(asked, status), target=target)).cursor is None
    handled = status | {"lastForcedSync": {"value": "req-7", "reason": "Delivered"}}
    assert planned(observed(with_status(asked, handled), target=target)).cursor == CURSOR


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"resyncInterval": "10m"}, id="resync-interval"),
        pytest.param(
            {
                "target": {"name": TARGET, "creationPolicy": "Orphan"},
                "metadata": {"finalizers": [ORPHAN_FINALIZER]},
            },
            id="creation-policy",
        ),
        pytest.param({"metadata": {"labels": {"team": "a"}}}, id="cr-labels"),
    ],
)
def test_R13_S4_3_3_changes_that_do_not_invalidate_the_cursor(change):
    target = controlled_target()
    the_cr = cr(
        metadata=change.get("metadata"), **{k: v for k, v in change.items() if k != "metadata"}
    )
    the_cr = with_status(the_cr, eligible_status(cr(), target))
    assert planned(observed(the_cr, target=target)).cursor == CURSOR


def test_R13_a_404_record_under_another_binding_is_discarded():
    obs = replace(_eligible(), not_found=("0" * 64, NOW.wall - 5))
    fetch = planned(obs)
    assert fetch.store == (StoreNote("clear_not_found", CR_UID),)
    assert fetch.cursor == CURSOR  # nothing pending any more


def test_R13_the_binding_and_key_follow_the_spec():
    the_cr = cr()
    fetch = planned(observed(the_cr))
    assert fetch.binding == binding_for(the_cr)
    assert fetch.key == key_for()
    assert fetch.instance_uid == INSTANCE_UID
    assert fetch.target is None
    assert fetch.spec.name == CR_NAME and fetch.spec.target_name == TARGET


# -- R14 ----------------------------------------------------------------------------------------


def test_R14_an_invalid_server_is_fetch_failed_naming_the_instance():
    obs = observed(server=None, server_error="invalid base URL: scheme must be https")
    plan = stopped(obs, ROLLOUTS)
    assert_failed(plan, f"HikyoInstance {INSTANCE}", "scheme must be https", cause=Cause.NO_CLIENT)
    assert "cursor" not in plan.outcome.status


def test_R14_an_invalid_server_still_discards_a_404_record_under_another_binding():
    obs = observed(server=None, server_error="invalid base URL", not_found=("0" * 64, NOW.wall))
    plan = stopped(obs, ROLLOUTS)
    assert plan.step == "R14"
    assert plan.store == (StoreNote("clear_not_found", CR_UID),)
    assert stopped(replace(obs, not_found=None), ROLLOUTS).store == ()


def test_R14_an_invalid_server_stops_before_the_workloads_are_read():
    obs = observed(server=None, server_error="invalid base URL", workloads=UNREAD)
    assert stopped(obs, ROLLOUTS).step == "R14"


def test_R14_passed_then_workloads_are_read_only_with_trigger_rollouts():
    assert needs(observed(workloads=UNREAD), ROLLOUTS) is Read.WORKLOADS
    assert isinstance(decide(observed(workloads=UNREAD), SETTINGS), FetchPlan)


def test_R14_the_fetch_plan_carries_the_passed_steps():
    fetch = planned(observed(), ROLLOUTS)
    assert fetch.passed == ("Unreconciled", "Designation", "Conflict")


# -- S4.15 --------------------------------------------------------------------------------------

FORBIDDEN_AT = [
    pytest.param(
        {"credential_secret": UNREAD}, ForbiddenRead("get", "secrets"), id="credential-secret"
    ),
    pytest.param({"claimants": UNREAD}, ForbiddenRead("list", "hikyosecrets"), id="cr-list"),
    pytest.param({"target": UNREAD}, ForbiddenRead("get", "secrets"), id="target"),
    pytest.param({"stamp_root": UNREAD}, ForbiddenRead("get", "secrets"), id="stamp-root"),
    pytest.param(
        {"stamp_root": None, "reach": UNREAD},
        ForbiddenRead("list", "hikyosecrets"),
        id="stamp-root-reach",
    ),
    pytest.param({"workloads": UNREAD}, ForbiddenRead("list", "deployments"), id="workloads"),
]


@pytest.mark.parametrize(("unread", "forbidden"), FORBIDDEN_AT)
def test_S4_15_forbidden_read_without_rbac_is_namespace_not_bound(unread, forbidden):
    obs = observed(cr(status={"cursor": CURSOR}), forbidden=forbidden, **unread)
    plan = stopped(obs, ROLLOUTS)
    outcome = plan.outcome
    condition = outcome.conditions["Unreconciled"]
    assert (condition.status, condition.reason) == ("True", "NamespaceNotBound")
    assert outcome.reason == "NamespaceNotBound"
    assert outcome.lifecycle == "Unreconciled"
    assert outcome.requeue is Requeue.BACKOFF
    assert [(e.type, e.reason) for e in outcome.events] == [("Warning", "NamespaceNotBound")]
    assert forbidden.resource in condition.message and NS in condition.message
    assert plan.secret is None


@pytest.mark.parametrize(("unread", "forbidden"), FORBIDDEN_AT)
def test_S4_15_forbidden_by_admission_or_quota_is_fetch_failed(unread, forbidden):
    allowed = replace(forbidden, allowed=True)
    plan = stopped(observed(forbidden=allowed, **unread), ROLLOUTS)
    assert_failed(
        plan,
        "forbidden by admission or quota",
        forbidden.resource,
        forbidden.verb,
        cause=Cause.ADMISSION,
    )


@pytest.mark.parametrize(("unread", "forbidden"), FORBIDDEN_AT)
def test_S4_15_namespace_terminating_stops_without_write_event_or_requeue(unread, forbidden):
    terminating = replace(forbidden, namespace_terminating=True)
    plan = stopped(observed(forbidden=terminating, **unread), ROLLOUTS)
    assert_quiet(plan, "NamespaceTerminating")
    assert plan.outcome.requeue is Requeue.NONE


def test_S4_15_forbidden_outcome_names_the_resource_kind():
    outcome = forbidden_outcome(ForbiddenRead("create", "secrets"), NS)
    assert "secrets" in outcome.message and "create" in outcome.message
    assert outcome.conditions["Unreconciled"].reason == "NamespaceNotBound"
