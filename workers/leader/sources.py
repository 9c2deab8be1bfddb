"""Watch events → keyed-queue entries (S4.1.1, S4.1.2, S4.1.6). Pure routing over plain dicts.

- HikyoSecret ADDED (initial list and relists included): healthy CRs (Synced at the current
  generation) are spread over min(resyncInterval, 5 min) at low priority; the rest go first. A
  CR that already has a due time keeps it.
- HikyoSecret MODIFIED: only when generation, deletionTimestamp or finalizers changed, never for
  status-only updates (our own status writes would loop fetches otherwise); and when a new
  ``hikyo.dev/force-sync`` value is pending (``workers.engine.force_sync``): first-sync priority,
  once per value. The status write that records the value makes it no longer pending, so it does
  not loop; a value already handled, or any other annotation change, does nothing.
- On ADDED (a restart, a leader change, a relist) a CR with a pending force-sync value is not
  healthy: it runs now, ahead of the spread, whatever due time it had.
- HikyoInstance events fan out to every CR naming the instance.
- Workload events ask for a rollout-only evaluation of the CRs whose target they consume.
"""

from __future__ import annotations

import logging
import random
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engine.conditions import CREDENTIAL_EXPIRY, LIFECYCLES, READY, UNRECONCILED, first_blocker
from ..engine.durations import DEFAULT_RESYNC_SECONDS, InvalidDuration, resync_seconds
from ..engine.force_sync import requested_value
from ..engine.ports import opted_in_targets
from ..engine.reports import heartbeat_period
from ..keys import ObjectKey
from ..queue.base import KeyedQueue, Priority

log = logging.getLogger(__name__)

SPREAD_CAP_SECONDS = 300.0  # S4.1.6: min(resyncInterval, 5 min)


@dataclass(frozen=True, slots=True)
class _Seen:
    key: ObjectKey
    generation: int
    deleting: bool
    finalizers: tuple[str, ...]
    instance: str
    target: str
    healthy: bool
    observed: bool  # status.observedGeneration == metadata.generation
    resync: float
    forced: str | None  # a hikyo.dev/force-sync value not handled yet (force_sync.py)
    lifecycle: str  # status.lifecycle, "Unreconciled" when absent
    blocker: str  # "" while status says Ready=True, else the S5.2 first blocker (readiness_of)
    expiry: str  # the CredentialExpiry=True reason (ExpiresSoon, Expired), else ""


def _seen(obj: dict[str, Any], previous: _Seen | None = None) -> _Seen:
    """One CR as the router keeps it. The previous key object is reused and the strings that
    repeat across CRs (namespace, instance, lifecycle, finalizers) are interned: the router and
    both queues hold one key per CR, and at 5,000 CRs a fresh copy of each string per watch
    event added up (issue 13, S9.6)."""
    metadata = obj["metadata"]
    spec = obj.get("spec") or {}
    key = ObjectKey(_interned(metadata["namespace"]), metadata["name"], metadata["uid"])
    if previous is not None and previous.key == key:
        key = previous.key
    return _Seen(
        key=key,
        generation=int(metadata.get("generation") or 0),
        deleting=bool(metadata.get("deletionTimestamp")),
        finalizers=_finalizers(metadata.get("finalizers")),
        instance=_interned((spec.get("instanceRef") or {}).get("name", "")),
        target=(spec.get("target") or {}).get("name", ""),
        healthy=is_healthy(obj),
        observed=(obj.get("status") or {}).get("observedGeneration")
        == obj["metadata"].get("generation"),
        resync=_resync_of(obj),
        forced=requested_value(obj),
        lifecycle=_interned(str((obj.get("status") or {}).get("lifecycle") or UNRECONCILED)),
        blocker=_interned(readiness_of(obj)),
        expiry=_interned(_credential_expiry(obj)),
    )


def _credential_expiry(obj: dict[str, Any]) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == CREDENTIAL_EXPIRY:
            return str(condition.get("reason") or "") if condition.get("status") == "True" else ""
    return ""


def readiness_of(obj: dict[str, Any]) -> str:
    """The empty string when the stored Ready condition is True; else what blocks it by S5.2,
    over the stored conditions, as ``Type/Reason`` (``Synced/absent``: never reconciled;
    ``Lifecycle/<name>``: delivered but not Synced). Names only, never a message: a bounded
    metric label."""
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or () if isinstance(c, dict)}
    ready = conditions.get(READY) or {}
    if ready.get("status") == "True":
        return ""
    lifecycle = status.get("lifecycle")
    blocker = first_blocker(conditions, lifecycle) or "Ready/Blocked"
    if blocker.startswith("lifecycle "):
        return f"Lifecycle/{lifecycle or UNRECONCILED}"
    return blocker


def _interned(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


_FINALIZER_LISTS: dict[tuple[str, ...], tuple[str, ...]] = {}  # the few distinct lists, shared


def _finalizers(listed: Any) -> tuple[str, ...]:
    finalizers = tuple(_interned(name) for name in listed or ())
    if len(_FINALIZER_LISTS) < 64:  # bounded: CRs with many different lists keep their own
        return _FINALIZER_LISTS.setdefault(finalizers, finalizers)
    return _FINALIZER_LISTS.get(finalizers, finalizers)


def is_healthy(obj: dict[str, Any]) -> bool:
    """Synced at the current generation and no force-sync pending: its next run is a resync,
    not a first sync."""
    status = obj.get("status") or {}
    return (
        status.get("lifecycle") == "Synced"
        and status.get("observedGeneration") == obj["metadata"].get("generation")
        and requested_value(obj) is None
    )


class EventRouter:
    def __init__(
        self,
        queue: KeyedQueue,
        operator_namespace: str,
        *,
        rollout_evaluation: Callable[[ObjectKey], None] | None = None,
        reports: KeyedQueue | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.queue = queue
        self.operator_namespace = operator_namespace
        self.rollout_evaluation = rollout_evaluation
        self.reports = reports
        self.rng = rng or random.Random()
        self._lock = threading.Lock()
        self._crs: dict[str, _Seen] = {}
        self._lifecycles: Counter[str] = Counter()  # of self._crs, kept in step with it
        self._blockers: Counter[str] = Counter()  # the same, by readiness_of
        self._expiries: Counter[str] = Counter()  # the same, by CredentialExpiry reason
        self._ignored: set[str] = set()

    def keys(self) -> list[ObjectKey]:
        with self._lock:
            return [seen.key for seen in self._crs.values()]

    def lifecycle_counts(self) -> dict[str, int]:
        """The CRs this router knows (the leader's view), by ``status.lifecycle``: every S5.3
        lifecycle, zeros included, plus any other value a CR holds. O(lifecycles), not O(CRs)."""
        with self._lock:
            counts = dict.fromkeys(LIFECYCLES, 0)
            counts.update((name, n) for name, n in self._lifecycles.items() if n > 0)
            return counts

    def readiness_counts(self) -> dict[str, int]:
        """The CRs this router knows by readiness: "" for Ready, else their first blocker."""
        with self._lock:
            return {blocker: n for blocker, n in self._blockers.items() if n > 0}

    def credential_expiry_counts(self) -> dict[str, int]:
        """The CRs this router knows whose credential expires soon or has (S4.13), by reason."""
        with self._lock:
            return {reason: n for reason, n in self._expiries.items() if reason and n > 0}

    # -- HikyoSecrets --------------------------------------------------------------------

    def on_secret(self, kind: str, obj: dict[str, Any], initial: bool) -> None:
        metadata = obj["metadata"]
        if metadata.get("namespace") == self.operator_namespace:  # S8.5
            if metadata["uid"] not in self._ignored:
                self._ignored.add(metadata["uid"])
                log.info(
                    "ignoring HikyoSecret %s/%s in the operator's own namespace",
                    metadata["namespace"],
                    metadata["name"],
                )
            return
        with self._lock:
            current = _seen(obj, self._crs.get(metadata["uid"]))
        log.debug(
            "%s %s generation=%s observed=%s initial=%s",
            kind,
            current.key,
            current.generation,
            current.observed,
            initial,
        )
        with self._lock:
            previous = self._crs.get(current.key.uid)
            if previous is not None:
                self._lifecycles[previous.lifecycle] -= 1
                self._blockers[previous.blocker] -= 1
                self._expiries[previous.expiry] -= 1
            if kind == "DELETED":
                self._crs.pop(current.key.uid, None)
            else:
                self._crs[current.key.uid] = current
                self._lifecycles[current.lifecycle] += 1
                self._blockers[current.blocker] += 1
                self._expiries[current.expiry] += 1
        if kind == "DELETED":
            self.queue.forget(current.key)
            if self.reports is not None:
                self.reports.forget(current.key)
            return
        changed = previous is None or (
            (previous.generation, previous.deleting, previous.finalizers)
            != (current.generation, current.deleting, current.finalizers)
        )
        # A force-sync value seen for the first time. Our status write recording it makes it
        # None (no loop); the same value again, handled or still waiting, is no news.
        newly_forced = current.forced is not None and current.forced != (
            previous.forced if previous is not None else None
        )
        if kind == "MODIFIED" or (previous is not None and changed):
            if changed or newly_forced:
                self.queue.add(current.key, priority=Priority.FIRST)
            return
        self._schedule_initial(current)  # ADDED, or listed again unchanged
        if initial:
            self._schedule_heartbeat(current)

    def _schedule_heartbeat(self, seen: _Seen) -> None:
        """S7.4 heartbeats: a CR with no timer (a new leader, a lost store) reports within P."""
        if self.reports is None:
            return
        self.reports.schedule(
            seen.key,
            delay=self.rng.uniform(0, heartbeat_period(seen.resync)),
            priority=Priority.RESYNC,
            only_if_unscheduled=True,
        )

    def reschedule_reports(self) -> int:
        """S8.4: the report queue's store was lost: every CR in reach gets its heartbeat timer."""
        with self._lock:
            known = list(self._crs.values())
        for seen in known:
            self._schedule_heartbeat(seen)
        return len(known)

    def _schedule_initial(self, seen: _Seen) -> None:
        """S4.1.6: healthy CRs spread over min(resyncInterval, 5 min); all others first.

        A CR whose generation is not yet observed (new, or edited while nobody watched: a
        leader change, an apiserver restart) or with a force-sync value pending (asked for while
        nobody watched, or before a leader died) runs now. A CR processed at its current
        generation keeps the due time it has (S4.1.2), e.g. its backoff after a failure.
        """
        if seen.deleting or not seen.observed or seen.forced is not None:
            self.queue.add(seen.key, priority=Priority.FIRST)
        elif seen.healthy:
            spread = min(seen.resync, SPREAD_CAP_SECONDS)
            self.queue.schedule(
                seen.key,
                delay=self.rng.uniform(0, spread),
                priority=Priority.RESYNC,
                only_if_unscheduled=True,
            )
        else:
            self.queue.schedule(
                seen.key, delay=0.0, priority=Priority.FIRST, only_if_unscheduled=True
            )

    def reenqueue_all(self) -> int:
        """S8.4: the store was lost (e.g. Redis restarted empty): schedule every CR in reach."""
        with self._lock:
            known = list(self._crs.values())
        for seen in known:
            self._schedule_initial(seen)
        return len(known)

    # -- HikyoInstances ------------------------------------------------------------------

    def on_instance(self, kind: str, obj: dict[str, Any], initial: bool) -> None:
        """Creation, deletion or a metadata change re-runs every CR naming the instance."""
        if initial and kind == "ADDED":
            return  # the CRs come with their own initial list
        name = obj["metadata"]["name"]
        with self._lock:
            keys = [seen.key for seen in self._crs.values() if seen.instance == name]
        for key in keys:
            self.queue.add(key, priority=Priority.FIRST)

    # -- workloads -----------------------------------------------------------------------

    def on_workload(self, kind: str, obj: dict[str, Any], initial: bool) -> None:
        """S4.1.1: a rollout-only evaluation for the CRs whose target the workload consumes."""
        if self.rollout_evaluation is None:
            return
        metadata = obj["metadata"]
        targets = opted_in_targets(metadata.get("annotations") or {})
        if not targets:
            return
        namespace = metadata.get("namespace")
        with self._lock:
            keys = [
                s.key
                for s in self._crs.values()
                if s.key.namespace == namespace and s.target in targets
            ]
        for key in keys:
            self.rollout_evaluation(key)


def _resync_of(obj: dict[str, Any]) -> float:
    try:
        return resync_seconds((obj.get("spec") or {}).get("resyncInterval"))
    except InvalidDuration:
        return DEFAULT_RESYNC_SECONDS
