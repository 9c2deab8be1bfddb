"""S4.9 step 2 and S6.5, pure: which opted-in workloads to patch with a new stamp, which did not
progress, and the Rollout condition once the patches are known (S6.4-S6.6)."""

from __future__ import annotations

from dataclasses import replace

from .conditions import ROLLOUT, Condition
from .observed import Observed
from .outcome import Event, Outcome, Requeue
from .plan import FetchPlan, Now, Plan, RolloutPlan, StoreNote
from .rollout import patches_needed, rollout_condition, stalled, unlisted_condition
from .settings import OperatorSettings
from .spec import SpecInvalid, parse_spec


def plan_rollout(
    plan: Plan,
    observed: Observed,
    fetch: FetchPlan,
    settings: OperatorSettings,
    stamp: str,
    *,
    patch: bool,
    now: Now,
) -> Plan:
    """``plan`` with S6.4 (when ``patch``), then S6.5 over the opted-in workloads not patched
    now. Off without ``triggerRollouts``: no list, no patch, no Rollout condition (S6.6)."""
    if not settings.trigger_rollouts:
        return plan
    spec = fetch.spec
    workloads = observed.workloads
    if not isinstance(workloads, list):  # the list failed
        if patch:  # nothing could be patched: a patch failure (S4.9)
            unlisted = RolloutPlan(
                spec.namespace, spec.name, spec.target_name, stamp, warn=True, unlisted=True
            )
            return replace(plan, rollout=unlisted)
        return plan  # informational only: keep what is stored
    patches = tuple(patches_needed(workloads, spec.target_name, stamp)) if patch else ()
    before = observed.stall_first_seen
    not_progressed, first_seen = stalled(workloads, spec.target_name, stamp, before, now.wall)
    if first_seen != before:
        plan = replace(plan, store=(*plan.store, _stall_note(spec.uid, first_seen)))
    rollout = RolloutPlan(
        spec.namespace,
        spec.name,
        spec.target_name,
        stamp,
        patches=patches,
        not_progressed=tuple(not_progressed),
        warn=patch,
    )
    return replace(plan, rollout=rollout)


def decide_rollout_only(observed: Observed, settings: OperatorSettings, now: Now) -> Plan | None:
    """S4.1.1, S6.5 against the recorded stamp. Only a CR this operator owns and has reconciled
    at its current generation is judged (None otherwise: its next full reconcile does), so this
    never claims a generation or an owner (S4.1.7) it did not process."""
    metadata, stored = observed.metadata, observed.status
    stamp = stored.get("stamp")
    if (
        observed.cr is None
        or not settings.trigger_rollouts
        or observed.namespace == settings.operator_namespace
        or metadata.get("deletionTimestamp")
        or not stamp
        or stored.get("observedGeneration") != int(metadata.get("generation") or 0)
        or stored.get("operatorNamespace") != settings.operator_namespace
        or not isinstance(observed.workloads, list)
    ):
        return None
    try:
        spec = parse_spec(observed.cr)
    except SpecInvalid:
        return None  # the full reconcile reports it (R3)
    before = observed.stall_first_seen
    not_progressed, first_seen = stalled(
        observed.workloads, spec.target_name, stamp, before, now.wall
    )
    outcome = Outcome(
        reason="RolloutEvaluated",
        requeue=Requeue.NONE,
        conditions={ROLLOUT: rollout_condition(not_progressed)},
    )
    notes = (_stall_note(spec.uid, first_seen),) if first_seen != before else ()
    return Plan(outcome=outcome, store=notes)  # nothing but Rollout is evaluated: no step passed


def _stall_note(cr_uid: str, first_seen: dict[str, float]) -> StoreNote:
    return StoreNote("stall_first_seen", cr_uid, first_seen=tuple(sorted(first_seen.items())))


def settle_rollout(outcome: Outcome, rollout: RolloutPlan, failed: list[str]) -> Outcome:
    """Folds S4.9 step 2 into the outcome: a failed patch keeps what the outcome says about the
    Secret (``Synced=True/Delivered``, or ``Scrubbed``), clears the cursor and backs off so the
    next, full reconcile retries it. On the delivery path a Stalled event goes with it (S5.5)."""
    if rollout.unlisted:
        condition: Condition | None = unlisted_condition()
        patch_failed = True
    else:
        condition = rollout_condition(rollout.not_progressed, failed)
        patch_failed = bool(failed)
    outcome = outcome.with_condition(ROLLOUT, condition)
    if condition is not None and rollout.warn:
        outcome = outcome.adding(Event("Warning", condition.reason, condition.message))
    if patch_failed:
        outcome = replace(outcome, requeue=Requeue.BACKOFF).clearing_cursor()
    return outcome
