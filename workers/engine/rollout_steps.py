"""S4.9 step 2 and S6.5 inside a reconcile: patch the opted-in workloads whose stamp differs,
then judge the ones not patched now; fold the result into the Outcome."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from k8s.errors import Forbidden, KubeError

from .conditions import ROLLOUT, Condition
from .outcome import Event, Outcome, Requeue
from .ports import Cluster, CoordinationStore
from .rollout import Workload, patches_needed, rollout_condition, stalled, unlisted_condition
from .settings import OperatorSettings
from .spec import SecretSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutFinding:
    """What S4.9 step 2 found: the Rollout condition to set (None removes it), and whether a
    stamp patch failed; ``unknown`` leaves the stored condition as it is."""

    condition: Condition | None = None
    patch_failed: bool = False
    unknown: bool = False


def roll_out(
    cluster: Cluster,
    store: CoordinationStore,
    settings: OperatorSettings,
    spec: SecretSpec,
    stamp: str,
    *,
    patch: bool,
    now: float,
) -> RolloutFinding:
    """S6.4 (when ``patch``), then S6.5 over the opted-in workloads not patched now.

    Off without ``triggerRollouts``: no list, no patch, no Rollout condition (S6.6). A 403
    goes to S4.15 like any other Kubernetes call made for the CR.
    """
    if not settings.trigger_rollouts:
        return RolloutFinding()
    try:
        workloads = cluster.list_workloads(spec.namespace)
    except Forbidden:
        raise
    except KubeError as error:
        log.warning("workloads for %s/%s not listed: %s", spec.namespace, spec.name, error)
        if patch:  # nothing could be patched: a patch failure (S4.9)
            return RolloutFinding(unlisted_condition(), patch_failed=True)
        return RolloutFinding(unknown=True)  # informational only: keep what is stored
    failed = _patch_stamps(cluster, spec, workloads, stamp) if patch else []
    store = store
    before = store.stall_first_seen(spec.uid)
    not_progressed, first_seen = stalled(workloads, spec.target_name, stamp, before, now)
    if first_seen != before:
        store.set_stall_first_seen(spec.uid, first_seen)
    return RolloutFinding(rollout_condition(not_progressed, failed), patch_failed=bool(failed))


def _patch_stamps(
    cluster: Cluster, spec: SecretSpec, workloads: list[Workload], stamp: str
) -> list[str]:
    """S6.4: patch each opted-in workload whose stamp differs; returns the failed ones."""
    failed: list[str] = []
    for workload in patches_needed(workloads, spec.target_name, stamp):
        try:
            cluster.patch_workload_stamp(
                workload.kind,
                spec.namespace,
                workload.name,
                spec.target_name,
                stamp,
                uid=workload.uid,
            )
        except Forbidden:
            raise
        except KubeError as error:
            log.warning(
                "stamp of %s for %s/%s not patched: %s",
                workload.ref,
                spec.namespace,
                spec.name,
                error,
            )
            failed.append(workload.ref)
    return failed


def with_rollout(outcome: Outcome, rollout: RolloutFinding, *, warn: bool = False) -> Outcome:
    """Folds S4.9 step 2 into an outcome: a failed patch keeps what the outcome says about the
    Secret (``Synced=True/Delivered``, or ``Scrubbed``), clears the cursor and backs off so the
    next, full reconcile retries it. ``warn``: a Stalled event, on the delivery path (S5.5)."""
    if rollout.unknown:
        return outcome
    outcome.conditions[ROLLOUT] = rollout.condition
    if rollout.condition is not None and warn:
        outcome.events.append(Event("Warning", rollout.condition.reason, rollout.condition.message))
    if rollout.patch_failed:
        outcome.requeue = Requeue.BACKOFF
        outcome.clearing_cursor()
    return outcome
