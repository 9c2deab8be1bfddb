"""Why a HikyoSecret is not Ready and what to do (issue 35 item 1), for the list, the overview
and the detail page alike: the Ready rule's first blocker with its message and remediation, the
informational problems (``KeysMissing``, ``EnvFromSkip``, ``Rollout=False/Stalled``, expiry)
as warnings, and a 429 pause of (instance, org) with its end.

Pure over a stored row. The texts are ``remediation.remediation``'s, the function ``manage.py
explain`` prints, filled the way ``explain.status_remediation`` fills them: the spec's names the
recorder kept (``remediation.spec_context``) and the facts stored with the condition
(``Condition.facts``). Names, reasons and messages only: never a value (S0.4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from workers.engine.conditions import READY, SYNCED, stored_facts
from workers.engine.explain import Blocker, blocking_condition
from workers.engine.facts import Cause
from workers.engine.remediation import Part, remediation_parts
from workers.engine.remediation_context import condition_context

PAUSED_REASON = "InstancePaused"

# The states a row is shown in (the list's "state" column and filter, the CSS classes).
READY_STATE, WARNING_STATE, BLOCKED_STATE, PAUSED_STATE = "ready", "warning", "blocked", "paused"


class _Remedied:
    """What to do, as ``parts`` (prose and commands, remediation_parts) and as one text."""

    parts: tuple[Part, ...]

    @property
    def remediation(self) -> str:
        """The whole text, as ``explain`` prints it."""
        return "".join(part.text for part in self.parts)


@dataclass(frozen=True)
class Problem(_Remedied):
    """One condition that is not as it should be: ``Type/Reason``, its message, what to do."""

    name: str
    reason: str
    message: str
    parts: tuple[Part, ...]
    cause: str = ""  # the condition's cause fact (facts.Cause), when it has one


@dataclass(frozen=True)
class Pause(_Remedied):
    """A 429 pause of (instance, org) holding the CR back until ``until`` (S4.1.6)."""

    instance: str
    org: str
    until: datetime
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Waiting(_Remedied):
    """S4.1.9: the CR's requests wait on an instance that does not answer, since ``since``;
    its last try was ``last_try``. A wait, not a failure: its conditions stay as they were."""

    reason: str
    instance: str
    since: datetime
    last_try: datetime | None
    parts: tuple[Part, ...]


@dataclass(frozen=True)
class Line:
    """One line of "why": a problem's kind (the state it gives), ``Type/Reason`` and message;
    a pause's line carries the pause (instance, org, end)."""

    kind: str
    name: str
    message: str
    pause: Pause | None = None
    waiting: Waiting | None = None


@dataclass(frozen=True)
class Why:
    ready: bool | None
    blocker: Problem | None
    warnings: list[Problem] = field(default_factory=list)
    pause: Pause | None = None
    earlier: list[Problem] = field(default_factory=list)  # superseded: shown as history
    waiting: Waiting | None = None

    @property
    def instance_missing(self) -> bool:
        """R5 found the named HikyoInstance missing (its FetchFailed message says so)."""
        blocker = self.blocker
        return (
            blocker is not None
            and blocker.reason == "FetchFailed"
            and blocker.cause == Cause.INSTANCE_MISSING
        )

    @property
    def lines(self) -> list[Line]:
        """What the page shows of it, one line each: the pause, the blocker, the warnings."""
        found = []
        if self.waiting is not None:
            found.append(Line(PAUSED_STATE, self.waiting.reason, "", waiting=self.waiting))
        if self.pause is not None:
            found.append(Line(PAUSED_STATE, PAUSED_REASON, "", self.pause))
        if self.blocker is not None:
            found.append(Line(BLOCKED_STATE, self.blocker.name, self.blocker.message))
        found.extend(Line(WARNING_STATE, w.name, w.message) for w in self.warnings)
        return found

    @property
    def state(self) -> str:
        if self.pause is not None or self.waiting is not None:
            return PAUSED_STATE
        if self.blocker is not None and self.ready is not True:
            return BLOCKED_STATE
        return WARNING_STATE if self.warnings else READY_STATE


def problem(
    name: str, reason: str, names: Mapping[str, str], condition: Mapping[str, Any] | None
) -> Problem:
    """One stored condition (None: the blocker has no condition of its own) with explain's
    text, filled with the recorded names and the condition's facts."""
    message = str((condition or {}).get("message") or "")
    parts = tuple(remediation_parts(reason, condition_context(names, condition)))
    return Problem(name, reason, message, parts, stored_facts(condition).get("cause", ""))


def why(
    *,
    conditions: Sequence[Mapping[str, Any]],
    lifecycle: str,
    ready: bool | None,
    names: Mapping[str, str],
    paused_until: datetime | None,
    now: datetime,
    fetched_ok_at: datetime | None = None,
    waiting: tuple[str, datetime | None, datetime | None] = ("", None, None),
) -> Why:
    """The first blocker, the warnings and a pause still running at ``now``; a failed Synced
    from before the last successful fetch (``fetched_ok_at``) is history, not a warning."""
    stored = [c for c in conditions if isinstance(c, Mapping) and "type" in c]
    blocker = blocking_condition({"conditions": stored, "lifecycle": lifecycle or None})
    pause = None
    if paused_until is not None and paused_until > now:
        instance, org = names.get("instance", ""), names.get("org", "")
        pause = Pause(instance, org, paused_until, tuple(remediation_parts(PAUSED_REASON, names)))
    blocking = None
    # With no condition of its own ("no delivery attempted yet", an unset lifecycle) the
    # blocker is only that the pause held the first fetch back (S4.1.6): the pause says why.
    if blocker is not None and not (pause is not None and blocker.condition is None):
        blocking = problem(blocker.name, blocker.reason or blocker.name, names, blocker.condition)
        if blocker.condition is None:  # "no delivery attempted yet", a lifecycle
            blocking = replace(blocking, message=blocker.message)
    warnings, earlier = [], []
    for condition in informational(stored, blocker):
        reason = str(condition.get("reason") or "")
        found = problem(f"{condition['type']}/{reason}", reason, names, condition)
        (earlier if superseded(condition, fetched_ok_at) else warnings).append(found)
    reason, since, last_try = waiting
    waits = None
    if reason and since is not None:
        parts = tuple(remediation_parts(reason, names))
        waits = Waiting(reason, names.get("instance", ""), since, last_try, parts)
    return Why(ready, blocking, warnings, pause, earlier, waits)


def superseded(condition: Mapping[str, Any], fetched_ok_at: datetime | None) -> bool:
    """A Synced=False from before the last successful fetch: that fetch would have set Synced
    anew had its run not stopped at a refusal that leaves Synced as it was (S5.4), so the
    failure it tells of is over (issue 49: stale "did not answer in time" warnings)."""
    if fetched_ok_at is None or condition.get("type") != SYNCED:
        return False
    if condition.get("status") == "True":
        return False
    try:
        since = datetime.fromisoformat(str(condition.get("lastTransitionTime") or ""))
    except ValueError:
        return False
    return since < fetched_ok_at


def informational(
    conditions: Sequence[Mapping[str, Any]], blocker: Blocker | None
) -> list[Mapping[str, Any]]:
    """The conditions that tell of something to look at besides the blocker: every S5.1
    condition but Ready and a True Synced is one (S5.1 has no other good news)."""
    found = []
    for condition in conditions:
        type_ = condition.get("type")
        if type_ == READY or (type_ == SYNCED and condition.get("status") == "True"):
            continue
        if blocker is None or condition is not blocker.condition:
            found.append(condition)
    return found


def warning_names(
    conditions: Sequence[Mapping[str, Any]],
    blocker: Blocker | None,
    fetched_ok_at: datetime | None = None,
) -> str:
    """``Type/Reason, ...`` of the warnings, as the recorder keeps it for filters and search."""
    return ", ".join(
        f"{c['type']}/{c.get('reason') or ''}"
        for c in informational(conditions, blocker)
        if not superseded(c, fetched_ok_at)
    )


def of(tracked: Any, now: datetime) -> Why:
    """``why`` over a TrackedObject (or anything with its fields)."""
    return why(
        conditions=list(tracked.conditions or []),
        lifecycle=tracked.lifecycle,
        ready=tracked.ready,
        names=dict(tracked.names or {}),
        paused_until=tracked.paused_until,
        now=now,
        fetched_ok_at=tracked.last_fetch_ok_at,
        waiting=(tracked.waiting_reason, tracked.waiting_since, tracked.last_checked_at),
    )
