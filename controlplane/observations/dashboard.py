"""The dashboard's overview (issue 10 item 1): counts per lifecycle and the Ready ratio, overall,
per HikyoInstance and per namespace; the not-Ready objects; what the operator process tells.

The aggregation is pure (``summarize`` over grouped rows) and the queries are few and bounded:
one GROUP BY for every count, a few for the instances, a page of not-Ready objects (each with
why and what to do, ``why.of``) and one of Ready objects with warnings.
Names, reasons and counts only: nothing here reads a value, token, cursor or stamp (S0.4).
A fact the process cannot tell shows as "unknown"; the overview never fails on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Max

from workers.engine.conditions import UNRECONCILED
from workers.shards import ShardLayout, shard_of

from . import instances, leases, why
from .models import LeaseRecord, TrackedObject
from .why import Why

LIFECYCLES = ("Synced", "Retained", "Refused", "Scrubbed", UNRECONCILED)
NOT_READY_SHOWN = 50  # the overview lists this many; the filtered list has them all
UNKNOWN = "unknown"
NO_INSTANCE = "(none named)"  # a spec without instanceRef.name, or not recorded yet


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
    key: str = ""  # the stored value the list filters on
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
    per_instance: dict[str, Tally] = {}
    namespaces: dict[str, Tally] = {}
    for row in rows:
        lifecycle, ready, count = row["lifecycle"] or "", row["ready"], int(row["n"])
        overall.add(lifecycle, ready, count)
        key = row["instance"] or ""
        per_instance.setdefault(key, Tally(key or NO_INSTANCE, key)).add(lifecycle, ready, count)
        namespace = row["namespace"]
        namespaces.setdefault(namespace, Tally(namespace, namespace)).add(lifecycle, ready, count)
    return Summary(
        overall,
        sorted(per_instance.values(), key=lambda t: t.label),
        [namespaces[k] for k in sorted(namespaces)],
    )


def live() -> Any:
    """The TrackedObjects still in the cluster (as far as the runs tell)."""
    return TrackedObject.objects.filter(deleted_at__isnull=True)


def summary() -> Summary:
    rows = live().values("namespace", "instance", "lifecycle", "ready").annotate(n=Count("id"))
    return summarize(rows.order_by())


def not_ready(now: datetime, limit: int = NOT_READY_SHOWN) -> list[tuple[TrackedObject, Why]]:
    """The first ``limit`` not-Ready objects, each with why and what to do (one query)."""
    rows = live().exclude(ready=True).order_by("namespace", "name")
    return [(tracked, why.of(tracked, now)) for tracked in rows[:limit]]


def with_warnings(now: datetime, limit: int = NOT_READY_SHOWN) -> list[tuple[TrackedObject, Why]]:
    """Ready objects with something to look at (KeysMissing, EnvFromSkip, Stalled, expiry)."""
    rows = live().filter(ready=True).exclude(warnings="").order_by("namespace", "name")
    return [(tracked, why.of(tracked, now)) for tracked in rows[:limit]]


@dataclass
class InstanceFacts:
    name: str
    last_fetch_ok_at: datetime | None
    last_fetch_at: datetime | None
    pauses: list[instances.OrgPause]
    missing: bool

    @property
    def paused(self) -> bool:
        return bool(self.pauses)


def instance_facts(now: datetime) -> list[InstanceFacts]:
    """Per HikyoInstance its HikyoSecrets name: the latest successful (200/304) and latest
    fetch, the orgs a 429 pause holds now (S4.1.6) and whether a run found it missing (R5):
    three queries."""
    rows = (
        live()
        .exclude(instance="")
        .values("instance")
        .annotate(ok=Max("last_fetch_ok_at"), fetched=Max("last_fetch_at"))
        .order_by("instance")
    )
    paused = instances.paused_now(live(), now)
    missing = instances.missing_instances(live())
    return [
        InstanceFacts(
            row["instance"],
            row["ok"],
            row["fetched"],
            paused.get(row["instance"], []),
            row["instance"] in missing,
        )
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
    the mode, the queue's keys due now and scheduled in all. Read-only; every fact it cannot
    tell is "unknown"."""
    mode_by_settings = "scaled" if scaled_by_settings else "embedded"
    if operator is None:
        alone = "no operator runs in this process"
        return OperatorFacts(False, UNKNOWN, alone, mode_by_settings, UNKNOWN)
    try:
        mode = "scaled" if getattr(operator, "scaled", False) else "embedded"
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
            queue = operator.runtime.queue
            # Every CR has its resync timer in the queue: what waits is what is due now.
            due, scheduled = int(queue.due_count()), int(queue.depth())
            depth = f"{due} due now, {scheduled} scheduled"
        except Exception:
            depth = UNKNOWN
    role = "leader" if leading else "standby"
    return OperatorFacts(True, leader, f"{identity} ({role})", mode, depth)


@dataclass
class ShardFacts:
    shard: int
    lease: str
    holder: str
    renewed: datetime | None
    hikyosecrets: int
    leader: leases.LeaderState


def shard_facts(
    shards: int, now: datetime, recorded: Mapping[str, LeaseRecord] | None = None
) -> list[ShardFacts]:
    """S4.1.8: per shard, its Lease's holder and last renewal as the leaders recorded them
    (``leases.py``; no apiserver read), whether a live leader holds it at ``now``, and how many
    live HikyoSecrets it holds (by the namespaces this store knows); [] for one shard. A shard
    with no record shows "none" and no live leader; the rest is still shown."""
    if shards <= 1:
        return []
    counts = [0] * shards
    for row in live().values("namespace").annotate(count=Count("id")):
        counts[shard_of(row["namespace"], shards)] += row["count"]
    records = leases.recorded() if recorded is None else recorded
    facts = []
    for shard in range(shards):
        lease = ShardLayout(shard, shards).lease_name
        record = records.get(lease)
        facts.append(
            ShardFacts(
                shard,
                lease,
                (record.holder if record else "") or "none",
                record.renewed_at if record else None,
                counts[shard],
                leases.state_of(record, now),
            )
        )
    return facts


def kubectl_describe(tracked: TrackedObject) -> str:
    return f"kubectl describe hksec -n {tracked.namespace} {tracked.name}"
