"""One reconcile of one HikyoSecret, as the S4.2 table reads: observe → decide before the fetch
(R0-R14) → fetch (R15) → decide on the answer (R16) → apply (S4.9) → what happened.

The decisions are pure (``decide``, ``decide_after_fetch``); ``observe`` only reads, ``fetch`` only
talks to the Hikyo server, ``apply`` is the only writer. Every path ends in an ``Outcome``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from .apply import Applied, apply, create_stamp_root
from .decide import resync_seconds_of
from .decide_after_fetch import decide_after_fetch
from .decide_rollout import decide_rollout_only
from .durations import DEFAULT_RESYNC_SECONDS
from .errors import Forbidden, KubeError
from .fetch import fetch
from .observe import observe, read_cr
from .observed import Observed
from .outcome import Event, Outcome, stop_quietly
from .plan import FetchPlan, Now
from .ports import Cluster, CoordinationStore, ServerFor
from .recent_reads import RecentReads, without_managed_fields
from .remediation_context import spec_context
from .settings import OperatorSettings
from .stamp_root import RecentStampRoot

log = logging.getLogger(__name__)


@dataclass
class Engine:
    """Everything a reconcile needs, built once per process."""

    cluster: Cluster
    store: CoordinationStore
    settings: OperatorSettings
    client_for: ServerFor
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    wall_seconds: Callable[[], float] = field(default=time.time)
    sleep: Callable[[float], None] = field(default=time.sleep)
    timer: Callable[[], float] = field(default=time.monotonic)
    # The process's reuse windows (S6.3, S7.1): a Runtime passes its own to every Engine it
    # builds; a stand-alone Engine makes its own.
    recent_root: RecentStampRoot | None = None
    recent_reads: RecentReads | None = None

    def __post_init__(self) -> None:
        if self.recent_root is None:
            self.recent_root = RecentStampRoot(self.timer)
        if self.recent_reads is None:
            self.recent_reads = RecentReads(self.timer)

    def now(self) -> Now:
        return Now(self.clock(), self.wall_seconds())


@dataclass
class RunResult:
    """The outcome plus what the recorder needs; never values, tokens, cursors or stamps."""

    outcome: Outcome
    namespace: str
    name: str
    uid: str = ""
    generation: int = 0
    conditions_before: list[dict[str, Any]] = field(default_factory=list)
    conditions_after: list[dict[str, Any]] = field(default_factory=list)
    status_written: bool = False
    events_emitted: list[Event] = field(default_factory=list)
    resync_seconds: float = DEFAULT_RESYNC_SECONDS  # the CR's resyncInterval, when parsed
    step: str = ""  # the S4.2 step that decided (R0 ... R16)
    instance: str = ""  # the HikyoInstance fetched from, when the run fetched
    fetch_seconds: float | None = None  # how long the fetch took, when the run fetched
    fetch_status: int | None = None  # the fetch's HTTP status, None without an answer
    target: str = ""  # spec.target.name, for the dashboard
    gone_uid: str = ""  # the UID asked for when the CR turned out gone (R0)
    # Names from the spec (remediation.spec_context: instance, credential, scope, target), so
    # the dashboard's remediation names what explain names; never a value.
    names: dict[str, str] = field(default_factory=dict)
    rolled: list[str] = field(default_factory=list)  # workloads restamped (``Kind/name``, S6.4)
    reads_kept: bool = False  # the CR and credential reads a report may reuse (S7.1 rev 3)
    # The CR's lifecycle after the run: the outcome's, else as the run read it (a run that
    # waited wrote nothing, and the dashboard still knows the CR's state).
    lifecycle: str = ""


def reconcile(
    engine: Engine, namespace: str, name: str, uid: str | None = None, *, forced_full: bool = False
) -> RunResult:
    assert engine.recent_root is not None
    try:
        return _reconcile(engine, namespace, name, uid, forced_full=forced_full)
    finally:
        engine.recent_root.finish()  # a turn to create the stamp root ends with its run


def _reconcile(
    engine: Engine, namespace: str, name: str, uid: str | None, *, forced_full: bool
) -> RunResult:
    cluster, store, settings, now = engine.cluster, engine.store, engine.settings, engine.now()
    observed, decision = observe(
        cluster,
        store,
        settings,
        engine.client_for,
        namespace,
        name,
        uid,
        forced_full=forced_full,
        now=now,
        recent_root=engine.recent_root,
    )  # R0-R14 reads, in step order, and what R0-R14 decide on them
    if isinstance(decision, FetchPlan) and decision.stamp_root is not None:  # R12, S6.3
        assert engine.recent_root is not None
        decision = create_stamp_root(
            cluster, settings, observed, decision, created=engine.recent_root.keep
        )
    if isinstance(decision, FetchPlan):
        attempt = fetch(  # R15
            observed, decision, store, settings, now, sleep=engine.sleep, clocks=engine
        )
        plan = decide_after_fetch(observed, attempt, settings, now, decision)  # R16
    else:
        attempt, plan = None, decision.plan
    if plan.outcome.reason == "ForeignOwner":  # S4.1.7
        owner = observed.status.get("operatorNamespace")
        log.warning(
            "%s/%s belongs to the live operator in namespace %s; not touching it",
            namespace,
            name,
            owner,
        )
    applied = apply(plan, observed, cluster, store, settings, now)  # S4.9 order
    if isinstance(decision, FetchPlan) and applied.cr_after is not None:  # S7.1 rev 3
        assert engine.recent_reads is not None
        engine.recent_reads.keep(
            decision.spec.uid,
            without_managed_fields(applied.cr_after),
            decision.token,
            observed.instance if isinstance(observed.instance, dict) else None,
            decision.spec.org,
        )
    result = _result(observed, applied, plan.step, asked_uid=uid)
    result.reads_kept = isinstance(decision, FetchPlan) and applied.cr_after is not None
    if plan.rollout is not None:
        result.rolled = [workload.ref for workload in plan.rollout.patches]
    if attempt is not None and attempt.result is not None:
        result.instance = decision.spec.instance_name
        result.fetch_seconds, result.fetch_status = attempt.seconds, attempt.result.status
    return result


def evaluate_rollout(
    engine: Engine, namespace: str, name: str, uid: str | None = None
) -> RunResult:
    """S4.1.1: the rollout-only evaluation a workload event asks for: S6.5 and the Rollout
    condition only; no fetch, no Secret read, no patch, no event."""
    cluster, settings, now = engine.cluster, engine.settings, engine.now()
    observed = Observed(namespace, name, cr=read_cr(cluster, namespace, name, uid))
    if observed.cr is not None and settings.trigger_rollouts:
        observed = _with_workloads(observed, engine)
    plan = decide_rollout_only(observed, settings, now)
    if plan is None:  # nothing this run may judge; the full reconcile reports it
        reason = "Gone" if observed.cr is None else "RolloutNotEvaluated"
        return _result(observed, Applied(stop_quietly(reason), _stored_conditions(observed)))
    return _result(observed, apply(plan, observed, cluster, engine.store, settings, now))


def _with_workloads(observed: Observed, engine: Engine) -> Observed:
    """The opted-in workloads and their stall records, or the record as it was when the list
    is refused or fails (S4.15 and the Rollout condition are the full reconcile's)."""
    try:
        workloads = engine.cluster.list_workloads(observed.namespace)
    except (Forbidden, KubeError):
        return observed
    uid = observed.metadata.get("uid", "")
    return replace(
        observed, workloads=workloads, stall_first_seen=engine.store.stall_first_seen(uid)
    )


def _stored_conditions(observed: Observed) -> list[dict[str, Any]]:
    return list(observed.status.get("conditions") or [])


def _result(
    observed: Observed, applied: Applied, step: str = "", *, asked_uid: str | None = None
) -> RunResult:
    if observed.cr is None:
        gone = asked_uid or ""
        return RunResult(
            applied.outcome, observed.namespace, observed.name, step=step, gone_uid=gone
        )
    metadata = observed.metadata
    target = ((observed.cr.get("spec") or {}).get("target") or {}).get("name")
    return RunResult(
        outcome=applied.outcome,
        namespace=observed.namespace,
        name=observed.name,
        uid=metadata["uid"],
        generation=int(metadata.get("generation") or 0),
        conditions_before=_stored_conditions(observed),
        conditions_after=applied.conditions_after,
        status_written=applied.status_written,
        events_emitted=applied.events_emitted,
        resync_seconds=resync_seconds_of(observed.cr),
        step=step,
        target=target if isinstance(target, str) else "",
        names=spec_context(observed.cr),
        lifecycle=applied.outcome.lifecycle or str(observed.status.get("lifecycle") or ""),
    )
