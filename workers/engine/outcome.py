"""What one reconcile decided: conditions, status fields, events and when to run again.

The queue decides timing from ``requeue`` (controller-runtime's Result, pattern 2); the apply
step writes the status once, last (S4.9).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from .conditions import SYNCED, Condition
from .ports import Event


class Requeue(enum.Enum):
    RESYNC = "resync"  # after resyncInterval x jitter (S4.1.3)
    BACKOFF = "backoff"  # per-CR exponential backoff
    AFTER = "after"  # after ``delay`` seconds, no backoff step (first 404, 429)
    NONE = "none"  # nothing to do until a watch event


# Status fields a Delivery refusal, a failed write or a scrub clears (S4.8.5, S4.9).
CURSOR_FIELDS = ("cursor", "cursorBinding")


@dataclass(frozen=True)
class Outcome:
    """One reconcile's decision. ``status`` maps field -> value, None meaning "remove".

    Frozen: a step that changes the decision returns a new one (``dataclasses.replace`` or the
    methods here); nothing changes an outcome, or its maps and lists, in place."""

    reason: str
    requeue: Requeue
    message: str = ""
    delay: float | None = None
    lifecycle: str | None = None  # None keeps the stored lifecycle
    conditions: dict[str, Condition | None] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict, repr=False)  # may hold the cursor
    events: list[Event] = field(default_factory=list)
    write_status: bool = True  # False: stop without any write (R0, terminating namespace)
    forced_full_next: bool = False  # withhold the cursor on the next run (S4.10.0)
    fetched: bool = False
    wrote_secret: bool = False
    forced_sync: str | None = None  # the hikyo.dev/force-sync value this run handles

    def with_passed(self, passed: Iterable[str]) -> Outcome:
        """S5.4: the passed steps remove their conditions unless this outcome sets them; an
        outcome that writes no status is left as it is."""
        if not self.write_status:
            return self
        return replace(self, conditions={**dict.fromkeys(passed), **self.conditions})

    def clearing_cursor(self) -> Outcome:
        return self.with_status(dict.fromkeys(CURSOR_FIELDS))

    def with_status(self, fields: dict[str, Any]) -> Outcome:
        """The same outcome with ``fields`` set in its status (None removes a field)."""
        return replace(self, status={**self.status, **fields})

    def with_condition(self, type_: str, condition: Condition | None) -> Outcome:
        return replace(self, conditions={**self.conditions, type_: condition})

    def adding(self, *events: Event) -> Outcome:
        return replace(self, events=[*self.events, *events])


def failure(
    message: str,
    *,
    cause: str = "",
    requeue: Requeue = Requeue.BACKOFF,
    delay: float | None = None,
    clear_cursor: bool = False,
) -> Outcome:
    """S4.11: Synced=False/FetchFailed, Retained, Warning event; nothing else is touched.
    ``cause`` (a ``Cause``) says which of FetchFailed's causes this is, for the remediation."""
    facts = {"cause": cause} if cause else {}
    outcome = Outcome(
        reason="FetchFailed",
        message=message,
        requeue=requeue,
        delay=delay,
        lifecycle="Retained",
        conditions={SYNCED: Condition(SYNCED, "False", "FetchFailed", message, facts)},
        events=[Event("Warning", "FetchFailed", message)],
    )
    return outcome.clearing_cursor() if clear_cursor else outcome


def refusal(
    condition: Condition, *, clear_cursor: bool = False, lifecycle: str = "Refused"
) -> Outcome:
    """A deliberate decline (Designation, Conflict, Delivery): Warning event, requeue at resync."""
    outcome = Outcome(
        reason=condition.reason,
        message=condition.message,
        requeue=Requeue.RESYNC,
        lifecycle=lifecycle,
        conditions={condition.type: condition},
        events=[Event("Warning", condition.reason, condition.message)],
    )
    return outcome.clearing_cursor() if clear_cursor else outcome


def stop_quietly(reason: str, message: str = "") -> Outcome:
    """R0 and friends: nothing to write, nothing to schedule."""
    return Outcome(reason=reason, message=message, requeue=Requeue.NONE, write_status=False)


def waiting(reason: str, delay: float) -> Outcome:
    """S4.1.6, S4.1.9: held back, not a failure: no write, no backoff step, run again then."""
    return Outcome(reason=reason, requeue=Requeue.AFTER, delay=delay, write_status=False)
