"""What ``manage.py explain`` prints: the S4.2 steps a reconcile passed, the one that stopped,
why, and what to do about it. Pure: from an ``Observed`` record and the decision (``Stop`` or
``FetchPlan``, and after ``--fetch`` the ``FetchAttempt`` and the R16 ``Plan``).

Only names, reasons and messages are printed: never a value, token, cursor or stamp (S0.4,
S5.6). The Observed and plan reprs hide those already; this module reads no field that holds
one except to ask whether it is there (the stored cursor, the stamp root).

``blocking_condition`` is the Ready rule's first blocker (S5.2) over a stored status, for
``manage.py status``: the same function ``ready_condition`` uses, not a copy of its order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .conditions import READY, Condition, first_blocker, merge_conditions
from .decide_after_fetch import now_text
from .observed import Observed
from .outcome import Outcome
from .plan import FetchAttempt, FetchPlan, Now, Plan, Stop, WriteKind
from .remediation import remediation
from .remediation_context import condition_context, spec_context
from .rendering import template_variables
from .spec import SpecInvalid, parse_spec
from .step_details import StepDetails

# The S4.2 table's steps, named after its "Action" column.
STEPS: dict[str, str] = {
    "R0": "the HikyoSecret",
    "R1": "deletion (finalize)",
    "R2": "finalizer for the creationPolicy",
    "R3": "resyncInterval and spec checks",
    "R4": "typed target and native Secret types",
    "R5": "the HikyoInstance",
    "R6": "credential and designation",
    "R7": "other HikyoSecrets naming the same target",
    "R8": "the target Secret is controlled, never adopted",
    "R9": "the target's type",
    "R10": "required destinations of a typed target",
    "R11": "loader-control pre-check",
    "R11a": "templates and file format (S11)",
    "R12": "the stamp root",
    "R13": "cursor eligibility",
    "R14": "the Hikyo client",
    "R15": "token, then the fetch",
    "R16": "the answer",
}
ORDER = tuple(STEPS)

# Outcomes after which nothing is wrong: the step "decides" without stopping anything.
FINE = frozenset({"Delivered", "Current", "FinalizerAdded", "FinalizerRemoved"})


def explain(
    observed: Observed,
    decision: Stop | FetchPlan,
    now: Now,
    *,
    attempt: FetchAttempt | None = None,
    plan: Plan | None = None,
) -> list[str]:
    """The lines ``explain`` prints. ``attempt`` and ``plan`` come with ``--fetch`` (R15, R16);
    without them a ``FetchPlan`` is explained up to R14, the fetch named as the next step."""
    lines = [f"HikyoSecret {observed.namespace}/{observed.name}"]
    if observed.cr is None:
        lines.append("  not found (R0): nothing to explain")
        return lines
    if isinstance(decision, Stop):
        plan, step = decision.plan, decision.plan.step or "R0"
    elif plan is not None:
        step = plan.step or "R16"
    else:
        step = "R15"
    passed = [s for s in ORDER[: ORDER.index(step)] if not (s == "R15" and attempt is None)]
    details = StepDetails(observed, decision if isinstance(decision, FetchPlan) else None, attempt)
    for name in passed:
        lines.append(f"  ok    {name:<4} {STEPS[name]}: {details.of(name)}")
    if plan is None:  # R1-R14 passed, the fetch is next
        assert isinstance(decision, FetchPlan)
        full = "a cursor-less (full)" if decision.cursor is None else "a conditional (cursor)"
        lines.append(f"  next  R15  {STEPS['R15']}: {full} fetch would be made now")
        lines.append(
            "  Every step before the fetch passes. Run with --fetch to make one cursor-less "
            "fetch and see what the answer would do (still writing nothing)."
        )
        return lines
    if step == "R16" and isinstance(decision, Stop):
        lines.append(f"  --    R15  {STEPS['R15']}: not reached (stopped reading the workloads)")
    mark = "done" if plan.outcome.reason in FINE else "STOP"
    detail = f": {details.of('R15')}" if step == "R15" else ""
    lines.append(f"  {mark:<5} {step:<4} {STEPS[step]}{detail}")
    lines.extend(_destination_lines(observed, attempt))
    lines.extend(_outcome_lines(observed, plan, step, now, attempt))
    return lines


def _outcome_lines(
    observed: Observed, plan: Plan, step: str, now: Now, attempt: FetchAttempt | None
) -> list[str]:
    outcome = plan.outcome
    main = _main_condition(outcome)
    lines = []
    if main is not None:
        lines.append(f"outcome: {main.type}={main.status}/{main.reason}")
        lines.append(f"  message: {main.message}")
    else:
        lines.append(f"outcome: {outcome.reason} (sets no condition)")
        if outcome.message:
            lines.append(f"  message: {outcome.message}")
    others = [
        c
        for c in outcome.conditions.values()
        if c is not None and c is not main and c.type != READY
    ]
    for other in others:
        lines.append(f"  also: {other.type}={other.status}/{other.reason}: {other.message}")
    lifecycle = outcome.lifecycle or observed.status.get("lifecycle") or "unset"
    lines.append(f"  lifecycle: {lifecycle}; next run: {_next(outcome)}")
    if outcome.write_status:
        ready = _ready_after(observed, outcome, now)
        lines.append(f"  Ready would be: {ready['status']}/{ready['reason']} ({ready['message']})")
    lines.append(f"  a reconcile would write: {_writes(plan, observed)}")
    lines.append("  (explain wrote nothing)")
    context = remediation_context(observed, main)
    lines.append(f"remediation: {remediation(main.reason if main else outcome.reason, context)}")
    for other in others:
        if other.reason in FINE:
            continue
        lines.append(
            f"  for {other.type}/{other.reason}: "
            f"{remediation(other.reason, remediation_context(observed, other))}"
        )
    return lines


def _destination_lines(observed: Observed, attempt: FetchAttempt | None) -> list[str]:
    """S11.5: after a fetch, each template entry: rendered, or the sources it lacks (names)."""
    delivered = _delivered_names(attempt)
    try:
        spec = parse_spec(observed.cr or {})
    except SpecInvalid:
        return []
    if delivered is None or not spec.templates:
        return []
    source_of = {entry.secret_key: entry.key for entry in spec.mapping}
    present = {e.secret_key for e in spec.mapping if e.key in delivered}
    if spec.all_keys:
        present = set(delivered)
    lines = []
    for key, reads in sorted(template_variables(dict(spec.templates)).items()):
        lacking = sorted(source_of.get(name, name) for name in reads if name not in present)
        state = f"lacks {', '.join(lacking)}" if lacking else "rendered"
        lines.append(f"        destination {key}: {state}")
    return lines


def _main_condition(outcome: Outcome) -> Condition | None:
    conditions = [c for c in outcome.conditions.values() if c is not None]
    for condition in conditions:
        if condition.reason == outcome.reason:
            return condition
    return conditions[0] if conditions else None


def _next(outcome: Outcome) -> str:
    if outcome.delay is not None:
        return f"{outcome.requeue.value} ({outcome.delay:.1f} s)"
    return outcome.requeue.value


def _ready_after(observed: Observed, outcome: Outcome, now: Now) -> dict[str, Any]:
    """S5.2 as the status write would recompute it: the stored conditions with this run's
    changes, so a stale blocker the run did not reach still shows."""
    merged = merge_conditions(
        list(observed.status.get("conditions") or []),
        outcome.conditions,
        lifecycle=outcome.lifecycle or observed.status.get("lifecycle"),
        generation=int(observed.metadata.get("generation") or 0),
        now=now_text(now.at),
    )
    return next(c for c in merged if c["type"] == READY)


def _writes(plan: Plan, observed: Observed) -> str:
    writes = []
    if plan.finalizers is not None:
        writes.append("the HikyoSecret's finalizers")
    if observed.stamp_root is None and plan.step in ("R15", "R16"):  # R12 passed
        writes.append("the stamp root Secret (created before the fetch, S6.3)")
    action = plan.secret
    if action is not None:
        if action.kind == WriteKind.CONVERGE:
            verb = "create" if action.target is None else "update"
            writes.append(f"{verb} Secret {action.name} ({len(action.data)} keys)")
        elif action.kind == WriteKind.EMPTY:
            writes.append(f"empty Secret {action.name}")
        elif action.kind == WriteKind.DELETE:
            writes.append(f"delete Secret {action.name}")
        elif action.kind == WriteKind.MERGE:
            writes.append(
                f"apply this HikyoSecret's {len(action.data)} keys to Secret {action.name}"
            )
        elif action.kind == WriteKind.UNMERGE:
            writes.append(f"remove this HikyoSecret's keys from Secret {action.name}")
        else:
            writes.append(f"release Secret {action.name} (drop this HikyoSecret's ownerReference)")
    if plan.rollout is not None and plan.rollout.patches:
        refs = ", ".join(w.ref for w in plan.rollout.patches)
        writes.append(f"restart stamps on {refs}")
    if plan.outcome.write_status:
        writes.append("the status (only if it changed)")
    for event in plan.outcome.events:
        writes.append(f"event {event.type}/{event.reason}")
    return "; ".join(writes) if writes else "nothing"


def remediation_context(observed: Observed, condition: Condition | None) -> dict[str, str]:
    """Names for the remediation text: the spec's, then the condition's facts (the same two
    the dashboard fills a stored condition's text with, so both say the same)."""
    context = spec_context(observed.cr)
    if condition is not None:
        context |= condition.facts
    return context


def _delivered_names(attempt: FetchAttempt | None) -> list[str] | None:
    """The key names of the answer (names only, S5.6)."""
    if attempt is None or attempt.result is None or attempt.result.delivery is None:
        return None
    return [key.name for key in attempt.result.delivery.keys if key.carried]


@dataclass(frozen=True)
class Blocker:
    """The Ready rule's first blocker (S5.2) over a stored status: ``Type/Reason``, or
    ``Synced/absent``, or ``lifecycle X``; ``condition`` is the stored one it names."""

    name: str
    condition: Mapping[str, Any] | None = None

    @property
    def reason(self) -> str:
        if self.condition is not None:
            return str(self.condition.get("reason") or "")
        return "NotReconciled" if self.name == "Synced/absent" else ""

    @property
    def message(self) -> str:
        if self.condition is not None:
            return str(self.condition.get("message") or "")
        if self.name == "Synced/absent":
            return "no delivery has been attempted yet"
        return self.name


def blocking_condition(status: Mapping[str, Any]) -> Blocker | None:
    """What blocks Ready in a stored status, by the Ready rule itself; None when nothing."""
    conditions = {
        c["type"]: c
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and "type" in c
    }
    named = first_blocker(conditions, status.get("lifecycle"))
    if named is None:
        return None
    type_, _, reason = named.partition("/")
    found = conditions.get(type_)
    if found is not None and found.get("reason") == reason:
        return Blocker(named, found)
    return Blocker(named)


def status_remediation(cr: Mapping[str, Any], blocker: Blocker | None) -> str:
    """The remediation for a stored CR's first blocker (``status -o json``)."""
    context = spec_context(cr)
    if blocker is None:
        return remediation("Reconciled", context)
    return remediation(
        blocker.reason or blocker.name, condition_context(context, blocker.condition)
    )


def step_ids() -> Sequence[str]:
    return ORDER
