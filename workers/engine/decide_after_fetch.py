"""S4.2 steps R15-R16, pure: from the fetch's answer to the plan ``apply`` executes.

Content (S4.4-S4.7), converge (S4.8) or scrub (S4.10, in decide_scrub.py), conditions,
events, status and requeue (S4.9, S4.11-S4.13), and the rollouts that follow a change (S6).
What only the writes can tell (the written Secret's UID, a failed verification, a failed stamp
patch) is folded in by the ``settle_*`` functions, which ``apply`` calls with what happened.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from . import expiry
from .conditions import DELIVERY, SCRUBBED, SYNCED, Condition
from .content import Content, ContentRefusal
from .decide import decide_before_fetch
from .decide_rollout import plan_rollout
from .decide_scrub import managed_status, scrub_plan, scrubbed_message, withdraw_plan
from .errors import EngineError
from .facts import Cause, fetch_failure_cause
from .fetched import Delivery, FetchOutcome
from .messages import key_list
from .native_types import OPAQUE
from .observed import Observed
from .outcome import Event, Outcome, Requeue, failure, refusal, waiting
from .pacing import (
    INSTANCE_PAUSED,
    PROBE_INTERVAL_SECONDS,
    pause_scope,
    pause_seconds,
    resume_delay_after_429,
    resume_delay_while_paused,
    spread,
)
from .plan import FetchAttempt, FetchPlan, Gate, Now, Plan, SecretAction, StoreNote, WriteKind
from .policy_writes import policy_write
from .ports import SecretObject
from .settings import OperatorSettings
from .shaping import deliver
from .stamp import compute_stamp

NOT_FOUND_RECORD_TTL = 3600.0  # S4.10.0
# S4.1.9: waiting, like a pause, for the probe of an instance or of a credential's requests
INSTANCE_UNRESPONSIVE = "InstanceUnresponsive"
CREDENTIAL_UNANSWERED = "CredentialUnanswered"
UNANSWERED_WAITS = (INSTANCE_UNRESPONSIVE, CREDENTIAL_UNANSWERED)  # S4.1.9: waits, not failures
_PROBED = {
    Gate.UNRESPONSIVE: INSTANCE_UNRESPONSIVE,
    Gate.CREDENTIAL_UNANSWERED: CREDENTIAL_UNANSWERED,
}


class NotAFetch(EngineError):
    """``decide_after_fetch`` was given a record whose steps stop before the fetch."""


def now_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def decide_after_fetch(
    observed: Observed,
    attempt: FetchAttempt,
    settings: OperatorSettings,
    now: Now,
    planned: FetchPlan | None = None,
) -> Plan:
    """``planned``: the plan ``decide_before_fetch`` gave for ``observed``, when the caller
    has it; else it is decided again."""
    fetch = decide_before_fetch(observed, settings, now) if planned is None else planned
    if not isinstance(fetch, FetchPlan):
        raise NotAFetch(f"{observed.namespace}/{observed.name} does not reach R15")
    plan = _answer(observed, fetch, attempt, settings, now)
    return replace(
        plan,
        store=(*fetch.store, *plan.store),
        passed=fetch.passed,
        step="R15" if attempt.gate is not None else "R16",
        full_run=True,
        outcome=plan.outcome.with_passed(fetch.passed),
    )


def _answer(
    observed: Observed,
    fetch: FetchPlan,
    attempt: FetchAttempt,
    settings: OperatorSettings,
    now: Now,
) -> Plan:
    spec, uid = fetch.spec, fetch.instance_uid
    if attempt.gate is not None:  # R15: stood off, not fetched (S4.1.6)
        return Plan(outcome=_gated(attempt, spec.uid))
    result = attempt.result
    assert result is not None
    plan: Plan
    if result.outcome is FetchOutcome.DELIVERY:
        assert result.delivery is not None
        plan = _delivered(observed, fetch, result.delivery, settings, now)
        capabilities = ",".join(sorted(result.delivery.capabilities or ()))
        notes = (
            *_discard_pending_404(observed, fetch),
            StoreNote("capabilities", uid, text=capabilities),  # S7.2
        )
        plan = replace(plan, store=(*notes, *plan.store))
    elif result.outcome is FetchOutcome.AUTHORITATIVE_NOT_FOUND:
        plan = _not_found(observed, fetch, settings, attempt.answered_at or now.wall, now)
    elif result.outcome is FetchOutcome.NOT_MATERIALIZED:  # S4.12
        message = (
            "the environment has no published revision yet (or the pinned one was "
            "collected): nothing was written"
        )
        plan = Plan(
            outcome=Outcome(
                reason="NotMaterialized",
                message=message,
                requeue=Requeue.RESYNC,
                lifecycle="Retained",
                conditions={SYNCED: Condition(SYNCED, "False", "NotMaterialized", message)},
                events=[Event("Warning", "NotMaterialized", message)],
            )
        )
    elif result.outcome is FetchOutcome.RATE_LIMITED:  # S4.1.6: no backoff step
        plan = Plan(
            outcome=failure(
                "rate limited by the Hikyo server (status 429)",
                cause=Cause.RATE_LIMITED,
                requeue=Requeue.AFTER,
                delay=resume_delay_after_429(result.retry_after),
            ),
            store=(
                StoreNote(
                    "pause", pause_scope(uid, spec.org), seconds=pause_seconds(result.retry_after)
                ),
            ),
        )
    else:
        cause = fetch_failure_cause(result.status, result.detail)
        plan = Plan(outcome=failure(f"fetch failed: {result.detail}", cause=cause))  # S4.11
    return replace(plan, outcome=replace(plan.outcome, fetched=True))


def _gated(attempt: FetchAttempt, cr_uid: str) -> Outcome:
    if attempt.gate in _PROBED:
        # S4.1.9: waiting for an instance (or this credential's requests) that stopped being
        # answered is not this CR's failure: no write, its conditions stay as they were; a
        # probe finds out when it is answered again.
        delay = spread(max(attempt.wait, PROBE_INTERVAL_SECONDS), cr_uid)
        return waiting(_PROBED[attempt.gate], delay)
    if attempt.gate is Gate.PAUSED:
        # Back at the pause's end, in the order the CRs waiting on it became due (S4.1.6).
        return waiting(INSTANCE_PAUSED, resume_delay_while_paused(attempt.wait))
    return waiting("Paced", attempt.wait)


# -- R16: a valid 200 ------------------------------------------------------------------------


def _delivered(
    observed: Observed,
    fetch: FetchPlan,
    delivery: Delivery,
    settings: OperatorSettings,
    now: Now,
) -> Plan:
    stored_conditions = {c["type"]: c for c in observed.status.get("conditions") or []}
    findings = expiry.evaluate(  # S4.13 first
        delivery,
        stored_conditions,
        now.at,
        operator_minted=fetch.spec.credential_service_account is not None,
    )
    if delivery.current:
        plan = Plan(
            outcome=Outcome(
                reason="Current",
                requeue=Requeue.RESYNC,
                lifecycle="Synced",
                conditions={
                    SYNCED: Condition(SYNCED, "True", "Current", "the delivered content is current")
                },
            )
        )
        stamp = observed.status.get("stamp")
        if stamp:  # R16: read-only S6.5, no patches and no event (S4.17)
            plan = plan_rollout(plan, observed, fetch, settings, stamp, patch=False, now=now)
    else:
        plan = _full_delivery(observed, fetch, delivery, settings, now)
    outcome = plan.outcome
    with_findings = replace(
        outcome,
        conditions={**findings.conditions, **outcome.conditions},
        status={**findings.status, **outcome.status},
        events=[*findings.events, *outcome.events],
    )
    return replace(plan, outcome=with_findings)


def _full_delivery(
    observed: Observed,
    fetch: FetchPlan,
    delivery: Delivery,
    settings: OperatorSettings,
    now: Now,
) -> Plan:
    content = deliver(fetch.spec, delivery.keys)  # S4.4/S4.5, then S11's template or format
    if isinstance(content, ContentRefusal):
        condition = Condition(DELIVERY, "False", content.reason, content.message, content.facts)
        if content.withdraw_typed:  # S4.10.2 via a valid 200
            return withdraw_plan(observed, fetch, settings, now, condition)
        # S5.4: a Delivery refusal clears the cursor and leaves Synced as it was.
        return Plan(outcome=refusal(condition, clear_cursor=True))
    return _write(observed, fetch, content, delivery, settings, now)


def _write(
    observed: Observed,
    fetch: FetchPlan,
    content: Content,
    delivery: Delivery,
    settings: OperatorSettings,
    now: Now,
) -> Plan:
    """S4.8, S4.9: Secret first (verified), then the status carries the cursor, last."""
    spec, target = fetch.spec, fetch.target
    write = policy_write(spec)  # S4.8 whole, or S11.4's keys beside other managers'
    refused = write.refusal(spec, target, content.data)
    if refused is not None:
        return Plan(outcome=refused)
    changed = write.changes(target, content.data)
    status = {
        "cursor": delivery.cursor,
        "cursorBinding": fetch.binding,
        "stamp": compute_stamp(fetch.key, content.data),
        "keyCount": len(content.data),
    }
    if target is not None:
        status |= managed_status(target)
    if changed or not observed.status.get("lastDelivery"):
        status["lastDelivery"] = now_text(now.at)
    events = []
    if changed:
        verb = "created" if target is None else "updated"
        events.append(
            Event(
                "Normal",
                "Delivered",
                f"Secret {spec.target_name} {verb} with {len(content.data)} keys",
            )
        )
    delivery_condition: Condition | None = None
    if content.missing:
        delivery_condition = Condition(
            DELIVERY,
            "False",
            "KeysMissing",
            f"the server did not deliver mapped keys {key_list(content.missing)}; their "
            "destinations are absent from the Secret",
            {"keys": key_list(content.missing)},
        )
    elif content.env_skip:
        delivery_condition = Condition(
            DELIVERY,
            "True",
            "EnvFromSkip",
            f"destinations {key_list(content.env_skip)} may be skipped by envFrom without "
            "relaxed environment variable validation",
            {"keys": key_list(content.env_skip)},
        )
    if delivery_condition is not None:
        events.append(Event("Warning", delivery_condition.reason, delivery_condition.message))
    outcome = Outcome(
        reason="Delivered",
        message=f"{len(content.data)} keys",
        requeue=Requeue.RESYNC,
        lifecycle="Synced",
        conditions={
            SYNCED: Condition(
                SYNCED,
                "True",
                "Delivered",
                f"Secret {spec.target_name} holds the delivered content",
            ),
            SCRUBBED: None,
            DELIVERY: delivery_condition,
        },
        status=status,
        events=events,
        wrote_secret=changed,
    )
    secret = None
    if changed:
        secret = SecretAction(
            write.kind,
            spec.namespace,
            spec.target_name,
            spec.uid,
            spec,
            target,
            content.data,
        )
    plan = Plan(outcome=outcome, secret=secret)
    return plan_rollout(plan, observed, fetch, settings, status["stamp"], patch=True, now=now)


# -- R16: an authoritative 404 (S4.10) ---------------------------------------------------------


def _not_found(
    observed: Observed, fetch: FetchPlan, settings: OperatorSettings, answered: float, now: Now
) -> Plan:
    """S4.10.0: act on an authoritative 404 only when a second, cursor-less one confirms it;
    ``answered`` is the wall time of this 404, which the two are spaced by."""
    spec = fetch.spec
    already_scrubbed = any(
        c.get("type") == SCRUBBED and c.get("status") == "True"
        for c in observed.status.get("conditions") or []
    )
    wait = settings.not_found_confirmation_seconds
    if not already_scrubbed:
        seen = observed.not_found or None
        if seen and (seen[0] != fetch.binding or answered - seen[1] > NOT_FOUND_RECORD_TTL):
            seen = None
        if seen is None:
            note = StoreNote("record_not_found", spec.uid, text=fetch.binding, seconds=answered)
            return Plan(outcome=_confirming(wait), store=(note,))
        if fetch.cursor is not None or answered - seen[1] < wait:
            return Plan(outcome=_confirming(max(wait - (answered - seen[1]), 1.0)))
    if spec.target_type == OPAQUE:
        plan = scrub_plan(observed, fetch, settings, now)
    else:
        plan = withdraw_plan(observed, fetch, settings, now, None)
    return replace(plan, store=(*_discard_pending_404(observed, fetch), *plan.store))


def _discard_pending_404(observed: Observed, fetch: FetchPlan) -> list[StoreNote]:
    """S4.10.0: a 200 or the scrub it confirmed ends a pending 404 record.

    Only a record R13 read needs deleting: a key runs once at a time, so none can have been
    recorded since, and one that R13 already discarded (a binding change) is gone.
    """
    clear = StoreNote("clear_not_found", fetch.spec.uid)
    if observed.not_found is None or clear in fetch.store:
        return []
    return [clear]


def _confirming(delay: float) -> Outcome:
    outcome = failure(
        "not found; confirming before acting (S4.10.0)",
        cause=Cause.CONFIRMING,
        requeue=Requeue.AFTER,
        delay=delay,
    )
    return replace(outcome, forced_full_next=True)


# -- what only the writes can tell ---------------------------------------------------------------


def settle_secret(plan: Plan, written: SecretObject | None) -> Outcome:
    """The Secret write held: the status records the Secret as written (or its absence)."""
    action = plan.secret
    assert action is not None
    outcome = plan.outcome
    if action.kind not in (WriteKind.CONVERGE, WriteKind.MERGE, WriteKind.EMPTY, WriteKind.UNMERGE):
        return outcome
    outcome = outcome.with_status(managed_status(written))
    # The target as the write found it, or absent.
    if action.kind in (WriteKind.EMPTY, WriteKind.UNMERGE):
        message = scrubbed_message(
            action.name, written is not None, merged=action.kind == WriteKind.UNMERGE
        )
        scrubbed = Condition(SCRUBBED, "True", "AuthorizationWithdrawn", message)
        events = [
            replace(e, message=message) if e.reason == "AuthorizationWithdrawn" else e
            for e in outcome.events
        ]
        outcome = replace(outcome, message=message, events=events).with_condition(
            SCRUBBED, scrubbed
        )
    return outcome


def secret_write_failed(message: str) -> Outcome:
    """S4.8.4, S4.10: the write or its verification failed; the cursor goes, the Secret stays."""
    return failure(message, clear_cursor=True)
