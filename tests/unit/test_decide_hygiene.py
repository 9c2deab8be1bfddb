"""Value hygiene of the pure decisions (S0.4, S5.6) and the S5.1 coverage meta-test.

Every Secret value, bearer token, cursor and stamp root in these worlds holds the word CANARY
(tests/unit/decide_fixtures.py). None may appear in the repr of anything decide builds, nor in a
condition message, an event message or a status value other than ``cursor``; no message names a
stamp or a binding digest either.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.spec_tables import spec_reasons
from tests.unit.decide_fixtures import (
    CANARY,
    CURSOR,
    FRESH_ROOT,
    NATIVE,
    NEW_CURSOR,
    NOT_FOUND,
    NOW,
    OLD_VALUE,
    ROLLOUTS,
    SETTINGS,
    TLS,
    TOKEN,
    VALUE,
    answer,
    answered,
    binding_for,
    claimant,
    controlled_target,
    cr,
    credential_secret,
    decide,
    delivery,
    dk,
    eligible_status,
    instance,
    observed,
    root_secret,
    sa_cr,
    stamped_cr,
    typed_cr,
    with_status,
    workload,
)
from workers.engine.decide_after_fetch import settle_secret
from workers.engine.decide_rollout import settle_rollout
from workers.engine.fetched import FetchOutcome
from workers.engine.observed import UNREAD, ForbiddenRead, Observed
from workers.engine.plan import FetchAttempt, FetchPlan, Gate, Plan, Stop
from workers.engine.ports import SecretObject

HERE = Path(__file__).parent


@dataclass(frozen=True)
class Scenario:
    obs: Observed
    settings: Any = SETTINGS
    attempt: FetchAttempt | None = None


def _stored(the_cr: dict[str, Any], target: SecretObject) -> dict[str, Any]:
    """The CR with a cursor-eligible status: the stored cursor canary is in every world."""
    return with_status(the_cr, eligible_status(cr(), target))


TARGET_OBJ = controlled_target()  # holds OLD_VALUE


def _world(the_cr: dict[str, Any] | None = None, **fields: Any) -> Observed:
    the_cr = cr() if the_cr is None else the_cr
    fields.setdefault("target", TARGET_OBJ)
    return observed(_stored(the_cr, TARGET_OBJ), **fields)


PRESENCE_ONLY = (dk("DATABASE_URL", None), dk("LOG_LEVEL", VALUE))
STALE = "v1:00000000000000000000000000000000"
SCENARIOS = {
    # before the fetch
    "R0-foreign-owner": Scenario(
        replace(
            _world(),
            cr=with_status(cr(), {"operatorNamespace": "other", "cursor": CURSOR}),
            lease=None,
            lease_readable=False,
        )
    ),
    "R1-release": Scenario(
        _world(
            cr(
                metadata={
                    "deletionTimestamp": "2025-05-01T00:00:00Z",
                    "finalizers": ["hikyo.dev/orphan"],
                },
                target={"name": "app-env", "creationPolicy": "Orphan"},
            )
        )
    ),
    "R3-invalid": Scenario(_world(cr(resyncInterval="1s"))),
    "R4-native-off": Scenario(_world(typed_cr())),
    "R5-no-instance": Scenario(_world(instance=None)),
    "R6-bad-token": Scenario(
        _world(credential_secret=credential_secret(data={"hikyo-token": f"{TOKEN} x".encode()}))
    ),
    "R6-mismatch": Scenario(
        _world(
            credential_secret=credential_secret(
                labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": "x"}
            )
        )
    ),
    "R6-token-failed": Scenario(_world(sa_cr(), token=None, token_error="denied")),
    "R6-audience": Scenario(_world(sa_cr(), instance=instance(audience=None))),
    "R7-claimed": Scenario(_world(claimants=[claimant("older", "uid-a", "2024-01-01T00:00:00Z")])),
    "R8-not-owned": Scenario(
        _world(target=SecretObject("team-a", "app-env", data={"K": VALUE.encode()}))
    ),
    "R9-type": Scenario(_world(target=controlled_target(secret_type=TLS))),
    "R10-keys": Scenario(
        _world(typed_cr(mapping=[{"key": "C", "secretKey": "tls.crt"}]), target=None), NATIVE
    ),
    "R11-loader": Scenario(_world(cr(mapping=[{"key": "PATH"}]))),
    "R12-missing": Scenario(_world(stamp_root=None, fresh_root=FRESH_ROOT, reach=[stamped_cr()])),
    "R12-length": Scenario(_world(stamp_root=root_secret(b"CANARY-short-root"))),
    "R14-server": Scenario(_world(server=None, server_error="invalid base URL")),
    "S4_15-not-bound": Scenario(_world(target=UNREAD, forbidden=ForbiddenRead("get", "secrets"))),
    "S4_15-quota": Scenario(
        _world(target=UNREAD, forbidden=ForbiddenRead("get", "secrets", allowed=True))
    ),
    "fetch-plan-presenting-the-cursor": Scenario(_world()),
    "fetch-plan-fresh-root": Scenario(_world(stamp_root=None, fresh_root=FRESH_ROOT, reach=[])),
    "fetch-plan-federated": Scenario(_world(sa_cr())),
    # after the fetch
    "R15-paused": Scenario(_world(), attempt=FetchAttempt(gate=Gate.PAUSED, wait=3)),
    "R15-unresponsive": Scenario(_world(), attempt=FetchAttempt(gate=Gate.UNRESPONSIVE, wait=3)),
    "R16-current": Scenario(
        _world(workloads=[workload("w", stamp=STALE, paused=True)]),
        ROLLOUTS,
        delivery(current=True, pin_expired=True, expires=NOW.at),
    ),
    "R16-delivered": Scenario(_world(workloads=[workload("w", stamp=STALE)]), ROLLOUTS, delivery()),
    "R16-keys-missing": Scenario(_world(), attempt=delivery((dk("DATABASE_URL", VALUE),))),
    "R16-env-skip": Scenario(
        _world(cr(mapping=[{"key": "DATABASE_URL", "secretKey": "9db"}])), attempt=delivery()
    ),
    "R16-undelivered": Scenario(_world(), attempt=delivery(PRESENCE_ONLY)),
    "R16-invalid-docker": Scenario(
        _world(
            typed_cr(
                "kubernetes.io/dockerconfigjson", [{"key": "D", "secretKey": ".dockerconfigjson"}]
            ),
            target=None,
        ),
        NATIVE,
        delivery((dk("D", VALUE),)),
    ),
    "R16-too-big": Scenario(
        _world(), attempt=delivery((dk("DATABASE_URL", VALUE * 70_000), dk("LOG_LEVEL", VALUE)))
    ),
    "R16-all-keys-loader": Scenario(
        _world(cr(allKeys=True, mapping=None)),
        attempt=delivery((dk("PATH", VALUE), dk("A", VALUE))),
    ),
    "R16-typed-withdraw": Scenario(
        _world(typed_cr(), target=controlled_target(secret_type=TLS)),
        NATIVE,
        delivery((dk("TLS_CRT", VALUE),)),
    ),
    "R16-first-404": Scenario(_world(), attempt=NOT_FOUND),
    "R16-scrub": Scenario(
        _world(
            not_found=(binding_for(cr()), NOW.wall - 60), workloads=[workload("w", stamp=STALE)]
        ),
        ROLLOUTS,
        NOT_FOUND,
    ),
    "R16-409": Scenario(_world(), attempt=answer(FetchOutcome.NOT_MATERIALIZED, 409)),
    "R16-429": Scenario(_world(), attempt=answer(FetchOutcome.RATE_LIMITED, 429, retry_after=2)),
    "R16-500": Scenario(_world(), attempt=answer(FetchOutcome.FAILED, 500, detail="status 500")),
    "R16-unlisted": Scenario(_world(workloads=None), ROLLOUTS, delivery()),
}

# The reason each scenario reaches (None: a fetch plan), so no check passes on a wrong path.
REACHES = {
    "R0-foreign-owner": "ForeignOwner",
    "R1-release": "Finalized",
    "R3-invalid": "FetchFailed",
    "R4-native-off": "NativeSecretTypesDisabled",
    "R5-no-instance": "FetchFailed",
    "R6-bad-token": "SecretNotDesignated",
    "R6-mismatch": "InstanceMismatch",
    "R6-token-failed": "FetchFailed",
    "R6-audience": "AudienceMissing",
    "R7-claimed": "TargetClaimed",
    "R8-not-owned": "ManagedSecretNotOwned",
    "R9-type": "TargetTypeImmutable",
    "R10-keys": "KeysMissing",
    "R11-loader": "LoaderControlUnacknowledged",
    "R12-missing": "FetchFailed",
    "R12-length": "FetchFailed",
    "R14-server": "FetchFailed",
    "S4_15-not-bound": "NamespaceNotBound",
    "S4_15-quota": "FetchFailed",
    "fetch-plan-presenting-the-cursor": None,
    "fetch-plan-fresh-root": None,
    "fetch-plan-federated": None,
    "R15-paused": "InstancePaused",
    "R15-unresponsive": "InstanceUnresponsive",
    "R16-current": "Current",
    "R16-delivered": "Delivered",
    "R16-keys-missing": "Delivered",
    "R16-env-skip": "Delivered",
    "R16-undelivered": "UndeliveredSecrets",
    "R16-invalid-docker": "InvalidSecretData",
    "R16-too-big": "InvalidSecretData",
    "R16-all-keys-loader": "LoaderControlUnacknowledged",
    "R16-typed-withdraw": "AuthorizationWithdrawn",
    "R16-first-404": "FetchFailed",
    "R16-scrub": "AuthorizationWithdrawn",
    "R16-409": "NotMaterialized",
    "R16-429": "FetchFailed",
    "R16-500": "FetchFailed",
    "R16-unlisted": "Delivered",
}


def _built(scenario: Scenario) -> tuple[Any, Plan | None]:
    """The decision, and the plan as ``apply`` would leave it after its writes held."""
    decision = decide(scenario.obs, scenario.settings)
    if scenario.attempt is None:
        return decision, decision.plan if isinstance(decision, Stop) else None
    assert isinstance(decision, FetchPlan)
    plan = answered(scenario.obs, scenario.attempt, scenario.settings)
    if plan.secret is not None:
        settle_secret(plan, SecretObject("team-a", "app-env", data=dict(plan.secret.data)))
    if plan.rollout is not None:
        settle_rollout(plan.outcome, plan.rollout, [])
    return decision, plan


def _objects(scenario: Scenario) -> Iterator[tuple[str, Any]]:
    decision, plan = _built(scenario)
    yield "Observed", scenario.obs
    yield type(decision).__name__, decision
    if scenario.attempt is not None:
        yield "FetchAttempt", scenario.attempt
    if plan is None:
        return
    yield "Plan", plan
    yield "Outcome", plan.outcome
    if plan.secret is not None:
        yield "SecretAction", plan.secret
    if plan.rollout is not None:
        yield "RolloutPlan", plan.rollout
    for note in plan.store:
        yield "StoreNote", note
    for event in plan.outcome.events:
        yield "Event", event
    for condition in plan.outcome.conditions.values():
        if condition is not None:
            yield "Condition", condition


NOT_A_CURSOR = re.compile(rf"{CANARY}-(?!cursor)")  # values, token, stamp roots
A_CURSOR = f"{CANARY}-cursor"


@pytest.mark.parametrize("name", SCENARIOS)
def test_S0_4_1_no_value_token_or_stamp_root_in_the_repr_of_what_decide_builds(name):
    leaks = [kind for kind, obj in _objects(SCENARIOS[name]) if NOT_A_CURSOR.search(repr(obj))]
    assert leaks == []


@pytest.mark.parametrize("name", SCENARIOS)
def test_S0_4_2_no_cursor_in_the_repr_of_anything_decide_reads_or_builds(name):
    """The stored cursor (in Observed.cr) and a delivery's new one (in Outcome.status, so in
    Plan) are kept out of every repr, like FetchPlan.cursor and Delivery.cursor."""
    leaks = [kind for kind, obj in _objects(SCENARIOS[name]) if A_CURSOR in repr(obj)]
    assert leaks == []


def _texts(plan: Plan) -> Iterator[tuple[str, str]]:
    outcome = plan.outcome
    yield "outcome message", outcome.message
    for type_, condition in outcome.conditions.items():
        if condition is not None:
            yield f"{type_} message", condition.message
    for event in outcome.events:
        yield f"{event.reason} event", event.message


WITH_PLANS = [name for name, scenario in SCENARIOS.items() if _built(scenario)[1] is not None]


@pytest.mark.parametrize("name", WITH_PLANS)
def test_S5_6_messages_and_status_hold_no_value_token_cursor_stamp_or_binding(name):
    _, plan = _built(SCENARIOS[name])
    assert plan is not None
    outcome = plan.outcome
    forbidden = [CANARY, binding_for(cr())]
    if outcome.status.get("stamp"):
        forbidden.append(outcome.status["stamp"])
    found = [where for where, text in _texts(plan) if any(word in text for word in forbidden)]
    found += [
        f"status.{field}"
        for field, value in outcome.status.items()
        if field != "cursor" and CANARY in str(value)
    ]
    found += [f"{note.op} note" for note in plan.store if CANARY in f"{note.key} {note.text}"]
    assert found == []
    cursor = outcome.status.get("cursor")
    if cursor is not None:  # only a delivery records a cursor: the server's new one
        assert (outcome.reason, cursor) == ("Delivered", NEW_CURSOR)


@pytest.mark.parametrize("name", SCENARIOS)
def test_each_hygiene_scenario_reaches_its_step(name):
    decision, plan = _built(SCENARIOS[name])
    assert (None if plan is None else plan.outcome.reason) == REACHES[name]
    if REACHES[name] is None:
        assert isinstance(decision, FetchPlan)


def test_S0_4_the_bearer_and_values_do_reach_the_plan_fields_that_need_them():
    """The hygiene tests above would pass vacuously if the canaries never got this far."""
    fetch = decide(_world(workloads=[]))
    assert isinstance(fetch, FetchPlan)
    assert fetch.token == TOKEN and fetch.cursor == CURSOR
    plan = answered(_world(), delivery())
    assert plan.secret is not None and plan.secret.data["DATABASE_URL"] == VALUE.encode()
    assert plan.outcome.status["cursor"] == NEW_CURSOR
    assert TARGET_OBJ.data["DATABASE_URL"] == OLD_VALUE.encode()


# -- S5.1: every reason has a test ----------------------------------------------------------------


def test_S5_1_every_reason_of_the_spec_table_is_asserted_in_a_decide_test():
    reasons = spec_reasons()
    # a broken parse must not pass vacuously
    assert {"Reconciled", "FetchFailed", "NamespaceNotBound", "PinExpired"} <= reasons
    assert len(reasons) >= 25
    sources = "\n".join(
        path.read_text(encoding="utf-8")
        for path in sorted(HERE.glob("test_decide_*.py"))
        if path.name != Path(__file__).name
    )
    untested = sorted(r for r in reasons if f'"{r}"' not in sources)
    assert untested == [], f"S5.1 reasons no test_decide_* file asserts: {untested}"


def test_S5_1_the_engine_knows_exactly_the_spec_reasons():
    from workers.engine.conditions import REASONS

    known = {
        reason for statuses in REASONS.values() for names in statuses.values() for reason in names
    }
    assert known == spec_reasons()
