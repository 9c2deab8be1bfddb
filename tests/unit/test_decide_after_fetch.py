"""S4.2 steps R15-R16 on plain data: ``decide_after_fetch`` turns the fetch's answer (or the gate
that kept it from being made) into the plan ``apply`` executes: S4.4-S4.13, S4.10 and S6.4-S6.5.
The ``settle_*`` folds of what only the writes can tell are checked on those plans.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.support.factories import DELETE, ORG
from tests.unit.decide_fixtures import (
    CR_UID,
    CURSOR,
    DEFAULT_DATA,
    FRESH_ROOT,
    INSTANCE_UID,
    NATIVE,
    NEW_CURSOR,
    NOT_FOUND,
    NOW,
    ROLLOUTS,
    SETTINGS,
    TARGET,
    TLS,
    TLS_MAPPING,
    VALUE,
    answer,
    answered,
    binding_for,
    controlled_target,
    cr,
    days,
    delivery,
    dk,
    eligible_status,
    key_for,
    observed,
    planned,
    sa_cr,
    scrubbed_condition,
    typed_cr,
    with_status,
    workload,
)
from workers.engine.conditions import merge_conditions
from workers.engine.decide_after_fetch import (
    NotAFetch,
    decide_after_fetch,
    secret_write_failed,
    settle_secret,
)
from workers.engine.decide_rollout import settle_rollout
from workers.engine.expiry import rfc3339
from workers.engine.facts import Cause
from workers.engine.fetched import TLS_VERIFICATION_FAILED, FetchOutcome
from workers.engine.outcome import Requeue
from workers.engine.pacing import (
    MAX_PAUSE,
    PROBE_INTERVAL_SECONDS,
    RESUME_WINDOW,
    resume_delay_while_paused,
)
from workers.engine.plan import FetchAttempt, Gate, StoreNote
from workers.engine.ports import SecretObject
from workers.engine.stamp import compute_stamp, empty_content_stamp

NEW_STAMP = compute_stamp(key_for(), DEFAULT_DATA)
EMPTY_STAMP = empty_content_stamp(key_for())
PASSED = ("Unreconciled", "Designation", "Conflict")


def _events(outcome) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in outcome.events]


def _condition(outcome, type_: str) -> tuple[str, str] | None:
    found = outcome.conditions.get(type_)
    return None if found is None else (found.status, found.reason)


def _notes(plan, op: str) -> list[StoreNote]:
    return [note for note in plan.store if note.op == op]


# -- R15: gates (S4.1.6) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gate", "wait", "reason"),
    [
        pytest.param(Gate.PAUSED, 12.0, "InstancePaused", id="paused-after-a-429"),
        pytest.param(Gate.NO_TOKEN, 0.4, "Paced", id="no-token-within-the-budget"),
    ],
)
def test_R15_pacing_gates_stop_without_any_write_and_without_backoff(gate, wait, reason):
    plan = answered(observed(), FetchAttempt(gate=gate, wait=wait))
    outcome = plan.outcome
    assert outcome.reason == reason
    assert not outcome.write_status
    assert outcome.events == []
    assert outcome.requeue is Requeue.AFTER  # not a failure: no backoff step
    assert not outcome.fetched
    assert plan.secret is None and plan.rollout is None and plan.store == ()
    if gate is Gate.NO_TOKEN:
        assert outcome.delay == wait  # when a token is due
    else:  # spread over up to one more pause, so waiting CRs do not wake together
        assert wait <= outcome.delay <= 2 * wait


@pytest.mark.parametrize(
    ("gate", "reason"),
    [
        (Gate.UNRESPONSIVE, "InstanceUnresponsive"),
        (Gate.CREDENTIAL_UNANSWERED, "CredentialUnanswered"),
    ],
)
def test_R15_waiting_for_a_probe_writes_nothing_and_is_no_failure(gate, reason):
    """S4.1.9 rev 4: like a pause, the CR's conditions and lifecycle stay as they were; its
    condition never says another CR's request timed out."""
    plan = answered(observed(), FetchAttempt(gate=gate, wait=3.0))
    outcome = plan.outcome
    assert outcome.reason == reason
    assert not outcome.write_status and outcome.conditions == {} and outcome.status == {}
    assert outcome.events == [] and outcome.lifecycle is None
    assert outcome.requeue is Requeue.AFTER  # not a failure: no backoff step
    assert PROBE_INTERVAL_SECONDS <= outcome.delay <= 2 * PROBE_INTERVAL_SECONDS
    assert not outcome.fetched
    assert plan.secret is None and plan.rollout is None and plan.store == ()


def test_R15_a_gated_run_still_discards_a_404_record_of_another_binding():
    obs = observed(not_found=("0" * 64, NOW.wall - 5))
    plan = answered(obs, FetchAttempt(gate=Gate.NO_TOKEN, wait=1.0))
    assert plan.store == (StoreNote("clear_not_found", CR_UID),)


def test_R15_decide_after_fetch_refuses_a_record_that_stops_before_the_fetch():
    with pytest.raises(NotAFetch):
        decide_after_fetch(observed(instance=None), delivery(), SETTINGS, NOW)


# -- R16: current ---------------------------------------------------------------------------------


def _current_world(**status: Any):
    target = controlled_target(DEFAULT_DATA)
    the_cr = with_status(cr(), eligible_status(cr(), target) | status)
    return observed(the_cr, target=target)


def test_R16_current_is_synced_and_writes_nothing():
    obs = _current_world()
    assert planned(obs).cursor == CURSOR
    plan = answered(obs, delivery(current=True, capabilities=frozenset({"b", "a"})))
    outcome = plan.outcome
    assert outcome.reason == "Current"
    assert _condition(outcome, "Synced") == ("True", "Current")
    assert outcome.lifecycle == "Synced"
    assert outcome.requeue is Requeue.RESYNC
    assert outcome.events == []
    assert "cursor" not in outcome.status and "stamp" not in outcome.status
    assert "Delivery" not in outcome.conditions  # S5.4: untouched by current
    assert plan.secret is None
    assert not outcome.wrote_secret and outcome.fetched
    assert plan.store == (StoreNote("capabilities", INSTANCE_UID, text="a,b"),)
    assert plan.passed == PASSED
    assert all(outcome.conditions[c] is None for c in PASSED)


def test_R16_current_with_a_stored_stamp_evaluates_rollouts_read_only():
    old = compute_stamp(key_for(), {"OLD": b"x"})
    workloads = [
        workload("behind", stamp=old),
        workload("paused", stamp=NEW_STAMP, paused=True),
        workload("healthy", stamp=NEW_STAMP),
    ]
    obs = replace(_current_world(), workloads=workloads)
    plan = answered(obs, delivery(current=True), ROLLOUTS)
    rollout = plan.rollout
    assert rollout is not None
    assert rollout.patches == ()  # S4.17: the current path patches nothing
    assert rollout.not_progressed == ("Deployment/paused",)
    assert not rollout.warn  # no Stalled event on the current path
    outcome = settle_rollout(plan.outcome, rollout, [])
    assert _condition(outcome, "Rollout") == ("False", "Stalled")
    assert "Deployment/paused" in outcome.conditions["Rollout"].message
    assert outcome.events == [] and outcome.requeue is Requeue.RESYNC
    assert "cursor" not in outcome.status


@pytest.mark.parametrize(
    ("settings", "status"),
    [
        pytest.param(ROLLOUTS, {"stamp": None}, id="no-stored-stamp"),
        pytest.param(SETTINGS, {}, id="trigger-rollouts-off"),
    ],
)
def test_R16_current_without_stamp_or_rollouts_judges_no_workload(settings, status):
    obs = replace(_current_world(**status), workloads=[workload("paused", paused=True)])
    plan = answered(obs, delivery(current=True), settings)
    assert plan.outcome.reason == "Current"
    assert plan.rollout is None


def test_R16_current_with_an_unlisted_workload_list_keeps_what_is_stored():
    plan = answered(replace(_current_world(), workloads=None), delivery(current=True), ROLLOUTS)
    assert plan.rollout is None
    assert "Rollout" not in plan.outcome.conditions


# -- R16: full delivery (S4.4, S4.8, S4.9) ------------------------------------------------------


def test_R16_delivered_creates_an_absent_target():
    the_cr = cr()
    obs = observed(the_cr)
    plan = answered(obs, delivery())
    outcome = plan.outcome
    assert outcome.reason == "Delivered"
    assert _condition(outcome, "Synced") == ("True", "Delivered")
    assert outcome.conditions["Scrubbed"] is None and outcome.conditions["Delivery"] is None
    assert outcome.lifecycle == "Synced" and outcome.requeue is Requeue.RESYNC
    action = plan.secret
    assert action is not None
    assert (action.kind, action.name, action.cr_uid, action.target) == (
        "converge",
        TARGET,
        CR_UID,
        None,
    )
    assert action.data == DEFAULT_DATA and action.spec.target_type == "Opaque"
    assert outcome.status["cursor"] == NEW_CURSOR
    assert outcome.status["cursorBinding"] == binding_for(the_cr)
    assert outcome.status["stamp"] == NEW_STAMP
    assert outcome.status["keyCount"] == 2
    assert outcome.status["lastDelivery"] == rfc3339(NOW.at)
    assert _events(outcome) == [("Normal", "Delivered")]
    assert "created" in outcome.events[0].message
    assert outcome.wrote_secret
    assert _notes(plan, "clear_not_found") == []  # R13 read no 404 record: none to delete


def test_R16_delivered_updates_a_controlled_target_with_changed_data():
    target = controlled_target()
    plan = answered(observed(target=target), delivery())
    assert plan.secret is not None and plan.secret.kind == "converge"
    assert plan.secret.target is target and plan.secret.data == DEFAULT_DATA
    assert _events(plan.outcome) == [("Normal", "Delivered")]
    assert "updated" in plan.outcome.events[0].message
    assert plan.outcome.status["managedSecretUID"] == target.uid


def test_R16_delivered_drops_hand_added_keys():
    target = controlled_target({**DEFAULT_DATA, "hand-added": b"x"})
    plan = answered(observed(target=target), delivery())
    assert plan.secret is not None and plan.secret.data == DEFAULT_DATA


@pytest.mark.parametrize(
    ("stored", "records_time"),
    [
        pytest.param({"lastDelivery": "2025-05-01T00:00:00Z"}, False, id="keeps-last-delivery"),
        pytest.param({}, True, id="first-record-of-last-delivery"),
    ],
)
def test_R16_S4_8_2_byte_identical_data_skips_the_secret_write(stored, records_time):
    target = controlled_target(DEFAULT_DATA)
    plan = answered(observed(cr(status=stored), target=target), delivery())
    outcome = plan.outcome
    assert plan.secret is None
    assert not outcome.wrote_secret
    assert [e for e in outcome.events if e.reason == "Delivered"] == []
    assert outcome.reason == "Delivered"
    assert outcome.status["cursor"] == NEW_CURSOR and outcome.status["stamp"] == NEW_STAMP
    assert ("lastDelivery" in outcome.status) is records_time


def test_R16_the_stamp_derives_from_the_fresh_root_r12_planned():
    """R12 plans the fresh root (created before the fetch); R16's stamp derives from it."""
    obs = observed(stamp_root=None, fresh_root=FRESH_ROOT, reach=[])
    assert planned(obs).stamp_root == FRESH_ROOT
    plan = answered(obs, delivery())
    assert plan.outcome.status["stamp"] == compute_stamp(key_for(FRESH_ROOT), DEFAULT_DATA)


@pytest.mark.parametrize(
    "missing",
    [
        pytest.param((dk("DATABASE_URL", VALUE),), id="source-absent"),
        pytest.param(
            (dk("DATABASE_URL", VALUE), dk("LOG_LEVEL", None, "config", presence="unset")),
            id="non-set-presence-is-absent",
        ),
    ],
)
def test_R16_keys_missing_in_an_opaque_converge_is_informational(missing):
    plan = answered(observed(), delivery(missing))
    outcome = plan.outcome
    assert plan.secret is not None and plan.secret.data == {"DATABASE_URL": VALUE.encode()}
    assert _condition(outcome, "Delivery") == ("False", "KeysMissing")
    assert "LOG_LEVEL" in outcome.conditions["Delivery"].message
    assert _condition(outcome, "Synced") == ("True", "Delivered")
    assert outcome.lifecycle == "Synced"
    assert ("Warning", "KeysMissing") in _events(outcome)
    assert outcome.status["cursor"] == NEW_CURSOR  # not a refusal
    assert outcome.status["keyCount"] == 1


def test_R16_env_from_skip_is_a_warning_only():
    the_cr = cr(mapping=[{"key": "DATABASE_URL"}, {"key": "LOG_LEVEL", "secretKey": "1-level"}])
    plan = answered(observed(the_cr), delivery())
    outcome = plan.outcome
    assert _condition(outcome, "Delivery") == ("True", "EnvFromSkip")
    assert "1-level" in outcome.conditions["Delivery"].message
    assert ("Warning", "EnvFromSkip") in _events(outcome)
    assert plan.secret is not None and outcome.lifecycle == "Synced"
    assert outcome.status["cursor"] == NEW_CURSOR


def test_R16_S4_7_7_env_from_skip_never_applies_to_typed_targets():
    the_cr = typed_cr(mapping=[*TLS_MAPPING, {"key": "LOG_LEVEL", "secretKey": "1-level"}])
    keys = (dk("TLS_CRT", "crt"), dk("TLS_KEY", "key"), dk("LOG_LEVEL", "info"))
    plan = answered(observed(the_cr), delivery(keys), NATIVE)
    assert plan.outcome.conditions["Delivery"] is None
    assert plan.secret is not None and plan.secret.spec.target_type == TLS


BIG = "x" * (1_048_576 + 1)
ALL_KEYS = {"allKeys": True, "mapping": DELETE}

REFUSALS = [
    pytest.param(
        cr(),
        (dk("DATABASE_URL", None), dk("LOG_LEVEL", "info")),
        "UndeliveredSecrets",
        "DATABASE_URL",
        id="undelivered-secrets-mapping",
    ),
    pytest.param(
        cr(**ALL_KEYS),
        (dk("A", "1"), dk("B", None)),
        "UndeliveredSecrets",
        "reveal",
        id="undelivered-secrets-all-keys",
    ),
    pytest.param(
        typed_cr(
            "kubernetes.io/dockerconfigjson", [{"key": "D", "secretKey": ".dockerconfigjson"}]
        ),
        (dk("D", "not json"),),
        "InvalidSecretData",
        ".dockerconfigjson",
        id="invalid-docker-config-not-json",
    ),
    pytest.param(
        typed_cr("kubernetes.io/dockercfg", [{"key": "D", "secretKey": ".dockercfg"}]),
        (dk("D", "[1, 2]"),),
        "InvalidSecretData",
        ".dockercfg",
        id="invalid-dockercfg-not-an-object",
    ),
    pytest.param(
        cr(),
        (dk("DATABASE_URL", BIG), dk("LOG_LEVEL", "info")),
        "InvalidSecretData",
        "exceeds 1048576",
        id="invalid-total-size",
    ),
    pytest.param(
        cr(**ALL_KEYS),
        (dk("A", "1"), dk("bad name", "2")),
        "InvalidSecretData",
        "bad name",
        id="invalid-all-keys-key-name",
    ),
    pytest.param(
        cr(**ALL_KEYS),
        (dk("A", "1"), dk("PATH", "/bin")),
        "LoaderControlUnacknowledged",
        "PATH",
        id="loader-control-all-keys-postcheck",
    ),
]


@pytest.mark.parametrize(("the_cr", "keys", "reason", "phrase"), REFUSALS)
def test_R16_content_refusals_write_nothing_and_clear_the_cursor(the_cr, keys, reason, phrase):
    target = controlled_target(secret_type=the_cr["spec"]["target"].get("type", "Opaque"))
    the_cr = with_status(the_cr, eligible_status(the_cr, target))
    plan = answered(observed(the_cr, target=target), delivery(keys, expires=days(3)), NATIVE)
    outcome = plan.outcome
    assert outcome.reason == reason
    assert _condition(outcome, "Delivery") == ("False", reason)
    assert phrase in outcome.conditions["Delivery"].message
    assert outcome.lifecycle == "Refused" and outcome.requeue is Requeue.RESYNC
    assert ("Warning", reason) in _events(outcome)
    assert outcome.status["cursor"] is None and outcome.status["cursorBinding"] is None
    assert "Synced" not in outcome.conditions  # S5.4: left as it was
    assert plan.secret is None and plan.rollout is None
    assert not outcome.wrote_secret
    # S4.13 runs on every valid 200, before any refusal decision
    assert _condition(outcome, "CredentialExpiry") == ("True", "ExpiresSoon")


def test_R16_all_keys_delivers_exactly_the_carried_set():
    keys = (dk("A", "1"), dk("b.c", "2"), dk("GONE", None, presence="unset"))
    plan = answered(observed(cr(**ALL_KEYS)), delivery(keys))
    assert plan.secret is not None and plan.secret.data == {"A": b"1", "b.c": b"2"}
    assert plan.outcome.conditions["Delivery"] is None


# -- R16: typed withdrawal through a valid 200 (S4.10.2) ------------------------------------------


@pytest.mark.parametrize(
    ("the_cr", "keys", "named"),
    [
        pytest.param(typed_cr(), (dk("TLS_CRT", "crt"),), "TLS_KEY", id="tls-key-withdrawn"),
        pytest.param(
            cr(
                target={"name": TARGET, "type": TLS, "creationPolicy": "Orphan"},
                mapping=TLS_MAPPING,
                metadata={"finalizers": ["hikyo.dev/orphan"]},
            ),
            (dk("TLS_KEY", "key"),),
            "TLS_CRT",
            id="orphan-does-not-prevent-it",
        ),
        pytest.param(
            typed_cr(
                "kubernetes.io/basic-auth",
                [{"key": "U", "secretKey": "username"}, {"key": "P", "secretKey": "password"}],
            ),
            (dk("U", "user"),),
            "P",
            id="basic-auth-mapped-password-withdrawn",
        ),
    ],
)
def test_R16_typed_withdraw_via_content_refusal_deletes_the_target(the_cr, keys, named):
    secret_type = the_cr["spec"]["target"]["type"]
    target = controlled_target({"x": b"1"}, secret_type=secret_type)
    plan = answered(observed(the_cr, target=target), delivery(keys), NATIVE)
    outcome = plan.outcome
    assert plan.secret is not None
    assert (plan.secret.kind, plan.secret.name) == ("delete", TARGET)
    assert outcome.reason == "AuthorizationWithdrawn"
    assert _condition(outcome, "Scrubbed") == ("True", "AuthorizationWithdrawn")
    assert _condition(outcome, "Delivery") == ("False", "KeysMissing")
    assert named in outcome.conditions["Delivery"].message
    assert outcome.conditions["Synced"] is None  # removed
    assert outcome.lifecycle == "Scrubbed"
    assert outcome.status["cursor"] is None and outcome.status["cursorBinding"] is None
    assert outcome.status["stamp"] == EMPTY_STAMP and outcome.status["keyCount"] == 0
    assert outcome.status["managedSecretUID"] is None
    assert outcome.status["managedSecretResourceVersion"] is None
    assert ("Warning", "AuthorizationWithdrawn") in _events(outcome)
    assert ("Warning", "KeysMissing") in _events(outcome)


# -- R16: authoritative 404 (S4.10.0, S4.10.1, S4.10.2) -----------------------------------------


def test_R16_first_authoritative_404_records_and_confirms_later():
    the_cr = cr()
    plan = answered(observed(the_cr, target=controlled_target()), NOT_FOUND)
    outcome = plan.outcome
    assert plan.store == (
        StoreNote("record_not_found", CR_UID, text=binding_for(the_cr), seconds=NOW.wall),
    )
    assert _condition(outcome, "Synced") == ("False", "FetchFailed")
    assert "confirming" in outcome.message
    assert outcome.conditions["Synced"].facts == {"cause": Cause.CONFIRMING}
    assert outcome.lifecycle == "Retained"
    assert outcome.requeue is Requeue.AFTER and outcome.delay == 30.0  # no backoff step
    assert outcome.forced_full_next  # the next fetch withholds the cursor
    assert outcome.status == {} and plan.secret is None and plan.rollout is None


def _confirmed(the_cr=None, *, age: float = 31.0, **fields: Any):
    the_cr = cr() if the_cr is None else the_cr
    return observed(the_cr, not_found=(binding_for(the_cr), NOW.wall - age), **fields)


@pytest.mark.parametrize(
    ("the_cr", "target", "kind", "settings"),
    [
        pytest.param(cr(), controlled_target(), "empty", SETTINGS, id="opaque-is-emptied"),
        pytest.param(cr(), None, "empty", SETTINGS, id="opaque-absent-stays-absent"),
        pytest.param(
            typed_cr(),
            controlled_target({"x": b"1"}, secret_type=TLS),
            "delete",
            NATIVE,
            id="typed-is-deleted",
        ),
        pytest.param(typed_cr(), None, "delete", NATIVE, id="typed-absent"),
    ],
)
def test_R16_second_confirmed_cursorless_404_scrubs(the_cr, target, kind, settings):
    obs = _confirmed(the_cr, target=target)
    assert planned(obs, settings).cursor is None  # a pending record withholds the cursor
    plan = answered(obs, NOT_FOUND, settings)
    outcome = plan.outcome
    assert plan.secret is not None and plan.secret.kind == kind
    assert (plan.secret.name, plan.secret.cr_uid) == (TARGET, CR_UID)
    assert plan.store[0] == StoreNote("clear_not_found", CR_UID)
    assert _notes(plan, "record_not_found") == []
    assert outcome.reason == "AuthorizationWithdrawn"
    assert _condition(outcome, "Scrubbed") == ("True", "AuthorizationWithdrawn")
    assert outcome.conditions["Synced"] is None
    assert "Delivery" not in outcome.conditions
    assert outcome.lifecycle == "Scrubbed" and outcome.requeue is Requeue.RESYNC
    assert outcome.status["cursor"] is None and outcome.status["cursorBinding"] is None
    assert outcome.status["stamp"] == EMPTY_STAMP and outcome.status["keyCount"] == 0
    assert _events(outcome) == [("Warning", "AuthorizationWithdrawn")]
    emptied = kind == "empty" and target is not None
    assert ("emptied" in outcome.message) is emptied


@pytest.mark.parametrize(
    ("written", "phrase"),
    [
        pytest.param(None, "left absent", id="absent"),
        pytest.param(
            SecretObject("team-a", TARGET, uid="w", resource_version="2"), "emptied", id="emptied"
        ),
    ],
)
def test_R16_S4_10_1_settle_secret_records_what_the_empty_write_found(written, phrase):
    plan = answered(_confirmed(target=controlled_target()), NOT_FOUND)
    outcome = settle_secret(plan, written)
    assert phrase in outcome.conditions["Scrubbed"].message
    assert phrase in outcome.events[0].message
    assert outcome.status["managedSecretUID"] == (written.uid if written else None)


def test_R16_S4_10_0_a_second_404_exactly_30s_after_the_first_acts():
    plan = answered(_confirmed(age=30.0, target=controlled_target()), NOT_FOUND)
    assert plan.secret is not None and plan.secret.kind == "empty"


def test_R16_a_second_404_too_soon_keeps_confirming_without_a_new_record():
    plan = answered(_confirmed(age=10.0), NOT_FOUND)
    assert plan.secret is None and plan.store == ()
    assert plan.outcome.reason == "FetchFailed" and plan.outcome.forced_full_next
    assert plan.outcome.requeue is Requeue.AFTER
    assert plan.outcome.delay == pytest.approx(20.0)


def test_R16_a_404_record_older_than_its_ttl_counts_as_none():
    plan = answered(_confirmed(age=3601.0), NOT_FOUND)
    assert plan.secret is None
    assert _notes(plan, "record_not_found")[0].seconds == NOW.wall


def test_R16_a_404_record_under_another_binding_is_replaced():
    the_cr = cr()
    obs = observed(the_cr, not_found=("0" * 64, NOW.wall - 120))
    plan = answered(obs, NOT_FOUND)
    assert plan.secret is None
    assert plan.store == (
        StoreNote("clear_not_found", CR_UID),
        StoreNote("record_not_found", CR_UID, text=binding_for(the_cr), seconds=NOW.wall),
    )


def test_R16_already_scrubbed_needs_no_confirmation():
    obs = observed(cr(status={"conditions": [scrubbed_condition()]}))
    plan = answered(obs, NOT_FOUND)
    assert plan.secret is not None and plan.secret.kind == "empty"
    assert _notes(plan, "record_not_found") == []
    assert plan.outcome.lifecycle == "Scrubbed"


def test_R16_a_scrub_restarts_opted_in_workloads_with_the_empty_content_stamp():
    workloads = [workload("web", stamp=NEW_STAMP), workload("done", stamp=EMPTY_STAMP)]
    obs = _confirmed(target=controlled_target(), workloads=workloads)
    plan = answered(obs, NOT_FOUND, ROLLOUTS)
    assert plan.rollout is not None
    assert [w.name for w in plan.rollout.patches] == ["web"]
    assert plan.rollout.stamp == EMPTY_STAMP


@pytest.mark.parametrize(
    ("attempt", "discarded"),
    [
        pytest.param(delivery(), True, id="valid-200-discards-it"),
        pytest.param(delivery(current=True), True, id="current-200-discards-it"),
        pytest.param(answer(FetchOutcome.FAILED, 500, detail="status 500"), False, id="500-keeps"),
        pytest.param(answer(FetchOutcome.NOT_MATERIALIZED, 409), False, id="409-keeps"),
        pytest.param(answer(FetchOutcome.RATE_LIMITED, 429), False, id="429-keeps"),
    ],
)
def test_R16_S4_10_0_what_discards_a_pending_404_record(attempt, discarded):
    plan = answered(_confirmed(age=5.0), attempt)
    assert bool(_notes(plan, "clear_not_found")) is discarded


@pytest.mark.parametrize(
    "attempt",
    [pytest.param(delivery(), id="delivered"), pytest.param(NOT_FOUND, id="scrubbed")],
)
def test_R16_S4_10_0_a_record_discarded_at_R13_is_deleted_once(attempt):
    scrubbed = {"conditions": [scrubbed_condition()]}
    obs = observed(cr(status=scrubbed), not_found=("0" * 64, NOW.wall - 120))  # another binding
    plan = answered(obs, attempt)
    assert _notes(plan, "clear_not_found") == [StoreNote("clear_not_found", CR_UID)]


def test_R16_S4_10_0_a_scrub_of_an_already_scrubbed_cr_with_no_record_deletes_none():
    plan = answered(observed(cr(status={"conditions": [scrubbed_condition()]})), NOT_FOUND)
    assert plan.secret is not None and plan.secret.kind == "empty"
    assert _notes(plan, "clear_not_found") == []


# -- R16: other answers (S4.11, S4.12, S4.1.6) ---------------------------------------------------


def test_R16_S4_12_not_materialized_retains_and_resyncs():
    plan = answered(_current_world(), answer(FetchOutcome.NOT_MATERIALIZED, 409))
    outcome = plan.outcome
    assert outcome.reason == "NotMaterialized"
    assert _condition(outcome, "Synced") == ("False", "NotMaterialized")
    assert outcome.lifecycle == "Retained"
    assert outcome.requeue is Requeue.RESYNC  # not backoff
    assert _events(outcome) == [("Warning", "NotMaterialized")]
    assert outcome.status == {}  # cursor unchanged
    assert plan.secret is None and plan.rollout is None


@pytest.mark.parametrize(
    ("retry_after", "wait"),
    [
        pytest.param(7.0, 7.0, id="retry-after-7s"),
        pytest.param(None, 1.0, id="absent-means-1s"),
        pytest.param(0.2, 1.0, id="at-least-1s"),
        pytest.param(3600.0, MAX_PAUSE, id="at-most-5min"),
    ],
)
def test_R16_429_pauses_the_instance_for_the_org_and_requeues_after_the_waiters(retry_after, wait):
    """S4.1.6 rev 3: the pause covers (instance, spec.scope.org); the CR that drew it comes
    back after the window in which the CRs that waited for the pause come back."""
    attempt = answer(FetchOutcome.RATE_LIMITED, 429, retry_after=retry_after)
    plan = answered(observed(), attempt)
    outcome = plan.outcome
    assert _condition(outcome, "Synced") == ("False", "FetchFailed")
    assert outcome.requeue is Requeue.AFTER and outcome.delay == wait + RESUME_WINDOW
    # The scope is pinned literally: one org of one instance (a pause_scope that dropped the
    # org would still equal a scope computed with pause_scope here).
    assert plan.store == (StoreNote("pause", f"{INSTANCE_UID}/{ORG}", seconds=wait),)
    assert outcome.conditions["Synced"].facts == {"cause": Cause.RATE_LIMITED}
    assert outcome.status == {} and plan.secret is None


def test_S4_1_6_crs_that_met_a_pause_come_back_in_the_order_they_became_due():
    """A pause of P seconds starts at 0; CRs meet it at 0.5, 10 and 29 s (each one became due
    then), and the CR that drew it comes back by its own due time: the pause's end."""
    pause = 30.0
    met_at = [0.5, 10.0, 29.0]
    back_at = [t + resume_delay_while_paused(pause - t) for t in met_at]
    drawer_back_at = 0.0 + pause + RESUME_WINDOW
    assert back_at == sorted(back_at)  # first due, first back
    assert all(pause <= t < drawer_back_at for t in back_at)  # not before the end
    assert resume_delay_while_paused(MAX_PAUSE) == MAX_PAUSE  # the earliest possible comes first
    assert resume_delay_while_paused(0.0) == RESUME_WINDOW  # the latest comes last


@pytest.mark.parametrize(
    ("status", "detail", "cause"),
    [
        pytest.param(500, "status 500", Cause.SERVER, id="server-error"),
        pytest.param(401, "status 401", Cause.UNAUTHORIZED, id="unauthorized-retains"),
        pytest.param(404, "status 404 (not authoritative)", "", id="other-404"),
        pytest.param(None, "timeout", Cause.SERVER, id="transport-timeout"),
        pytest.param(None, TLS_VERIFICATION_FAILED, Cause.TLS, id="tls"),
    ],
)
def test_R16_other_failures_are_fetch_failed_with_backoff_and_retain(status, detail, cause):
    plan = answered(_current_world(), answer(FetchOutcome.FAILED, status, detail=detail))
    outcome = plan.outcome
    assert outcome.reason == "FetchFailed"
    assert _condition(outcome, "Synced") == ("False", "FetchFailed")
    assert detail in outcome.conditions["Synced"].message
    assert outcome.conditions["Synced"].facts == ({"cause": cause} if cause else {})
    assert outcome.lifecycle == "Retained" and outcome.requeue is Requeue.BACKOFF
    assert _events(outcome) == [("Warning", "FetchFailed")]
    assert outcome.status == {}  # S4.11: cursor unchanged
    assert plan.secret is None and plan.rollout is None and plan.store == ()


# -- S4.13 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expires", "reason"),
    [
        pytest.param(days(-1), "Expired", id="expired-yesterday"),
        pytest.param(days(0), "Expired", id="expires-now-is-expired"),
        pytest.param(days(3), "ExpiresSoon", id="expires-in-3-days"),
        pytest.param(days(7), "ExpiresSoon", id="expires-in-exactly-7-days"),
        pytest.param(days(8), None, id="expires-in-8-days-removes"),
    ],
)
@pytest.mark.parametrize("current", [False, True], ids=["full", "current"])
def test_S4_13_credential_expiry(expires, reason, current):
    plan = answered(_current_world(), delivery(current=current, expires=expires))
    outcome = plan.outcome
    assert outcome.status["credentialExpiresAt"] == rfc3339(expires)
    if reason is None:
        assert outcome.conditions["CredentialExpiry"] is None
        assert not [e for e in outcome.events if e.reason in ("Expired", "ExpiresSoon")]
    else:
        assert _condition(outcome, "CredentialExpiry") == ("True", reason)
        assert rfc3339(expires) in outcome.conditions["CredentialExpiry"].message
        assert ("Warning", reason) in _events(outcome)


@pytest.mark.parametrize("expires", [days(-1), days(0.01), days(3), days(30)])
@pytest.mark.parametrize("current", [False, True], ids=["full", "current"])
def test_S4_13_an_operator_minted_token_has_no_credential_expiry(expires, current):
    """S4.13 rev 3: the operator mints and renews a serviceAccountRef token itself; its expiry
    is not the user's to act on and moves on every renewal, which would write the status on
    every resync (S4.17): no condition, no stored instant, no event, whatever the answer says."""
    stored = {"type": "CredentialExpiry", "status": "True", "reason": "ExpiresSoon", "message": "m"}
    the_cr = sa_cr()
    target = controlled_target(DEFAULT_DATA)
    status = eligible_status(the_cr, target) | {
        "conditions": [stored],
        "credentialExpiresAt": "2026-12-04T21:00:00Z",
    }
    obs = observed(with_status(the_cr, status), target=target)
    outcome = answered(obs, delivery(current=current, expires=expires)).outcome
    assert outcome.conditions["CredentialExpiry"] is None  # an old one is removed
    assert outcome.status["credentialExpiresAt"] is None
    assert not [e for e in outcome.events if e.reason in ("Expired", "ExpiresSoon")]


@pytest.mark.parametrize(
    "attempt",
    [
        pytest.param(NOT_FOUND, id="first-404"),
        pytest.param(answer(FetchOutcome.NOT_MATERIALIZED, 409), id="409"),
        pytest.param(answer(FetchOutcome.RATE_LIMITED, 429), id="429"),
        pytest.param(answer(FetchOutcome.FAILED, 503, detail="status 503"), id="503"),
    ],
)
def test_S4_13_other_outcomes_leave_expiry_and_pin_untouched(attempt):
    outcome = answered(_current_world(), attempt).outcome
    assert "CredentialExpiry" not in outcome.conditions and "PinExpiry" not in outcome.conditions
    assert "credentialExpiresAt" not in outcome.status and "pinnedRevision" not in outcome.status


def test_S4_13_no_expiry_removes_the_condition_and_the_field():
    plan = answered(observed(), delivery(expires=None))
    assert plan.outcome.conditions["CredentialExpiry"] is None
    assert plan.outcome.status["credentialExpiresAt"] is None


@pytest.mark.parametrize(
    ("stored", "new_event"),
    [
        pytest.param("ExpiresSoon", False, id="same-reason-no-event"),
        pytest.param("Expired", True, id="reason-changed-event"),
    ],
)
def test_S4_13_expiry_event_only_when_the_condition_appears_or_changes(stored, new_event):
    condition = {"type": "CredentialExpiry", "status": "True", "reason": stored, "message": "m"}
    obs = _current_world(conditions=[condition])
    plan = answered(obs, delivery(current=True, expires=days(2)))
    assert (("Warning", "ExpiresSoon") in _events(plan.outcome)) is new_event


@pytest.mark.parametrize("current", [False, True], ids=["full", "current"])
def test_S4_13_pin_expired_warns_on_every_such_answer(current):
    stored = {"type": "PinExpiry", "status": "True", "reason": "PinExpired", "message": "m"}
    obs = _current_world(conditions=[stored])
    plan = answered(obs, delivery(current=current, pin_expired=True, pinned=12))
    outcome = plan.outcome
    assert _condition(outcome, "PinExpiry") == ("True", "PinExpired")
    assert "12" in outcome.conditions["PinExpiry"].message
    assert ("Warning", "PinExpired") in _events(outcome)
    assert outcome.status["pinnedRevision"] == 12


def test_S4_13_pin_not_expired_removes_pin_expiry():
    plan = answered(observed(), delivery(pin_expired=False))
    assert plan.outcome.conditions["PinExpiry"] is None
    assert plan.outcome.status["pinnedRevision"] is None


# -- S4.9 step 2, S6.4, S6.5 ---------------------------------------------------------------------


def test_S6_4_delivery_patches_only_opted_in_workloads_with_another_stamp():
    old = compute_stamp(key_for(), {"OLD": b"x"})
    workloads = [
        workload("behind", stamp=old),
        workload("fresh", stamp=None),
        workload("same", stamp=NEW_STAMP),
        workload("paused", stamp=NEW_STAMP, paused=True),
        replace(workload("not-opted-in", stamp=old), targets=frozenset({"other-secret"})),
        workload("stateful", stamp=old, kind="StatefulSet"),
    ]
    plan = answered(observed(workloads=workloads), delivery(), ROLLOUTS)
    rollout = plan.rollout
    assert rollout is not None
    assert sorted(w.name for w in rollout.patches) == ["behind", "fresh", "stateful"]
    assert rollout.stamp == NEW_STAMP == plan.outcome.status["stamp"]
    assert rollout.not_progressed == ("Deployment/paused",)
    assert rollout.warn and not rollout.unlisted
    assert (rollout.namespace, rollout.target_name) == ("team-a", TARGET)


def test_S6_4_unchanged_content_restarts_nothing():
    target = controlled_target(DEFAULT_DATA)
    workloads = [workload("same", stamp=NEW_STAMP)]
    plan = answered(observed(target=target, workloads=workloads), delivery(), ROLLOUTS)
    assert plan.secret is None
    assert plan.rollout is not None and plan.rollout.patches == ()


def test_S6_6_trigger_rollouts_off_plans_no_rollout():
    plan = answered(observed(workloads=[workload("behind", stamp="v1:00")]), delivery())
    assert plan.rollout is None
    assert "Rollout" not in plan.outcome.conditions


def test_S6_5_a_held_statefulset_test_counts_only_after_5_minutes():
    lagging = workload("db", stamp=NEW_STAMP, kind="StatefulSet", replicas=2)
    first = answered(observed(workloads=[lagging]), delivery(), ROLLOUTS)
    assert first.rollout is not None and first.rollout.not_progressed == ()
    assert _notes(first, "stall_first_seen") == [
        StoreNote("stall_first_seen", CR_UID, first_seen=(("StatefulSet/db", NOW.wall),))
    ]
    later = observed(workloads=[lagging], stall_first_seen={"StatefulSet/db": NOW.wall - 301})
    second = answered(later, delivery(), ROLLOUTS)
    assert second.rollout is not None and second.rollout.not_progressed == ("StatefulSet/db",)
    assert _notes(second, "stall_first_seen") == []  # the record did not change


def test_S4_9_settle_rollout_without_failures_keeps_the_delivery():
    plan = answered(observed(workloads=[workload("behind", stamp="v1:00")]), delivery(), ROLLOUTS)
    outcome = settle_rollout(plan.outcome, plan.rollout, [])
    assert outcome.conditions["Rollout"] is None
    assert outcome.requeue is Requeue.RESYNC
    assert outcome.status["cursor"] == NEW_CURSOR


def test_S4_9_a_failed_stamp_patch_is_stalled_with_backoff_and_clears_the_cursor():
    plan = answered(observed(workloads=[workload("behind", stamp="v1:00")]), delivery(), ROLLOUTS)
    outcome = settle_rollout(plan.outcome, plan.rollout, ["Deployment/behind"])
    assert _condition(outcome, "Rollout") == ("False", "Stalled")
    assert "Deployment/behind" in outcome.conditions["Rollout"].message
    assert _condition(outcome, "Synced") == ("True", "Delivered")
    assert outcome.requeue is Requeue.BACKOFF
    assert outcome.status["cursor"] is None and outcome.status["cursorBinding"] is None
    assert ("Warning", "Stalled") in _events(outcome)
    assert outcome.status["stamp"] == NEW_STAMP  # what was written stays recorded


def test_S4_9_unlisted_workloads_settle_as_stalled_with_backoff_and_cursor_cleared():
    plan = answered(observed(workloads=None), delivery(), ROLLOUTS)
    rollout = plan.rollout
    assert rollout is not None and rollout.unlisted and rollout.patches == ()
    outcome = settle_rollout(plan.outcome, rollout, [])
    assert _condition(outcome, "Rollout") == ("False", "Stalled")
    assert outcome.requeue is Requeue.BACKOFF
    assert outcome.status["cursor"] is None and outcome.status["cursorBinding"] is None
    assert ("Warning", "Stalled") in _events(outcome)


def test_S4_10_1_5_a_failed_patch_after_a_scrub_keeps_it_scrubbed():
    obs = _confirmed(target=controlled_target(), workloads=[workload("web", stamp=NEW_STAMP)])
    plan = answered(obs, NOT_FOUND, ROLLOUTS)
    outcome = settle_rollout(plan.outcome, plan.rollout, ["Deployment/web"])
    assert _condition(outcome, "Scrubbed") == ("True", "AuthorizationWithdrawn")
    assert _condition(outcome, "Rollout") == ("False", "Stalled")
    assert outcome.requeue is Requeue.BACKOFF


# -- what only the writes can tell -------------------------------------------------------------


def test_S4_8_settle_secret_records_the_written_secret():
    plan = answered(observed(), delivery())
    written = SecretObject("team-a", TARGET, uid="new-uid", resource_version="1")
    outcome = settle_secret(plan, written)
    assert outcome.status["managedSecretUID"] == "new-uid"
    assert outcome.status["managedSecretResourceVersion"] == "1"


def test_S4_8_5_a_failed_secret_write_is_fetch_failed_and_clears_the_cursor():
    outcome = secret_write_failed("Secret app-env was replaced during the write")
    assert _condition(outcome, "Synced") == ("False", "FetchFailed")
    assert outcome.lifecycle == "Retained" and outcome.requeue is Requeue.BACKOFF
    assert outcome.status["cursor"] is None and outcome.status["cursorBinding"] is None


# -- S5.2 over what decide concluded ----------------------------------------------------------


def _merged(outcome):
    return {
        c["type"]: c
        for c in merge_conditions(
            [], outcome.conditions, lifecycle=outcome.lifecycle, generation=1, now="t"
        )
    }


def test_S5_2_a_delivery_is_ready_reconciled():
    ready = _merged(answered(observed(), delivery()).outcome)["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "Reconciled")


def test_S5_2_a_delivery_refusal_is_ready_blocked_naming_it():
    plan = answered(
        observed(),
        delivery((dk("DATABASE_URL", None), dk("LOG_LEVEL", "info"))),
    )
    ready = _merged(plan.outcome)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "Blocked")
    assert ready["message"] == "not ready: Delivery/UndeliveredSecrets"
