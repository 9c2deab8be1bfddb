"""The desired CR status from the stored one and an Outcome, and the no-op rule (S4.17)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .conditions import merge_conditions
from .force_sync import handled_record
from .outcome import Outcome

# S4.17's fields, and the facts beside the message (a pure function of the same outcome): a
# condition an older operator stored without them is written once more, with them.
_CONDITION_FIELDS = ("type", "status", "reason", "message", "facts", "observedGeneration")


def desired_status(
    stored: Mapping[str, Any],
    outcome: Outcome,
    *,
    generation: int,
    now: str,
    operator_namespace: str,
) -> dict[str, Any]:
    status = {k: v for k, v in stored.items() if k != "lastFetch"}
    for name, value in outcome.status.items():
        if value is None:
            status.pop(name, None)
        else:
            status[name] = value
    if outcome.lifecycle is not None:
        status["lifecycle"] = outcome.lifecycle
    status["conditions"] = merge_conditions(
        stored.get("conditions") or [],
        outcome.conditions,
        lifecycle=status.get("lifecycle"),
        generation=generation,
        now=now,
    )
    if outcome.forced_sync:
        status["lastForcedSync"] = handled_record(
            outcome.forced_sync,
            outcome.reason,
            fetched=outcome.fetched,
            wrote_secret=outcome.wrote_secret,
        )
    status["observedGeneration"] = generation
    status["operatorNamespace"] = operator_namespace  # S4.1.7
    return status


def _comparable(status: Mapping[str, Any]) -> dict[str, Any]:
    view = {k: v for k, v in status.items() if k not in ("lastFetch", "conditions")}
    view["conditions"] = [
        {field: c.get(field) for field in _CONDITION_FIELDS} for c in status.get("conditions") or []
    ]
    return view


def status_differs(stored: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """S4.17: any field but lastFetch; conditions by type, status, reason, message, facts and
    generation."""
    return _comparable(stored) != _comparable(desired)
