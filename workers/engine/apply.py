"""The only writer of a reconcile: executes a ``Plan`` through the (fenced) Cluster port in the
S4.9 order: the coordination notes, the Secret, the workload stamps, then the status with the
cursor (written once, last), then the events. Before the fetch it creates a missing stamp root
when R12 allows it (``create_stamp_root``).

What a write reveals (a failed verification, a Secret that became another's, a refused patch,
a 403) turns the plan's outcome into another through the pure ``settle_*`` functions, so the
status always says what really happened.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .decide_after_fetch import now_text, secret_write_failed, settle_secret
from .decide_rollout import settle_rollout
from .errors import FAILED_CALLS, AlreadyExists, Forbidden, KubeError
from .force_sync import requested_value
from .merge import KeysOwnedElsewhere, keys_owned_elsewhere_refusal, merge_keys
from .observe import access_allowed
from .observed import ForbiddenRead, Observed
from .outcome import Outcome, Requeue, failure
from .pacing import pause_instance
from .plan import FetchPlan, Now, Plan, RolloutPlan, SecretAction, Stop, StoreNote, WriteKind
from .policy_writes import write_secret
from .ports import Cluster, CoordinationStore, Event, SecretObject
from .refusals import forbidden_outcome, not_owned, release_failed
from .reports import CAPABILITY_TTL
from .secret_writes import NotOwned, SecretWriter, WriteFailed, Written
from .settings import OperatorSettings
from .stamp_root import STAMP_ROOT_KEY, STAMP_ROOT_SECRET
from .status import desired_status, status_differs

log = logging.getLogger(__name__)


@dataclass
class Applied:
    """What was written; never values, tokens, cursors or stamps."""

    outcome: Outcome
    conditions_after: list[dict[str, Any]]
    status_written: bool = False
    events_emitted: list[Event] = field(default_factory=list)
    # The CR as this run left it (the status patch's answer, or the read when nothing was
    # written); None when unknown. S7.1 lets the report that follows use it.
    cr_after: dict[str, Any] | None = field(default=None, repr=False)


def apply(
    plan: Plan,
    observed: Observed,
    cluster: Cluster,
    store: CoordinationStore,
    settings: OperatorSettings,
    now: Now,
) -> Applied:
    # S6.5 stall records count only once the workloads were judged after the writes held.
    _store_notes(store, [n for n in plan.store if n.op != "stall_first_seen"], now)
    try:
        outcome, held = _writes(plan, observed, cluster)
    except Forbidden as error:  # S4.15
        refused = _refused(cluster, error, observed.namespace)
        outcome, held = forbidden_outcome(refused, observed.namespace), False
    if held:
        _store_notes(store, [n for n in plan.store if n.op == "stall_first_seen"], now)
    else:  # a write turned the decision into another outcome; the run still fetched
        outcome = replace(outcome, fetched=outcome.fetched or plan.outcome.fetched)
    stored = observed.status
    applied = Applied(outcome, list(stored.get("conditions") or []))
    if outcome.write_status and observed.cr is not None:
        outcome = outcome.with_passed(plan.passed)
        if plan.full_run:  # a forced sync is handled by a full reconcile only
            outcome = replace(outcome, forced_sync=requested_value(observed.cr))
        applied = _write_status(cluster, observed, outcome, settings, now)
    for event in applied.outcome.events:
        try:
            cluster.emit_event(observed.cr or {}, event)
            applied.events_emitted.append(event)
        except KubeError as error:
            log.warning(
                "event %s for %s/%s not sent: %s",
                event.reason,
                observed.namespace,
                observed.name,
                error,
            )
    return applied


def _store_notes(store: CoordinationStore, notes: list[StoreNote], now: Now) -> None:
    for note in notes:
        if note.op == "record_not_found":
            store.record_not_found(note.key, note.text, note.seconds)
        elif note.op == "clear_not_found":
            store.clear_not_found(note.key)
        elif note.op == "capabilities":  # S7.2
            store.put_note(f"capabilities:{note.key}", note.text, CAPABILITY_TTL)
        elif note.op == "pause":  # S4.1.6
            pause_instance(store, note.key, note.seconds, now.wall)
        elif note.op == "stall_first_seen":  # S6.5
            store.set_stall_first_seen(note.key, dict(note.first_seen))
        else:
            raise ValueError(f"unknown store note {note.op}")


def _refused(cluster: Cluster, error: Forbidden, namespace: str) -> ForbiddenRead:
    resource = error.resource + (f"/{error.subresource}" if error.subresource else "")
    if error.namespace_terminating:
        return ForbiddenRead(error.verb, resource, namespace_terminating=True)
    return ForbiddenRead(error.verb, resource, allowed=access_allowed(cluster, error, namespace))


def create_stamp_root(
    cluster: Cluster,
    settings: OperatorSettings,
    observed: Observed,
    fetch: FetchPlan,
    created: Callable[[SecretObject], None] = lambda root: None,
) -> FetchPlan | Stop:
    """R12 (S6.3): create the root the decision derived its stamp key from, before the fetch;
    ``created`` gets the written root. Another process that created one first wins: this run
    stops unwritten and reruns at once, reading theirs. A 403 is S4.15."""
    assert fetch.stamp_root is not None
    try:
        root = cluster.create_secret(
            SecretObject(
                namespace=settings.operator_namespace,
                name=STAMP_ROOT_SECRET,
                data={STAMP_ROOT_KEY: fetch.stamp_root},
            )
        )
    except AlreadyExists:
        raced = Outcome(
            reason="StampRootCreatedElsewhere", requeue=Requeue.AFTER, delay=0.0, write_status=False
        )
        return Stop(Plan(outcome=raced, step="R12"))
    except Forbidden as error:
        refused = _refused(cluster, error, observed.namespace)
        outcome = forbidden_outcome(refused, observed.namespace)
        return Stop(Plan(outcome=outcome, passed=fetch.passed, step="R12", full_run=True))
    created(root)
    return replace(fetch, stamp_root=None)


def _writes(plan: Plan, observed: Observed, cluster: Cluster) -> tuple[Outcome, bool]:
    """The outcome once the writes are made, and whether the plan's decision held (False: a
    failed or refused write replaced it)."""
    outcome = plan.outcome
    action = plan.secret
    writer = SecretWriter(cluster)
    if plan.finalizers is not None:  # R1 (the Secret's part first), R2
        if action is not None:
            finished = _finalizing_write(writer, cluster, action)
            if isinstance(finished, WriteFailed):
                merged_keys = action.kind == WriteKind.UNMERGE
                failed = release_failed(action.name, finished.cause, merged_keys=merged_keys)
                return failed, False
        cluster.patch_hikyosecret_finalizers(
            observed.namespace,
            observed.name,
            plan.finalizers,
            observed.metadata["resourceVersion"],
        )
        return outcome, True
    if action is not None:
        result = write_secret(writer, cluster, action)
        if isinstance(result, WriteFailed):
            return secret_write_failed(result.cause), False
        if isinstance(result, NotOwned):
            return not_owned(action.name), False
        if isinstance(result, KeysOwnedElsewhere):
            return keys_owned_elsewhere_refusal(action.name, result.keys), False
        outcome = settle_secret(plan, result.secret)
    if plan.rollout is not None:  # S4.9 step 2
        outcome = settle_rollout(outcome, plan.rollout, _patch_stamps(cluster, plan.rollout))
    return outcome, True


def _finalizing_write(
    writer: SecretWriter, cluster: Cluster, action: SecretAction
) -> Written | WriteFailed:
    """R1: what the CR's deletion does to its Secret before the finalizer goes: an Orphan
    target released (S4.14.3), a Merge CR's keys removed (S11.4; applying no keys meets no
    other manager's)."""
    if action.kind == WriteKind.RELEASE:
        return writer.release(action.namespace, action.name, action.cr_uid)
    removed = merge_keys(cluster, action.namespace, action.name, {})
    return removed if isinstance(removed, Written | WriteFailed) else WriteFailed("conflict")


def _patch_stamps(cluster: Cluster, rollout: RolloutPlan) -> list[str]:
    """S6.4: patch each opted-in workload whose stamp differs; returns the failed ones. A 403
    goes to S4.15 like any other Kubernetes call made for the CR."""
    failed: list[str] = []
    for workload in rollout.patches:
        try:
            cluster.patch_workload_stamp(
                workload.kind,
                rollout.namespace,
                workload.name,
                rollout.target_name,
                rollout.stamp,
                uid=workload.uid,
            )
        except FAILED_CALLS as error:
            log.warning(
                "stamp of %s for %s/%s not patched: %s",
                workload.ref,
                rollout.namespace,
                rollout.cr_name,
                error,
            )
            failed.append(workload.ref)
    return failed


def _write_status(
    cluster: Cluster,
    observed: Observed,
    outcome: Outcome,
    settings: OperatorSettings,
    now: Now,
) -> Applied:
    stored = observed.status
    generation = int(observed.metadata.get("generation") or 0)
    desired = desired_status(
        stored,
        outcome,
        generation=generation,
        now=now_text(now.at),
        operator_namespace=settings.operator_namespace,
    )
    if not status_differs(stored, desired):  # S4.17: nothing changed, nothing written
        return Applied(outcome, desired["conditions"], cr_after=observed.cr)
    if outcome.fetched:
        desired["lastFetch"] = now_text(now.at)
    patch: dict[str, Any] = {name: None for name in stored if name not in desired}
    patch.update(desired)
    try:
        patched = cluster.patch_hikyosecret_status(
            observed.namespace, observed.name, patch, observed.metadata["resourceVersion"]
        )
    except KubeError as error:
        log.warning("status of %s/%s not written: %s", observed.namespace, observed.name, error)
        written = replace(
            failure(f"status write failed: {error}"),
            fetched=outcome.fetched,
            write_status=False,
            wrote_secret=outcome.wrote_secret,
        )
        return Applied(written, list(stored.get("conditions") or []))
    return Applied(outcome, desired["conditions"], status_written=True, cr_after=patched)
