"""S4.2 steps R0-R14, pure: from what ``observe`` saw to a stop or a fetch plan.

``decide_before_fetch`` runs the steps in order over an ``Observed`` record; the first step that
stops decides (a ``Stop`` carrying the plan ``apply`` executes). A step whose input was not read
yet answers ``Needs``: ``observe`` makes that read and asks again, so every read happens only
when the steps before it passed. No I/O, no clock but the one passed in.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .binding import binding_digest, cursor_to_present
from .conditions import CONFLICT, DELIVERY, DESIGNATION, UNRECONCILED, Condition
from .content import destinations
from .credentials import Credential, account_refusal, from_secret, from_token
from .durations import DEFAULT_RESYNC_SECONDS
from .facts import Cause
from .force_sync import requested_value
from .foreign_owner import judge_owner
from .loader_control import is_protected, precheck
from .merge import MERGE, MERGE_FINALIZER, delivered_data, merge_target_refusal
from .messages import key_list
from .native_types import OPAQUE, unmapped_required
from .observed import UNREAD, Observed
from .outcome import Outcome, Requeue, failure, refusal, stop_quietly, waiting
from .pacing import INSTANCE_PAUSED, resume_delay_while_paused
from .plan import FetchPlan, Needs, Now, Plan, Read, SecretAction, Stop, StoreNote, WriteKind
from .ports import SecretObject
from .refusals import forbidden_outcome, not_owned
from .settings import OperatorSettings
from .shaping import before_fetch
from .spec import SecretSpec, SpecInvalid, parse_spec
from .stamp import STAMP_ROOT_BYTES, compute_stamp, target_key
from .stamp_root import STAMP_ROOT_KEY, STAMP_ROOT_SECRET, stamped_in_reach

ORPHAN_FINALIZER = "hikyo.dev/orphan"

Decision = Stop | FetchPlan | Needs


class _Steps:
    """The passed steps' condition removals (S5.4), gathered while the steps run."""

    def __init__(self, observed: Observed) -> None:
        self.observed = observed
        self.passed: list[str] = [UNRECONCILED]
        self.step = "R0"  # the S4.2 step being decided

    def stop(self, outcome: Outcome, **plan: Any) -> Stop:
        passed, step = tuple(self.passed), self.step
        finished = outcome.with_passed(passed)
        return Stop(Plan(outcome=finished, passed=passed, step=step, full_run=True, **plan))

    def need(self, read: Read) -> Stop | Needs:
        """The read a step needs; S4.15 when that read was the one answered 403."""
        if self.observed.forbidden is not None:
            return self.stop(forbidden_outcome(self.observed.forbidden, self.observed.namespace))
        return Needs(read)


def decide_before_fetch(observed: Observed, settings: OperatorSettings, now: Now) -> Decision:
    steps = _Steps(observed)
    cr = observed.cr
    if cr is None:  # R0
        return Stop(Plan(outcome=stop_quietly("Gone"), step="R0"))
    if observed.namespace == settings.operator_namespace:  # S8.5
        return Stop(
            Plan(
                outcome=stop_quietly("OperatorNamespace", "HikyoSecrets here are ignored"),
                step="R0",
            )
        )
    foreign = _foreign_owner(steps, settings, now)  # R0, S4.1.7
    if foreign is not None:
        return foreign
    steps.step = "R1"
    if observed.metadata.get("deletionTimestamp"):
        return _finalize(steps)
    steps.step = "R2"
    finalizer = _finalizer_policy(steps)
    if finalizer is not None:
        return finalizer
    steps.step = "R3"
    try:
        spec = parse_spec(cr)
    except SpecInvalid as error:  # S1.3.9, S4.16
        return steps.stop(failure(str(error), cause=Cause.SPEC_INVALID))
    steps.step = "R4"
    if spec.target_type != OPAQUE and not settings.native_secret_types:  # S4.7.6
        return steps.stop(native_types_disabled(spec))
    steps.step = "R5"
    instance = observed.instance
    if instance is UNREAD:
        return steps.need(Read.INSTANCE)
    if instance is None:
        return steps.stop(
            failure(f"HikyoInstance {spec.instance_name} not found", cause=Cause.INSTANCE_MISSING)
        )
    steps.step = "R6"
    credential = _credential(steps, spec, instance, settings)
    if not isinstance(credential, Credential):
        return credential
    steps.passed.append(DESIGNATION)
    steps.step = "R7"
    claimed = _target_claim(steps, spec)
    if claimed is not None:
        return claimed
    steps.step = "R8"
    target = observed.target
    if target is UNREAD:
        return steps.need(Read.TARGET)
    owned = _ownership(steps, spec, target)  # R8, R9
    if owned is not None:
        return owned
    steps.passed.append(CONFLICT)
    steps.step = "R10"
    mapping = _mapping_problem(spec)
    if mapping is not None:
        if mapping.reason != "KeysMissing":
            steps.step = "R11"
        return steps.stop(mapping)
    steps.step = "R11a"
    shaping = before_fetch(spec)  # S11.2, S11.3
    if shaping is not None:
        return steps.stop(
            refusal(
                Condition(DELIVERY, "False", shaping.reason, shaping.message, shaping.facts),
                clear_cursor=True,
            )
        )
    steps.step = "R12"
    root = _stamp_root(steps, settings)
    if not isinstance(root, bytes):
        return root
    steps.step = "R13"
    pending = observed.not_found
    if pending is UNREAD:
        return steps.need(Read.NOT_FOUND)
    steps.step = "R14"
    if observed.server is UNREAD:
        return steps.need(Read.SERVER)
    if observed.server is not None and settings.trigger_rollouts and observed.workloads is UNREAD:
        steps.step = "R16"  # read now for S4.9 step 2 and S6.5
        return steps.need(Read.WORKLOADS)
    # Every read is in: the key, binding and cursor (R12-R13) are derived once, not again on
    # each pass that only asked for one more read.
    instance_uid = instance["metadata"]["uid"]
    key = target_key(root, instance_uid, spec.uid, spec.target_name)
    binding = binding_digest(spec, credential.identity, instance_uid)
    store: list[StoreNote] = []
    if pending and pending[0] != binding:  # a binding change discards a pending 404 (S4.10.0)
        store.append(StoreNote("clear_not_found", spec.uid))
        pending = None
    if observed.server is None:
        return steps.stop(
            failure(
                f"HikyoInstance {instance['metadata']['name']}: {observed.server_error}",
                cause=Cause.NO_CLIENT,
            ),
            store=tuple(store),  # a binding change discards a pending 404 here too
        )
    cursor = cursor_to_present(
        stored_cursor=observed.status.get("cursor"),
        target_controlled=target is not None,
        target_stamp=compute_stamp(key, delivered_data(spec, target)) if target else None,
        stored_stamp=observed.status.get("stamp"),
        binding=binding,
        stored_binding=observed.status.get("cursorBinding"),
        forced_full=observed.forced_full or pending is not None or requested_value(cr) is not None,
    )
    return FetchPlan(
        spec=spec,
        instance_uid=instance_uid,
        binding=binding,
        key=key,
        cursor=cursor,
        target=target,
        token=credential.token,
        stamp_root=observed.fresh_root if observed.stamp_root is None else None,
        store=tuple(store),
        passed=tuple(steps.passed),
    )


def resync_seconds_of(cr: dict[str, Any] | None) -> float:
    try:
        return parse_spec(cr or {}).resync_seconds
    except SpecInvalid:
        return DEFAULT_RESYNC_SECONDS


# -- R0: another operator's CR (S4.1.7) ---------------------------------------------------------


def _foreign_owner(steps: _Steps, settings: OperatorSettings, now: Now) -> Decision | None:
    """Another operator wrote this status; it owns the CR while its Lease is fresh (renewed less
    than 3 x resyncInterval ago) or unreadable to us. Else we take over."""
    observed = steps.observed
    other = observed.status.get("operatorNamespace")
    if not other or other == settings.operator_namespace:
        return None
    if observed.lease is UNREAD:
        return Needs(Read.LEASE)
    verdict = judge_owner(
        other,
        settings.operator_namespace,
        observed.lease,
        lease_readable=observed.lease_readable,
        resync_seconds=resync_seconds_of(observed.cr),
        now=now.at,
    )
    if not verdict.owner:
        return None
    outcome = stop_quietly("ForeignOwner", f"owned by the operator in {verdict.owner}")
    # No watch event comes when that operator stops (a healthy owner writes nothing): look
    # again by the time its Lease would go stale, else the CR is never taken over.
    outcome = replace(outcome, requeue=Requeue.AFTER, delay=verdict.recheck_after)
    return Stop(Plan(outcome=outcome, step="R0"))


# -- R1, R2: the finalizer --------------------------------------------------------------------


def _finalizers(observed: Observed) -> list[str]:
    return list(observed.metadata.get("finalizers") or [])


def _target_name(observed: Observed) -> str:
    return (((observed.cr or {}).get("spec") or {}).get("target") or {}).get("name", "")


# The finalizer each creation policy needs (R2); Owner needs none: Kubernetes' garbage
# collector deletes an owned Secret with its CR.
POLICY_FINALIZERS = {"Orphan": ORPHAN_FINALIZER, MERGE: MERGE_FINALIZER}


def _finalize(steps: _Steps) -> Stop:
    """S4.14.3: release an Orphan target, then the finalizer; S11.4: remove a Merge CR's keys,
    then the finalizer; Owner needs nothing."""
    observed = steps.observed
    finalizers = _finalizers(observed)
    target_name = _target_name(observed)
    cr_uid = observed.metadata.get("uid", "")
    if ORPHAN_FINALIZER in finalizers:
        outcome = stop_quietly("Finalized", f"Secret {target_name} left in place, unowned")
        action = SecretAction(WriteKind.RELEASE, observed.namespace, target_name, cr_uid)
        finalizer = ORPHAN_FINALIZER
    elif MERGE_FINALIZER in finalizers:
        outcome = stop_quietly("Finalized", f"this HikyoSecret's keys removed from {target_name}")
        action = SecretAction(WriteKind.UNMERGE, observed.namespace, target_name, cr_uid)
        finalizer = MERGE_FINALIZER
    else:
        return Stop(Plan(outcome=stop_quietly("Deleting"), step="R1"))
    kept = [f for f in finalizers if f != finalizer]
    return Stop(Plan(outcome=outcome, secret=action, finalizers=kept, step="R1"))


def _finalizer_policy(steps: _Steps) -> Stop | None:
    observed = steps.observed
    finalizers = _finalizers(observed)
    target = ((observed.cr or {}).get("spec") or {}).get("target") or {}
    needed = POLICY_FINALIZERS.get(target.get("creationPolicy", "Owner"))
    if needed is not None and needed not in finalizers:
        added = [*finalizers, needed]
        return Stop(Plan(outcome=_rerun("FinalizerAdded"), finalizers=added, step="R2"))
    stale = [f for f in POLICY_FINALIZERS.values() if f != needed and f in finalizers]
    if stale:
        kept = [f for f in finalizers if f not in stale]
        return Stop(Plan(outcome=_rerun("FinalizerRemoved"), finalizers=kept, step="R2"))
    return None


def _rerun(reason: str) -> Outcome:
    """R2 stops after the finalizer patch; the resulting watch event (or this) runs it again."""
    return Outcome(reason=reason, requeue=Requeue.AFTER, delay=0.0, write_status=False)


# -- R4, R6-R12 -------------------------------------------------------------------------------


def native_types_disabled(spec: SecretSpec) -> Outcome:
    return refusal(
        Condition(
            DELIVERY,
            "False",
            "NativeSecretTypesDisabled",
            f"target.type {spec.target_type} needs native Secret types, which this operator "
            "has disabled (Helm operator.nativeSecretTypes=true); the target is retained",
        ),
        clear_cursor=True,
    )


def _credential(
    steps: _Steps, spec: SecretSpec, instance: dict[str, Any], settings: OperatorSettings
) -> Credential | Decision:
    """R6 (S2.2, S2.3): the bearer for this reconcile, kept in memory only."""
    observed = steps.observed
    if spec.credential_secret:
        if observed.credential_secret is UNREAD:
            return steps.need(Read.CREDENTIAL)
        found = from_secret(spec, observed.credential_secret)
    else:
        account = observed.service_account
        if account is UNREAD:
            return steps.need(Read.CREDENTIAL)
        refused = account_refusal(spec, account, settings, instance)
        if refused is not None:
            return steps.stop(refused)
        assert account is not None
        if observed.token is UNREAD:
            return Needs(Read.TOKEN)
        if observed.token_deferred > 0:  # S4.1.6 rev 4: a CR waiting for a pause mints nothing
            delay = resume_delay_while_paused(observed.token_deferred)
            return steps.stop(waiting(INSTANCE_PAUSED, delay))
        found = from_token(spec, account, observed.token, observed.token_error)
    return found if isinstance(found, Credential) else steps.stop(found)


def _target_claim(steps: _Steps, spec: SecretSpec) -> Decision | None:
    """R7: the earliest CR (then lowest UID) naming a target owns it."""
    observed = steps.observed
    if observed.claimants is UNREAD:
        return steps.need(Read.CLAIMANTS)
    live = [c for c in observed.claimants if not c["metadata"].get("deletionTimestamp")]
    if not any(c["metadata"]["uid"] == spec.uid for c in live):
        live.append(observed.cr or {})
    winner = min(
        live, key=lambda c: (c["metadata"].get("creationTimestamp", ""), c["metadata"]["uid"])
    )
    if winner["metadata"]["uid"] == spec.uid:
        return None
    return steps.stop(
        refusal(
            Condition(
                CONFLICT,
                "True",
                "TargetClaimed",
                f"HikyoSecret {winner['metadata']['name']} already manages Secret "
                f"{spec.target_name}; choose another target.name",
                {"winner": winner["metadata"]["name"]},
            )
        )
    )


def _ownership(steps: _Steps, spec: SecretSpec, target: SecretObject | None) -> Stop | None:
    """R8, R9: never adopt; never change a type. Merge (S11.4): an existing Opaque Secret no
    other controller manages."""
    if spec.creation_policy == MERGE:
        refused = merge_target_refusal(spec.target_name, spec.uid, target)
        return None if refused is None else steps.stop(refused)
    if target is None:
        return None
    if not target.controlled_by(spec.uid):
        return steps.stop(not_owned(spec.target_name))
    if target.type != spec.target_type:
        steps.step = "R9"
        return steps.stop(
            refusal(
                Condition(
                    CONFLICT,
                    "True",
                    "TargetTypeImmutable",
                    f"Secret {spec.target_name} has type {target.type}, not {spec.target_type}; "
                    "a Secret's type cannot change: use a new HikyoSecret and target name",
                    {"existing_type": target.type},
                )
            )
        )
    return None


def _mapping_problem(spec: SecretSpec) -> Outcome | None:
    known = destinations(spec)  # S11.1: a template's keys are the Secret's, not the mapping's
    if spec.target_type != OPAQUE:  # R10
        lacking = unmapped_required(spec.target_type, known or [])
        if lacking:
            return refusal(
                Condition(
                    DELIVERY,
                    "False",
                    "KeysMissing",
                    f"a {spec.target_type} Secret needs {key_list(lacking)} in the mapping",
                    {"keys": key_list(lacking), "cause": Cause.UNMAPPED},
                ),
                clear_cursor=True,
            )
    protected = None if known is None else [d for d in known if is_protected(d)]
    problem = precheck(spec.acknowledged, protected)  # R11, S4.6.2
    if problem:
        return refusal(
            Condition(DELIVERY, "False", "LoaderControlUnacknowledged", problem), clear_cursor=True
        )
    return None


def _stamp_root(steps: _Steps, settings: OperatorSettings) -> bytes | Decision:
    """R12 (S6.3): the root; a missing one is created (by ``apply``, before any write) only
    while no CR in reach holds a stamp, or on explicit opt-in. Never replaced."""
    observed = steps.observed
    namespace = settings.operator_namespace
    if observed.stamp_root is UNREAD:
        return steps.need(Read.STAMP_ROOT)
    if observed.stamp_root is None:
        if not settings.allow_stamp_root_reset:
            if observed.reach is UNREAD:
                return steps.need(Read.REACH)
            if stamped_in_reach(observed.reach, namespace):
                return steps.stop(
                    failure(
                        f"stamp root missing: restore Secret {namespace}/{STAMP_ROOT_SECRET}, "
                        "or set HIKYO_OPERATOR_ALLOW_STAMP_ROOT_RESET=true to accept one restart "
                        "of every opted-in workload",
                        cause=Cause.STAMP_ROOT,
                    )
                )
        return observed.fresh_root
    root = observed.stamp_root.data.get(STAMP_ROOT_KEY, b"")
    if len(root) != STAMP_ROOT_BYTES:
        return steps.stop(
            failure(
                f"stamp root Secret {namespace}/{STAMP_ROOT_SECRET} holds {len(root)} bytes, not "
                f"{STAMP_ROOT_BYTES}; it is never replaced automatically",
                cause=Cause.STAMP_ROOT,
            )
        )
    return root
