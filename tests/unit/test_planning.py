"""Pure planning pieces: spec re-validation (S1.3.9), loader-control pre-check (S4.6.2), Ready
(S5.2), condition bookkeeping (S5.4), no-op status (S4.17), binding (S4.3), credentials (S2.2)."""

from __future__ import annotations

import pytest

from tests.support.factories import DELETE, make_hikyosecret
from workers.engine.binding import CredentialIdentity, binding_digest, cursor_to_present
from workers.engine.conditions import Condition, merge_conditions, ready_condition
from workers.engine.credentials import TokenMalformed, bootstrap_token, designation_problem
from workers.engine.loader_control import precheck
from workers.engine.messages import key_list
from workers.engine.outcome import Outcome, Requeue
from workers.engine.spec import SpecInvalid, parse_spec
from workers.engine.status import desired_status, status_differs


def _cr(**spec):
    cr = make_hikyosecret("app", namespace="ns", **spec)
    cr["metadata"].update(uid="uid-1", generation=3)
    return cr


# --- S1.3.9 ---------------------------------------------------------------------------------


def test_spec_defaults_like_the_crd():
    spec = parse_spec(_cr())
    assert (spec.projection, spec.target_type, spec.creation_policy) == ("full", "Opaque", "Owner")
    assert spec.resync_seconds == 300
    assert [(m.key, m.secret_key) for m in spec.mapping] == [
        ("DATABASE_URL", "DATABASE_URL"),
        ("LOG_LEVEL", "log-level"),
    ]


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        pytest.param({"resyncInterval": "5s"}, "resyncInterval", id="resync-floor"),
        pytest.param({"resyncInterval": "9999999999h"}, "resyncInterval", id="resync-overflow"),
        pytest.param({"allKeys": True}, "allKeys", id="both-modes"),
        pytest.param({"mapping": []}, "allKeys", id="neither-mode"),
        pytest.param(
            {"allKeys": True, "mapping": DELETE, "target": {"type": "kubernetes.io/tls"}},
            "Opaque",
            id="all-keys-typed",
        ),
        pytest.param(
            {"target": {"type": "kubernetes.io/service-account-token"}},
            "target.type",
            id="unknown-type",
        ),
        pytest.param(
            {"mapping": [{"key": "A"}, {"key": "B", "secretKey": "A"}]},
            "twice",
            id="duplicate-destination",
        ),
        pytest.param(
            {"mapping": [{"key": "A", "secretKey": "..x"}]}, "secretKey", id="dotdot-destination"
        ),
        pytest.param({"scope": {"org": "acme"}}, "scope.org", id="scope-grammar"),
        pytest.param({"auth": {"serviceAccountRef": {"name": "b"}}}, "exactly one", id="auth"),
    ],
)
def test_spec_admitted_under_an_older_crd_is_refused(spec, named):
    with pytest.raises(SpecInvalid) as caught:
        parse_spec(_cr(**spec))
    assert named in str(caught.value)


# --- S4.6.2 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("acknowledged", "protected", "fragments"),
    [
        pytest.param([], [], None, id="nothing-protected"),
        pytest.param(["PATH"], ["PATH"], None, id="exact"),
        pytest.param([], ["PATH"], ["mapped but not acknowledged: PATH"], id="unacknowledged"),
        pytest.param(
            ["PATH", "GIT_SSH"], ["PATH"], ["acknowledged but not mapped: GIT_SSH"], id="extra"
        ),
        pytest.param(["LD_*"], None, ["wildcards"], id="wildcard-all-keys"),
        pytest.param(["HOME"], None, ["not protected"], id="unprotected-all-keys"),
        pytest.param(["PATH", "PATH"], ["PATH"], ["more than once"], id="duplicate"),
        pytest.param(["LD_PRELOAD"], None, None, id="absent-ok-in-all-keys"),
        pytest.param(
            [f"LD_{i}" for i in range(65)],
            [f"LD_{i}" for i in range(65)],
            ["limit of 64"],
            id="over-the-limit",
        ),
    ],
)
def test_loader_control_precheck(acknowledged, protected, fragments):
    problem = precheck(acknowledged, protected)
    if fragments is None:
        assert problem is None
    else:
        for fragment in fragments:
            assert fragment in problem


def test_key_lists_are_sorted_and_capped():
    assert key_list(["B", "A", "B"]) == "A, B"
    names = [f"K{i:02}" for i in range(13)]
    assert key_list(names) == ", ".join(names[:10]) + " … and 3 more"


# --- S5.2, S5.4 -----------------------------------------------------------------------------


def _c(type_, status, reason):
    return {"type": type_, "status": status, "reason": reason}


@pytest.mark.parametrize(
    ("conditions", "lifecycle", "ready", "blocker"),
    [
        pytest.param([_c("Synced", "True", "Delivered")], "Synced", True, "", id="ready"),
        pytest.param(
            [
                _c("Synced", "True", "Current"),
                _c("Rollout", "False", "Stalled"),
                _c("Delivery", "True", "EnvFromSkip"),
                _c("CredentialExpiry", "True", "Expired"),
            ],
            "Synced",
            True,
            "",
            id="non-blocking",
        ),
        pytest.param(
            [_c("Synced", "True", "Delivered"), _c("Delivery", "False", "KeysMissing")],
            "Synced",
            True,
            "",
            id="post-converge-keys-missing",
        ),
        pytest.param(
            [_c("Synced", "True", "Delivered"), _c("Delivery", "False", "KeysMissing")],
            "Refused",
            False,
            "Delivery/KeysMissing",
            id="r10-keys-missing",
        ),
        pytest.param([], "Synced", False, "Synced/absent", id="no-synced"),
        pytest.param(
            [_c("Synced", "False", "FetchFailed")],
            "Retained",
            False,
            "Synced/FetchFailed",
            id="failed",
        ),
        pytest.param(
            [
                _c("Synced", "True", "Delivered"),
                _c("Conflict", "True", "TargetClaimed"),
                _c("Designation", "False", "InstanceMismatch"),
                _c("Unreconciled", "True", "NamespaceNotBound"),
            ],
            "Refused",
            False,
            "Unreconciled/NamespaceNotBound",
            id="order-unreconciled-first",
        ),
        pytest.param(
            [
                _c("Synced", "True", "Delivered"),
                _c("Conflict", "True", "TargetClaimed"),
                _c("Designation", "False", "InstanceMismatch"),
            ],
            "Refused",
            False,
            "Designation/InstanceMismatch",
            id="designation-before-conflict",
        ),
        pytest.param(
            [_c("Synced", "True", "Delivered"), _c("Delivery", "False", "UndeliveredSecrets")],
            "Refused",
            False,
            "Delivery/UndeliveredSecrets",
            id="blocking-delivery",
        ),
    ],
)
def test_ready_rule(conditions, lifecycle, ready, blocker):
    condition = ready_condition({c["type"]: c for c in conditions}, lifecycle)
    assert (condition.status == "True") is ready
    assert condition.message == ("delivered and current" if ready else f"not ready: {blocker}")


def test_unlisted_reason_is_a_bug():
    with pytest.raises(ValueError):
        Condition("Synced", "True", "Fine", "")


def test_transition_time_moves_only_on_status_change():
    stored = merge_conditions(
        [],
        {"Synced": Condition("Synced", "True", "Delivered", "m")},
        lifecycle="Synced",
        generation=1,
        now="t1",
    )
    again = merge_conditions(
        stored,
        {"Synced": Condition("Synced", "True", "Current", "m2")},
        lifecycle="Synced",
        generation=2,
        now="t2",
    )
    synced = next(c for c in again if c["type"] == "Synced")
    assert synced["lastTransitionTime"] == "t1" and synced["observedGeneration"] == 2
    failed = merge_conditions(
        again,
        {"Synced": Condition("Synced", "False", "FetchFailed", "x")},
        lifecycle="Retained",
        generation=2,
        now="t3",
    )
    assert next(c for c in failed if c["type"] == "Synced")["lastTransitionTime"] == "t3"
    assert [c["type"] for c in failed] == ["Ready", "Synced"]


def test_unchanged_outcome_is_not_a_status_change():
    """S4.17: same conditions and fields ⇒ no write, whatever the clock says."""
    outcome = Outcome(
        "Current",
        Requeue.RESYNC,
        lifecycle="Synced",
        conditions={"Synced": Condition("Synced", "True", "Current", "m")},
    )
    first = desired_status({}, outcome, generation=1, now="t1", operator_namespace="op")
    second = desired_status(first, outcome, generation=1, now="t2", operator_namespace="op")
    assert not status_differs(first, second)
    assert status_differs(
        first, desired_status(first, outcome, generation=2, now="t2", operator_namespace="op")
    )
    with_fetch = {**first, "lastFetch": "t9"}
    assert not status_differs(with_fetch, second)


def test_a_condition_stored_without_its_facts_is_written_once_more_with_them():
    """The facts are part of the condition S4.17 compares: a condition an older operator
    stored without them is rewritten once (the remediation needs them); then no more."""
    missing = Condition("Delivery", "False", "KeysMissing", "m", {"keys": "A, B"})
    outcome = Outcome(
        "Delivered",
        Requeue.RESYNC,
        lifecycle="Synced",
        conditions={
            "Synced": Condition("Synced", "True", "Delivered", "d"),
            "Delivery": missing,
        },
    )
    with_facts = desired_status({}, outcome, generation=1, now="t1", operator_namespace="op")
    older = {
        **with_facts,
        "conditions": [
            {k: v for k, v in c.items() if k != "facts"} for c in with_facts["conditions"]
        ],
    }
    again = desired_status(older, outcome, generation=1, now="t2", operator_namespace="op")
    assert status_differs(older, again)
    delivery = next(c for c in again["conditions"] if c["type"] == "Delivery")
    assert delivery["facts"] == {"keys": "A, B"}
    assert not status_differs(
        again, desired_status(again, outcome, generation=1, now="t3", operator_namespace="op")
    )


# --- S4.3 -------------------------------------------------------------------------------------


def _binding(**spec):
    return binding_digest(parse_spec(_cr(**spec)), CredentialIdentity("cred", "7"), "inst")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"projection": "config-only"}, id="projection"),
        pytest.param({"mapping": [{"key": "DATABASE_URL"}]}, id="mapping"),
        pytest.param(
            {"acknowledgedLoaderKeys": ["PATH"], "mapping": [{"key": "PATH"}]}, id="acknowledgement"
        ),
        pytest.param(
            {
                "target": {"type": "kubernetes.io/basic-auth"},
                "mapping": [{"key": "U", "secretKey": "username"}],
            },
            id="type",
        ),
        pytest.param(
            {"scope": {"environment": "env_01900000-0000-7000-8000-000000000009"}}, id="environment"
        ),
    ],
)
def test_binding_covers(change):
    assert _binding(**change) != _binding()


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"resyncInterval": "1h"}, id="resync"),
        pytest.param({"target": {"creationPolicy": "Orphan"}}, id="creation-policy"),
    ],
)
def test_binding_ignores(change):
    assert _binding(**change) == _binding()


def test_binding_covers_credential_and_instance():
    spec = parse_spec(_cr())
    base = binding_digest(spec, CredentialIdentity("cred", "7"), "inst")
    assert binding_digest(spec, CredentialIdentity("cred", "8"), "inst") != base
    assert binding_digest(spec, CredentialIdentity("cred2", "7"), "inst") != base
    assert binding_digest(spec, CredentialIdentity("cred", "7"), "inst2") != base


def test_cursor_only_when_all_five_hold():
    good = dict(
        stored_cursor="c",
        target_controlled=True,
        target_stamp="s",
        stored_stamp="s",
        binding="b",
        stored_binding="b",
        forced_full=False,
    )
    assert cursor_to_present(**good) == "c"
    for change in (
        {"stored_cursor": ""},
        {"target_controlled": False},
        {"target_stamp": "x"},
        {"stored_binding": "x"},
        {"forced_full": True},
    ):
        assert cursor_to_present(**{**good, **change}) is None


# --- S2.2 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "token"),
    [(b"hik_abc", "hik_abc"), (b"hik_abc\n", "hik_abc"), (b"hik_abc\r\n", "hik_abc")],
)
def test_token_strips_one_trailing_newline(raw, token):
    assert bootstrap_token({"hikyo-token": raw}) == token


@pytest.mark.parametrize("raw", [b"", b"\n", b"a\n\n", b"a b", b"\xc3\xa9", b"a\tb", None])
def test_malformed_token(raw):
    data = {} if raw is None else {"hikyo-token": raw}
    with pytest.raises(TokenMalformed) as caught:
        bootstrap_token(data)
    if raw:
        assert raw.decode(errors="replace") not in str(caught.value)


def test_designation_needs_both_labels_exactly():
    ok = {"hikyo.dev/delivery": "true", "hikyo.dev/instance": "primary"}
    assert designation_problem("Secret", "s", ok, "primary", "SecretNotDesignated") is None
    assert (
        designation_problem(
            "Secret", "s", {**ok, "hikyo.dev/delivery": "True"}, "primary", "SecretNotDesignated"
        ).reason
        == "SecretNotDesignated"
    )
    assert designation_problem("Secret", "s", ok, "other", "SecretNotDesignated").reason == (
        "InstanceMismatch"
    )
