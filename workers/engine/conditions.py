"""The closed condition/reason set (S5.1), the Ready rule (S5.2) and condition bookkeeping.

An unlisted (type, status, reason) is a bug: ``Condition`` refuses it at construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

READY = "Ready"
SYNCED = "Synced"
DESIGNATION = "Designation"
CONFLICT = "Conflict"
DELIVERY = "Delivery"
SCRUBBED = "Scrubbed"
ROLLOUT = "Rollout"
CREDENTIAL_EXPIRY = "CredentialExpiry"
PIN_EXPIRY = "PinExpiry"
UNRECONCILED = "Unreconciled"

# Canonical order of the status list, so equal sets compare equal (S4.17).
TYPE_ORDER = (
    READY,
    SYNCED,
    DESIGNATION,
    CONFLICT,
    DELIVERY,
    SCRUBBED,
    ROLLOUT,
    CREDENTIAL_EXPIRY,
    PIN_EXPIRY,
    UNRECONCILED,
)

# S5.1: type -> status -> reasons, each with its one-line meaning.
REASONS: dict[str, dict[str, dict[str, str]]] = {
    READY: {
        "True": {"Reconciled": "S5.2 holds"},
        "False": {"Blocked": "S5.2 fails; the message names the first blocker"},
    },
    SYNCED: {
        "True": {
            "Delivered": "a full delivery was written",
            "Current": "the cursor is current; nothing was written",
        },
        "False": {
            "FetchFailed": "a failure; the Secret is retained and the fetch retried",
            "NotMaterialized": "the environment has no published revision (409)",
        },
    },
    DESIGNATION: {
        "False": {
            "SecretNotDesignated": "the bootstrap Secret is missing, unlabelled or malformed",
            "ServiceAccountNotDesignated": "the ServiceAccount is missing or not designated",
            "InstanceMismatch": "the credential is labelled for another instance",
            "AudienceMissing": "federation needs HikyoInstance.spec.audience",
        }
    },
    CONFLICT: {
        "True": {
            "ManagedSecretNotOwned": "the target exists and is not controlled by this CR",
            "TargetClaimed": "an older HikyoSecret manages the same target",
            "TargetTypeImmutable": "the existing target has another type",
            "MergeTargetMissing": "creationPolicy Merge and the target does not exist (S11.4)",
            "KeyOwnedElsewhere": "creationPolicy Merge and another manager owns keys (S11.4)",
        }
    },
    DELIVERY: {
        "False": {
            "UndeliveredSecrets": "secret keys arrived presence-only; nothing was written",
            "KeysMissing": "sources missing, or a required destination unmapped or withdrawn",
            "LoaderControlUnacknowledged": "loader-control keys are not exactly acknowledged",
            "InvalidSecretData": "content the Secret type or size limit forbids",
            "NativeSecretTypesDisabled": "typed targets need nativeSecretTypes",
            "InvalidTemplate": "a template or file format cannot be used (S11.2, S11.3)",
        },
        "True": {"EnvFromSkip": "envFrom may skip some destinations (warning only)"},
    },
    SCRUBBED: {
        "True": {"AuthorizationWithdrawn": "the target was emptied, deleted or left absent"}
    },
    ROLLOUT: {"False": {"Stalled": "a workload did not progress, or its stamp patch failed"}},
    CREDENTIAL_EXPIRY: {
        "True": {"ExpiresSoon": "the credential expires within 7 days", "Expired": "expired"}
    },
    PIN_EXPIRY: {"True": {"PinExpired": "the durable pin's retention has expired"}},
    UNRECONCILED: {"True": {"NamespaceNotBound": "the operator lacks RBAC in this namespace"}},
}

# S5.2: Delivery reasons that block Ready.
BLOCKING_DELIVERY_REASONS = frozenset(
    {
        "UndeliveredSecrets",
        "LoaderControlUnacknowledged",
        "InvalidSecretData",
        "NativeSecretTypesDisabled",
        "InvalidTemplate",  # S11.5
    }
)

LIFECYCLES = ("Synced", "Retained", "Scrubbed", "Refused", "Unreconciled")


@dataclass(frozen=True)
class Condition:
    """One S5.1 condition. ``facts`` are the names its remediation needs (keys, cause,
    the instance a credential is labelled for...), as data beside the message so nothing has
    to read them back out of it; names only, never a value (S5.6)."""

    type: str
    status: str
    reason: str
    message: str
    facts: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.reason not in REASONS.get(self.type, {}).get(self.status, {}):
            raise ValueError(f"{self.type}={self.status}/{self.reason} is not in S5.1")


def as_dict(condition: Condition) -> dict[str, Any]:
    stored: dict[str, Any] = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
    }
    if condition.facts:
        stored["facts"] = dict(sorted(condition.facts.items()))
    return stored


def stored_facts(condition: Mapping[str, Any] | None) -> dict[str, str]:
    """The facts a stored condition carries (none when an older operator wrote it)."""
    facts = (condition or {}).get("facts")
    if not isinstance(facts, Mapping):
        return {}
    return {str(k): v for k, v in facts.items() if isinstance(v, str) and v}


def ready_condition(
    conditions: Mapping[str, Mapping[str, Any]], lifecycle: str | None
) -> Condition:
    """S5.2 over the conditions as they will be stored; the message names the first blocker."""
    blocker = first_blocker(conditions, lifecycle)
    if blocker is None:
        return Condition(READY, "True", "Reconciled", "delivered and current")
    return Condition(READY, "False", "Blocked", f"not ready: {blocker}")


def first_blocker(conditions: Mapping[str, Mapping[str, Any]], lifecycle: str | None) -> str | None:
    def held(type_: str, status: str) -> Mapping[str, Any] | None:
        found = conditions.get(type_)
        return found if found and found.get("status") == status else None

    for type_, status in (
        (UNRECONCILED, "True"),
        (DESIGNATION, "False"),
        (CONFLICT, "True"),
        (SCRUBBED, "True"),
    ):
        found = held(type_, status)
        if found:
            return f"{type_}/{found['reason']}"
    delivery = held(DELIVERY, "False")
    if delivery and (
        delivery["reason"] in BLOCKING_DELIVERY_REASONS
        or (delivery["reason"] == "KeysMissing" and lifecycle == "Refused")
    ):
        return f"{DELIVERY}/{delivery['reason']}"
    synced = conditions.get(SYNCED)
    if synced is None:
        return f"{SYNCED}/absent"
    if synced.get("status") != "True":
        return f"{SYNCED}/{synced['reason']}"
    if lifecycle != "Synced":
        return f"lifecycle {lifecycle or 'unset'}"
    return None


def merge_conditions(
    stored: list[Mapping[str, Any]],
    changes: Mapping[str, Condition | None],
    *,
    lifecycle: str | None,
    generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """S5.4: apply set/remove changes, keep untouched conditions as they are, recompute Ready.

    ``lastTransitionTime`` moves only when the status flips; ``observedGeneration`` is the
    generation at which a condition was last evaluated.
    """
    by_type: dict[str, dict[str, Any]] = {c["type"]: dict(c) for c in stored if "type" in c}
    for type_, condition in changes.items():
        if condition is None:
            by_type.pop(type_, None)
            continue
        by_type[type_] = _evaluated(by_type.get(type_), condition, generation, now)
    by_type.pop(READY, None)
    by_type[READY] = _evaluated(
        next((dict(c) for c in stored if c.get("type") == READY), None),
        ready_condition(by_type, lifecycle),
        generation,
        now,
    )
    order = {type_: index for index, type_ in enumerate(TYPE_ORDER)}
    return sorted(by_type.values(), key=lambda c: (order.get(c["type"], len(order)), c["type"]))


def _evaluated(
    previous: Mapping[str, Any] | None, condition: Condition, generation: int, now: str
) -> dict[str, Any]:
    transitioned = previous is None or previous.get("status") != condition.status
    return {
        **as_dict(condition),
        "observedGeneration": generation,
        "lastTransitionTime": now if transitioned else previous.get("lastTransitionTime", now),
    }
