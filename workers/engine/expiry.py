"""Credential expiry and pin conditions (S4.13), on every valid 200. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from .conditions import CREDENTIAL_EXPIRY, PIN_EXPIRY, Condition
from .fetched import Delivery
from .outcome import Event

EXPIRES_SOON = timedelta(days=7)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ExpiryFindings:
    conditions: dict[str, Condition | None] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)


def evaluate(
    delivery: Delivery,
    stored_conditions: Mapping[str, Mapping[str, Any]],
    now: datetime,
    *,
    operator_minted: bool = False,
) -> ExpiryFindings:
    """``operator_minted``: the credential is a token the operator requests and renews itself
    (``auth.serviceAccountRef``), whose expiry is not the user's to act on (rev 3)."""
    found = ExpiryFindings()
    # A minted token's expiry moves with every renewal: storing it would write the status on
    # every resync (S4.17) and tell the user to rotate what the operator rotates.
    expiry = None if operator_minted else delivery.credential_expires_at
    if expiry is None:
        found.conditions[CREDENTIAL_EXPIRY] = None
        found.status["credentialExpiresAt"] = None
    else:
        instant = rfc3339(expiry)
        found.status["credentialExpiresAt"] = instant
        condition = None
        if now >= expiry:
            condition = Condition(
                CREDENTIAL_EXPIRY,
                "True",
                "Expired",
                f"the credential expired at {instant}: replace it",
            )
        elif expiry - now <= EXPIRES_SOON:
            condition = Condition(
                CREDENTIAL_EXPIRY,
                "True",
                "ExpiresSoon",
                f"the credential expires at {instant}: rotate it before then",
            )
        found.conditions[CREDENTIAL_EXPIRY] = condition
        if condition is not None and _expiry_event_due(
            stored_conditions.get(CREDENTIAL_EXPIRY), condition
        ):
            found.events.append(Event("Warning", condition.reason, condition.message))

    if delivery.pin_expired:
        message = (
            f"the durable pin on revision {delivery.pinned_revision} is past its retention"
            if delivery.pinned_revision
            else "the durable pin is past its retention"
        )
        found.conditions[PIN_EXPIRY] = Condition(PIN_EXPIRY, "True", "PinExpired", message)
        found.events.append(Event("Warning", "PinExpired", message))  # on every such answer
    else:
        found.conditions[PIN_EXPIRY] = None
    found.status["pinnedRevision"] = delivery.pinned_revision
    return found


def _expiry_event_due(stored: Mapping[str, Any] | None, condition: Condition) -> bool:
    """A Warning only when the condition appears or changes reason (S4.13)."""
    return stored is None or stored.get("reason") != condition.reason
