"""The dashboard's overview (issue 10 item 1): counts per lifecycle and the Ready ratio, overall,
per HikyoInstance and per namespace; the not-Ready objects; what the operator process tells.

The aggregation is pure (``summarize`` over grouped rows) and the queries are few and bounded:
one GROUP BY for every count, one for the instances' fetch times, a page of not-Ready objects.
Names, reasons and counts only: nothing here reads a value, token, cursor or stamp (S0.4).
A fact the process cannot tell shows as "unknown"; the overview never fails on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Q

from workers.engine.conditions import UNRECONCILED
from workers.engine.explain import blocking_condition, status_remediation
from workers.engine.pacing import MAX_PAUSE

from .models import TrackedObject

LIFECYCLES = ("Synced", "Retained", "Refused", "Scrubbed", UNRECONCILED)
NOT_READY_SHOWN = 50  # the overview lists this many; the filtered list has them all
UNKNOWN = "unknown"
NO_INSTANCE = "(not fetched yet)"


def lifecycle_of(stored: str) -> str:
    """The lifecycle as the dashboard counts it: no status yet (or an unknown one) is
    Unreconciled, as ``manage.py status`` shows it."""
    return stored if stored in LIFECYCLES else UNRECONCILED


def ready_label(ready: bool | None) -> str:
    return {True: "True", False: "False"}.get(ready, "Unknown")  # type: ignore[arg-type]


@dataclass
class Tally:
    """Counts for one group (all, one instance, one namespace)."""

    label: str
    key: str = ""  # the stored value the list filters on (empty instance: not fetched yet)
    total: int = 0
    ready: int = 0
    by_lifecycle: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LIFECYCLES, 0))

    def add(self, lifecycle: str, ready: bool | None, count: int) -> None:
        self.total += count
        self.by_lifecycle[lifecycle_of(lifecycle)] += count
        if ready is True:
            self.ready += count

    @property
    def not_ready(self) -> int:
        return self.total - self.ready

    @property
    def lifecycle_counts(self) -> list[int]:
        return [self.by_lifecycle[name] for name in LIFECYCLES]

    @property
    def ready_ratio(self) -> str:
        """``ready/total (percent)``, e.g. ``97/100 (97 %)``; ``0/0`` when empty."""
        if not self.total:
            return "0/0"
        return f"{self.ready}/{self.total} ({100 * self.ready // self.total} %)"


@dataclass
class Summary:
    overall: Tally
    per_instance: list[Tally]
    per_namespace: list[Tally]


def summarize(rows: Iterable[Mapping[str, Any]]) -> Summary:
    """Rows of ``namespace, instance, lifecycle, ready, n`` (one GROUP BY) → the tallies,
    groups sorted by name."""
    overall = Tally("All HikyoSecrets")
    instances: dict[str, Tally] = {}
    namespaces: dict[str, Tally] = {}
    for row in rows:
        lifecycle, ready, count = row["lifecycle"] or "", row["ready"], int(row["n"])
        overall.add(lifecycle, ready, count)
        key = row["instance"] or ""
        instances.setdefault(key, Tally(key or NO_INSTANCE, key)).add(lifecycle, ready, count)
        namespace = row["namespace"]
        namespaces.setdefault(namespace, Tally(namespace, namespace)).add(lifecycle, ready, count)
    return Summary(
        overall,
        sorted(instances.values(), key=lambda t: t.label),
        [namespaces[k] for k in sorted(namespaces)],
    )


def live() -> Any:
    """The TrackedObjects still in the cluster (as far as the runs tell)."""
    return TrackedObject.objects.filter(deleted_at__isnull=True)


def summary() -> Summary:
    rows = live().values("namespace", "instance", "lifecycle", "ready").annotate(n=Count("id"))
    return summarize(rows.order_by())


def not_ready(limit: int = NOT_READY_SHOWN) -> list[TrackedObject]:
    fields = ("id", "namespace", "name", "lifecycle", "ready", "blocking", "instance", "target")
    rows = live().exclude(ready=True).only(*fields).order_by("namespace", "name")
    return list(rows[:limit])


@dataclass
class InstanceFacts:
    name: str
    last_fetch_ok_at: datetime | None
    last_fetch_at: datetime | None
    paused: bool


def instance_facts(now: datetime) -> list[InstanceFacts]:
    """Per HikyoInstance: the latest successful (200/304) and latest fetch of any of its
    HikyoSecrets, and whether it looks paused by a 429 (a recent 429 answer or an
    InstancePaused run within the longest pause, S4.1.6): two queries."""
    recent = now - timedelta(seconds=MAX_PAUSE)
    rows = (
        live()
        .exclude(instance="")
        .values("instance")
        .annotate(ok=Max("last_fetch_ok_at"), fetched=Max("last_fetch_at"))
        .order_by("instance")
    )
    paused = set(
        live()
        .filter(
            Q(last_fetch_status=429, last_fetch_at__gte=recent)
            | Q(last_outcome="InstancePaused", last_checked_at__gte=recent)
        )
        .exclude(instance="")
        .values_list("instance", flat=True)
        .distinct()
    )
    return [
        InstanceFacts(row["instance"], row["ok"], row["fetched"], row["instance"] in paused)
        for row in rows
    ]


@dataclass
class OperatorFacts:
    running: bool
    leader: str
    this_process: str
    mode: str
    queue_depth: str


def operator_facts(operator: Any, *, scaled_by_settings: bool) -> OperatorFacts:
    """What the OperatorProcess this dashboard runs in (``process.current``) tells: who leads,
    the mode, the queue depth. Read-only; every fact it cannot tell is "unknown"."""
    mode_by_settings = "scaled" if scaled_by_settings else "embedded"
    if operator is None:
        alone = "no operator runs in this process"
        return OperatorFacts(False, UNKNOWN, alone, mode_by_settings, UNKNOWN)
    try:
        mode = "embedded" if getattr(operator, "send_task", None) is None else "scaled"
        identity = str(getattr(operator.runtime, "identity", "") or UNKNOWN)
        leading = bool(operator.is_leader())
    except Exception:
        return OperatorFacts(True, UNKNOWN, UNKNOWN, mode_by_settings, UNKNOWN)
    if leading:
        leader = identity
    else:
        observed = getattr(getattr(operator, "elector", None), "_observed", None)
        holder = observed[0] if isinstance(observed, tuple) and observed else None
        leader = str(holder) if holder else UNKNOWN
    depth = UNKNOWN
    if leading or mode == "scaled":  # an embedded standby's own queue is not the leader's
        try:
            depth = str(int(operator.runtime.queue.depth()))
        except Exception:
            depth = UNKNOWN
    role = "leader" if leading else "standby"
    return OperatorFacts(True, leader, f"{identity} ({role})", mode, depth)


def stored_cr(tracked: TrackedObject) -> dict[str, Any]:
    """The CR as far as the observation store knows it (names and conditions, no values),
    for the engine's pure remediation texts."""
    spec: dict[str, Any] = {}
    if tracked.instance:
        spec["instanceRef"] = {"name": tracked.instance}
    if tracked.target:
        spec["target"] = {"name": tracked.target}
    status: dict[str, Any] = {"conditions": list(tracked.conditions or [])}
    if tracked.lifecycle:
        status["lifecycle"] = tracked.lifecycle
    return {
        "metadata": {"namespace": tracked.namespace, "name": tracked.name},
        "spec": spec,
        "status": status,
    }


def remediation_for(tracked: TrackedObject) -> tuple[str, str]:
    """(the first blocker ``Type/Reason`` or "", what to do) for the detail page."""
    cr = stored_cr(tracked)
    blocker = blocking_condition(cr["status"])
    return (blocker.name if blocker else "", status_remediation(cr, blocker))


def kubectl_describe(tracked: TrackedObject) -> str:
    return f"kubectl describe hksec -n {tracked.namespace} {tracked.name}"
