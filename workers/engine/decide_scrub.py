"""S4.10, pure: the plans that take a Secret's content away when the Hikyo server no longer
authorizes the delivery: empty an Opaque target (S4.10.1; under Merge only this HikyoSecret's
keys, S11.4) or delete a typed one (S4.10.2), with the empty-content stamp that restarts the
opted-in workloads."""

from __future__ import annotations

from .conditions import DELIVERY, SCRUBBED, SYNCED, Condition
from .decide_rollout import plan_rollout
from .merge import MERGE
from .observed import Observed
from .outcome import Event, Outcome, Requeue
from .plan import FetchPlan, Now, Plan, SecretAction, WriteKind
from .ports import SecretObject
from .settings import OperatorSettings
from .stamp import empty_content_stamp


def managed_status(secret: SecretObject | None) -> dict[str, str | None]:
    """The status fields naming the Secret as written, or its absence (None)."""
    return {
        "managedSecretUID": secret.uid if secret else None,
        "managedSecretResourceVersion": secret.resource_version if secret else None,
    }


def scrub_plan(observed: Observed, fetch: FetchPlan, settings: OperatorSettings, now: Now) -> Plan:
    """S4.10.1: empty an Opaque target; an absent one stays absent. Under Merge, remove only
    this CR's keys (an empty apply, S11.4)."""
    spec = fetch.spec
    kind = WriteKind.UNMERGE if spec.creation_policy == MERGE else WriteKind.EMPTY
    action = SecretAction(kind, spec.namespace, spec.target_name, spec.uid, spec)
    return _scrubbed(observed, fetch, settings, now, action, None)


def withdraw_plan(
    observed: Observed,
    fetch: FetchPlan,
    settings: OperatorSettings,
    now: Now,
    delivery: Condition | None,
) -> Plan:
    """S4.10.2: a typed target cannot be empty, so it is deleted, with preconditions."""
    spec = fetch.spec
    action = SecretAction(WriteKind.DELETE, spec.namespace, spec.target_name, spec.uid, spec)
    return _scrubbed(observed, fetch, settings, now, action, delivery)


def scrubbed_message(target_name: str, emptied: bool, *, merged: bool = False) -> str:
    if merged and emptied:  # S11.4: only our keys go; the Secret is someone else's
        what = "left without this HikyoSecret's keys"
    else:
        what = "emptied" if emptied else "deleted or left absent"
    return f"the Hikyo server no longer authorizes this delivery: Secret {target_name} was {what}"


def _scrubbed(
    observed: Observed,
    fetch: FetchPlan,
    settings: OperatorSettings,
    now: Now,
    action: SecretAction,
    delivery: Condition | None,
) -> Plan:
    spec = fetch.spec
    message = scrubbed_message(
        spec.target_name,
        action.kind in (WriteKind.EMPTY, WriteKind.UNMERGE) and fetch.target is not None,
        merged=action.kind == WriteKind.UNMERGE,
    )
    conditions: dict[str, Condition | None] = {
        SCRUBBED: Condition(SCRUBBED, "True", "AuthorizationWithdrawn", message),
        SYNCED: None,
    }
    events = [Event("Warning", "AuthorizationWithdrawn", message)]
    if delivery is not None:
        conditions[DELIVERY] = delivery
        events.append(Event("Warning", delivery.reason, delivery.message))
    outcome = Outcome(
        reason="AuthorizationWithdrawn",
        message=message,
        requeue=Requeue.RESYNC,
        lifecycle="Scrubbed",
        conditions=conditions,
        events=events,
        status={
            "cursor": None,
            "cursorBinding": None,
            "stamp": empty_content_stamp(fetch.key),
            "keyCount": 0,
            **managed_status(None),
        },
        wrote_secret=True,
    )
    plan = Plan(outcome=outcome, secret=action)
    # S4.10.1 (3)/(5), S4.10.2 (4): the empty-content stamp restarts the opted-in workloads.
    stamp = outcome.status["stamp"]
    return plan_rollout(plan, observed, fetch, settings, stamp, patch=True, now=now)
