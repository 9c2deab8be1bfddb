"""Rollout triggering (S6): who consented, whom to patch, and who did not progress.

Pure: workloads arrive as plain ``Workload`` values (``k8s.workloads`` builds them from the API's
JSON), stall first-seen times arrive and leave as plain mappings so a coordination store can keep
them (S6.5), and the clock is passed in. Stamps are compared here, never logged or put into a
message (S5.6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .conditions import ROLLOUT, Condition
from .messages import key_list
from .ports import (
    DAEMON_SET,
    DEPLOYMENT,
    STATEFUL_SET,
    Workload,
)

STALL_HOLD_SECONDS = 300.0  # S6.5: two evaluations >= 5 min apart


def patches_needed(workloads: Iterable[Workload], target_name: str, stamp: str) -> list[Workload]:
    """S6.4: opted in for this target and carrying another (or no) stamp for it.

    An equal stamp needs no patch, so unchanged content restarts nothing.
    """
    return [w for w in workloads if w.opted_in(target_name) and w.stamps.get(target_name) != stamp]


def _at_once(workload: Workload) -> bool:
    """S6.5 tests that count immediately (Deployments only)."""
    return workload.kind == DEPLOYMENT and (workload.paused or workload.progress_deadline_exceeded)


def _held(workload: Workload) -> bool:
    """S6.5 tests that count only once they held in two evaluations >= 5 min apart."""
    if workload.observed_generation < workload.generation:
        return True
    if workload.kind == DEPLOYMENT:
        return workload.updated_replicas < workload.replicas or workload.unavailable_replicas > 0
    if workload.kind == STATEFUL_SET:  # updatedReplicas also covers updateStrategy OnDelete
        return (
            workload.updated_replicas < workload.replicas
            or workload.ready_replicas < workload.replicas
        )
    if workload.kind == DAEMON_SET:
        return (
            workload.updated_number_scheduled < workload.desired_number_scheduled
            or workload.number_unavailable > 0
        )
    return False


def stalled(
    workloads: Iterable[Workload],
    target_name: str,
    stamp: str,
    first_seen: Mapping[str, float],
    now: float,
) -> tuple[list[str], dict[str, float]]:
    """S6.5 over the opted-in workloads already carrying ``stamp``.

    Returns the ``Kind/name`` of every workload that did not progress (sorted) and the new
    first-seen map (``Kind/name`` -> when a held test was first seen), which replaces the old
    one: entries whose test no longer holds, or whose workload is gone or carries another stamp
    (it was just patched, so its clock restarts), are dropped.
    """
    found: list[str] = []
    seen: dict[str, float] = {}
    for workload in workloads:
        if not workload.opted_in(target_name) or workload.stamps.get(target_name) != stamp:
            continue
        held_since: float | None = None
        if _held(workload):
            held_since = first_seen.get(workload.ref, now)
            seen[workload.ref] = held_since
        if _at_once(workload) or (
            held_since is not None and now - held_since >= STALL_HOLD_SECONDS
        ):
            found.append(workload.ref)
    return sorted(found), seen


def recheck_after(first_seen: Mapping[str, float], now: float) -> float | None:
    """Seconds until the earliest pending hold matures (S6.5: the store schedules the
    re-check); None when nothing is pending."""
    pending = [
        STALL_HOLD_SECONDS - (now - since)
        for since in first_seen.values()
        if now - since < STALL_HOLD_SECONDS
    ]
    return max(min(pending), 0.0) if pending else None


def rollout_condition(
    not_progressed: Sequence[str], patch_failed: Sequence[str] = ()
) -> Condition | None:
    """``Rollout=False/Stalled`` naming the workloads (S5.1, S5.6); None removes ``Rollout``.

    Pure over its inputs (S4.17): no times, counts of attempts or error text.
    """
    parts = []
    if patch_failed:
        parts.append(f"stamp patch failed for {key_list(patch_failed)}")
    if not_progressed:
        parts.append(f"not progressed: {key_list(not_progressed)}")
    if not parts:
        return None
    return Condition(ROLLOUT, "False", "Stalled", "; ".join(parts))


def unlisted_condition() -> Condition:
    """The workloads could not be listed, so nothing was patched: a patch failure (S4.9)."""
    return Condition(
        ROLLOUT, "False", "Stalled", "opted-in workloads could not be listed; no stamp was patched"
    )
