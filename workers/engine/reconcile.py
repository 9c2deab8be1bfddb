"""One reconcile of one HikyoSecret: steps R0-R16 of S4.2, in order; the first that stops decides.

Decisions come from the pure modules (spec, credentials, content, binding, stamp, expiry,
conditions, status); this module reads, fetches, and hands the writes to ``secret_writes``.
Every path ends in an ``Outcome``; the status is written once, last (S4.9).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from k8s.errors import Forbidden, KubeError

from . import expiry
from .binding import CredentialIdentity, binding_digest, cursor_to_present
from .conditions import (
    CONFLICT,
    DELIVERY,
    DESIGNATION,
    ROLLOUT,
    SCRUBBED,
    SYNCED,
    UNRECONCILED,
    Condition,
)
from .content import Content, ContentRefusal, assemble
from .credentials import CredentialRefused, acquire_credential
from .delivery import Delivery, HikyoClientError
from .durations import DEFAULT_RESYNC_SECONDS
from .foreign_owner import OURS, OwnerVerdict, judge_owner
from .hikyo_client import FetchResult, HikyoClient, Scope
from .hikyo_client import Outcome as FetchOutcome
from .loader_control import is_protected, precheck
from .messages import key_list
from .native_types import OPAQUE, unmapped_required
from .outcome import Event, Outcome, Requeue, failure, refusal, stop_quietly
from .pacing import (
    PROBE_INTERVAL_SECONDS,
    note_answer,
    pause_instance,
    pause_left,
    spread,
    unresponsive_wait,
    wait_for_token,
)
from .ports import LEASE_NAME, Cluster, CoordinationStore, SecretObject
from .reports import remember_capabilities
from .rollout_steps import RolloutFinding, roll_out, with_rollout
from .secret_writes import NotOwned, SecretWriter, WriteFailed
from .settings import OperatorSettings
from .spec import SecretSpec, SpecInvalid, parse_spec
from .stamp import compute_stamp, empty_content_stamp, target_key
from .stamp_root import StampRootUnavailable, read_stamp_root
from .status import desired_status, status_differs

log = logging.getLogger(__name__)

ORPHAN_FINALIZER = "hikyo.dev/orphan"
NOT_FOUND_RECORD_TTL = 3600.0  # S4.10.0


class _Stop(Exception):
    """A step decided the outcome."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


@dataclass
class Engine:
    """Everything a reconcile needs, built once per process."""

    cluster: Cluster
    store: CoordinationStore
    settings: OperatorSettings
    client_for: Callable[[dict[str, Any]], HikyoClient]
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    wall_seconds: Callable[[], float] = field(default=time.time)
    sleep: Callable[[float], None] = field(default=time.sleep)


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


def reconcile(
    engine: Engine, namespace: str, name: str, uid: str | None = None, *, forced_full: bool = False
) -> RunResult:
    return _Run(engine, namespace, name, uid, forced_full).execute()


def evaluate_rollout(
    engine: Engine, namespace: str, name: str, uid: str | None = None
) -> RunResult:
    """S4.1.1: the rollout-only evaluation a workload event asks for: S6.5 and the Rollout
    condition only; no fetch, no Secret read, no patch, no event."""
    return _Run(engine, namespace, name, uid, forced_full=False).rollout_only()


def now_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Run:
    def __init__(
        self, engine: Engine, namespace: str, name: str, uid: str | None, forced_full: bool
    ) -> None:
        self.engine = engine
        self.cluster = engine.cluster
        self.settings = engine.settings
        self.namespace = namespace
        self.name = name
        self.expected_uid = uid
        self.forced_full = forced_full
        self.now = engine.clock()
        self.cr: dict[str, Any] = {}
        self.spec: SecretSpec | None = None
        # Conditions that steps passed remove (S5.4): Designation at R6, Conflict at R9, ...
        self.passed: dict[str, Condition | None] = {UNRECONCILED: None}
        self.result = RunResult(stop_quietly("Gone"), namespace, name)

    # -- frame ------------------------------------------------------------------------------

    def execute(self) -> RunResult:
        result = self.result
        cr = self.cluster.get_hikyosecret(self.namespace, self.name)  # R0
        if cr is None or (self.expected_uid and cr["metadata"]["uid"] != self.expected_uid):
            return result
        self.cr = cr
        metadata = cr["metadata"]
        result.uid = metadata["uid"]
        result.generation = int(metadata.get("generation") or 0)
        stored = cr.get("status") or {}
        result.conditions_before = list(stored.get("conditions") or [])
        if self.namespace == self.settings.operator_namespace:  # S8.5
            result.outcome = stop_quietly("OperatorNamespace", "HikyoSecrets here are ignored")
            return result
        verdict = self._foreign_owner(stored)
        if verdict.owner:  # S4.1.7
            log.warning(
                "%s/%s belongs to the live operator in namespace %s; not touching it",
                self.namespace,
                self.name,
                verdict.owner,
            )
            outcome = stop_quietly("ForeignOwner", f"owned by the operator in {verdict.owner}")
            # No watch event comes when that operator stops (a healthy owner writes nothing):
            # look again by the time its Lease would go stale, else the CR is never taken over.
            outcome.requeue, outcome.delay = Requeue.AFTER, verdict.recheck_after
            result.outcome = outcome
            return result
        try:
            outcome = self._steps()
        except _Stop as stop:
            outcome = stop.outcome
        except Forbidden as error:
            outcome = self._forbidden(error)
        if outcome.write_status:
            outcome = self._write_status(outcome, stored, result)
        else:
            result.conditions_after = result.conditions_before
        result.outcome = outcome
        for event in outcome.events:
            try:
                self.cluster.emit_event(cr, event)
                result.events_emitted.append(event)
            except KubeError as error:
                log.warning(
                    "event %s for %s/%s not sent: %s",
                    event.reason,
                    self.namespace,
                    self.name,
                    error,
                )
        return result

    def rollout_only(self) -> RunResult:
        """S4.1.1, S6.5 against the recorded stamp. Only a CR this operator owns and has
        reconciled at its current generation is judged; anything else is left to its next full
        reconcile, so this never claims a generation or an owner (S4.1.7) it did not process."""
        result = self.result
        cr = self.cluster.get_hikyosecret(self.namespace, self.name)
        if cr is None or (self.expected_uid and cr["metadata"]["uid"] != self.expected_uid):
            return result
        metadata, stored = cr["metadata"], cr.get("status") or {}
        result.uid = metadata["uid"]
        result.generation = int(metadata.get("generation") or 0)
        result.conditions_before = result.conditions_after = list(stored.get("conditions") or [])
        result.outcome = stop_quietly("RolloutNotEvaluated")
        if (
            not self.settings.trigger_rollouts
            or self.namespace == self.settings.operator_namespace
            or metadata.get("deletionTimestamp")
            or not stored.get("stamp")
            or stored.get("observedGeneration") != result.generation
            or stored.get("operatorNamespace") != self.settings.operator_namespace
        ):
            return result
        self.cr = cr
        try:
            spec = parse_spec(cr)
            rollout = self._roll_out(spec, stored["stamp"], patch=False)
        except (SpecInvalid, Forbidden):
            return result  # the full reconcile reports these (R3, S4.15)
        if rollout.unknown:
            return result
        self.passed = {}  # nothing but Rollout is evaluated here
        outcome = Outcome(
            reason="RolloutEvaluated",
            requeue=Requeue.NONE,
            conditions={ROLLOUT: rollout.condition},
        )
        result.outcome = self._write_status(outcome, stored, result)
        return result

    def _foreign_owner(self, stored: dict[str, Any]) -> OwnerVerdict:
        """S4.1.7: another operator wrote this status; it owns the CR while its Lease is fresh
        (renewed less than 3 x resyncInterval ago) or unreadable to us. Else we take over."""
        other = stored.get("operatorNamespace")
        if not other or other == self.settings.operator_namespace:
            return OURS
        try:
            interval = parse_spec(self.cr).resync_seconds
        except SpecInvalid:
            interval = DEFAULT_RESYNC_SECONDS
        try:
            lease, readable = self.cluster.lease_record(other, LEASE_NAME), True
        except KubeError:  # Forbidden included: assume a live owner
            lease, readable = None, False
        return judge_owner(
            other,
            self.settings.operator_namespace,
            lease,
            lease_readable=readable,
            resync_seconds=interval,
            now=self.now,
        )

    def _steps(self) -> Outcome:
        metadata = self.cr["metadata"]
        if metadata.get("deletionTimestamp"):  # R1
            return self._finalize()
        self._finalizer_policy()  # R2
        spec = self._spec()  # R3
        self.spec = spec
        self.result.resync_seconds = spec.resync_seconds
        if spec.target_type != OPAQUE and not self.settings.native_secret_types:  # R4, S4.7.6
            return refusal(
                Condition(
                    DELIVERY,
                    "False",
                    "NativeSecretTypesDisabled",
                    f"target.type {spec.target_type} needs native Secret types, which this "
                    "operator "
                    "has disabled (Helm operator.nativeSecretTypes=true); the target is retained",
                ),
                clear_cursor=True,
            )
        instance = self.cluster.get_instance(spec.instance_name)  # R5
        if instance is None:
            return failure(f"HikyoInstance {spec.instance_name} not found")
        token, credential = self._credential(spec, instance)  # R6
        self.passed[DESIGNATION] = None
        self._target_claim(spec)  # R7
        target = self.cluster.get_secret(spec.namespace, spec.target_name)  # R8
        controlled = self._ownership(spec, target)  # R8, R9
        self.passed[CONFLICT] = None
        self._mapping_checks(spec)  # R10, R11
        root = self._stamp_root()  # R12
        instance_uid = instance["metadata"]["uid"]
        self.instance_uid = instance_uid
        key = target_key(root, instance_uid, spec.uid, spec.target_name)
        binding = binding_digest(spec, credential, instance_uid)  # R13
        cursor = self._eligible_cursor(spec, target if controlled else None, key, binding)
        client = self._client(instance)  # R14
        self._pace(instance_uid)  # R15: a token from the instance's bucket first (S4.1.6)
        result = client.fetch(  # R15
            Scope(spec.org, spec.project, spec.environment),
            token=token,
            projection=spec.projection,
            cursor=cursor,
            acknowledged_keys=spec.acknowledged,
        )
        no_answer = result.outcome is FetchOutcome.FAILED and result.status is None
        note_answer(self.engine.store, instance_uid, result.detail if no_answer else None)
        outcome = self._answer(spec, result, cursor, target if controlled else None, key, binding)
        outcome.fetched = True
        return outcome

    # -- R1, R2: finalizer ---------------------------------------------------------------

    def _finalize(self) -> Outcome:
        """S4.14.3: release an Orphan target, then the finalizer; Owner needs nothing."""
        metadata = self.cr["metadata"]
        finalizers = list(metadata.get("finalizers") or [])
        if ORPHAN_FINALIZER not in finalizers:
            return stop_quietly("Deleting")
        target_name = ((self.cr.get("spec") or {}).get("target") or {}).get("name", "")
        writer = SecretWriter(self.cluster)
        try:
            writer.release(self.namespace, target_name, metadata["uid"])
        except WriteFailed as error:
            outcome = failure(f"cannot release Secret {target_name} before deletion: {error}")
            outcome.write_status = False
            return outcome
        self._set_finalizers([f for f in finalizers if f != ORPHAN_FINALIZER])
        return stop_quietly("Finalized", f"Secret {target_name} left in place, unowned")

    def _finalizer_policy(self) -> None:
        metadata = self.cr["metadata"]
        finalizers = list(metadata.get("finalizers") or [])
        policy = ((self.cr.get("spec") or {}).get("target") or {}).get("creationPolicy", "Owner")
        if policy == "Orphan" and ORPHAN_FINALIZER not in finalizers:
            self._set_finalizers([*finalizers, ORPHAN_FINALIZER])
            raise _Stop(_rerun("FinalizerAdded"))
        if policy != "Orphan" and ORPHAN_FINALIZER in finalizers:
            self._set_finalizers([f for f in finalizers if f != ORPHAN_FINALIZER])
            raise _Stop(_rerun("FinalizerRemoved"))

    def _set_finalizers(self, finalizers: list[str]) -> None:
        self.cluster.patch_hikyosecret_finalizers(
            self.namespace, self.name, finalizers, self.cr["metadata"]["resourceVersion"]
        )

    # -- R3 .. R14 -----------------------------------------------------------------------

    def _spec(self) -> SecretSpec:
        try:
            return parse_spec(self.cr)
        except SpecInvalid as error:  # S1.3.9, S4.16
            raise _Stop(failure(str(error))) from None

    def _credential(
        self, spec: SecretSpec, instance: dict[str, Any]
    ) -> tuple[str, CredentialIdentity]:
        """R6 (S2.2, S2.3): the bearer for this reconcile, kept in memory only."""
        try:
            return acquire_credential(self.cluster, self.settings, spec, instance)
        except CredentialRefused as refused:
            raise _Stop(refused.outcome) from None

    def _target_claim(self, spec: SecretSpec) -> None:
        """R7: the earliest CR (then lowest UID) naming a target owns it."""
        claimants = self.cluster.list_hikyosecrets_for_target(spec.namespace, spec.target_name)
        live = [c for c in claimants if not c["metadata"].get("deletionTimestamp")]
        if not any(c["metadata"]["uid"] == spec.uid for c in live):
            live.append(self.cr)
        winner = min(
            live, key=lambda c: (c["metadata"].get("creationTimestamp", ""), c["metadata"]["uid"])
        )
        if winner["metadata"]["uid"] != spec.uid:
            raise _Stop(
                refusal(
                    Condition(
                        CONFLICT,
                        "True",
                        "TargetClaimed",
                        f"HikyoSecret {winner['metadata']['name']} already manages Secret "
                        f"{spec.target_name}; choose another target.name",
                    )
                )
            )

    def _ownership(self, spec: SecretSpec, target: SecretObject | None) -> bool:
        """R8, R9: never adopt; never change a type."""
        if target is None:
            return False
        if not target.controlled_by(spec.uid):
            raise _Stop(_not_owned(spec.target_name))
        if target.type != spec.target_type:
            raise _Stop(
                refusal(
                    Condition(
                        CONFLICT,
                        "True",
                        "TargetTypeImmutable",
                        f"Secret {spec.target_name} has type {target.type}, "
                        f"not {spec.target_type}; "
                        "a Secret's type cannot change: use a new HikyoSecret and target name",
                    )
                )
            )
        return True

    def _mapping_checks(self, spec: SecretSpec) -> None:
        if spec.target_type != OPAQUE:  # R10
            lacking = unmapped_required(spec.target_type, [e.secret_key for e in spec.mapping])
            if lacking:
                raise _Stop(
                    refusal(
                        Condition(
                            DELIVERY,
                            "False",
                            "KeysMissing",
                            f"a {spec.target_type} Secret needs {key_list(lacking)} in the mapping",
                        ),
                        clear_cursor=True,
                    )
                )
        protected = (
            None
            if spec.all_keys
            else [e.secret_key for e in spec.mapping if is_protected(e.secret_key)]
        )
        problem = precheck(spec.acknowledged, protected)  # R11, S4.6.2
        if problem:
            raise _Stop(
                refusal(
                    Condition(DELIVERY, "False", "LoaderControlUnacknowledged", problem),
                    clear_cursor=True,
                )
            )

    def _stamp_root(self) -> bytes:
        """R12 (S6.3)."""
        try:
            return read_stamp_root(self.cluster, self.settings)
        except StampRootUnavailable as error:
            raise _Stop(failure(str(error))) from None

    def _eligible_cursor(
        self, spec: SecretSpec, target: SecretObject | None, key: bytes, binding: str
    ) -> str | None:
        """R13 (S4.3.1); a pending 404 confirmation withholds the cursor (S4.10.0)."""
        stored = self.cr.get("status") or {}
        pending = self.engine.store.not_found_seen(spec.uid)
        if pending and pending[0] != binding:
            self.engine.store.clear_not_found(spec.uid)  # a binding change discards it
            pending = None
        return cursor_to_present(
            stored_cursor=stored.get("cursor"),
            target_controlled=target is not None,
            target_stamp=compute_stamp(key, target.data) if target is not None else None,
            stored_stamp=stored.get("stamp"),
            binding=binding,
            stored_binding=stored.get("cursorBinding"),
            forced_full=self.forced_full or pending is not None,
        )

    def _client(self, instance: dict[str, Any]) -> HikyoClient:
        try:
            return self.engine.client_for(instance)
        except HikyoClientError as error:  # S3.1, S3.2
            raise _Stop(failure(f"HikyoInstance {instance['metadata']['name']}: {error}")) from None

    def _pace(self, instance_uid: str) -> None:
        store, settings = self.engine.store, self.settings
        paused = pause_left(store, instance_uid, self.engine.wall_seconds())
        if paused > 0:  # a 429 paused every request to this instance
            # Spread over up to one more pause length, so the CRs waiting on it do not all
            # come back at its end at once (each runs once per pause, S4.1.6).
            raise _Stop(
                _paced("InstancePaused", spread(paused, self.spec.uid if self.spec else self.name))
            )
        probe_in = unresponsive_wait(store, instance_uid)
        if probe_in > 0:  # another run is probing an instance that stopped answering
            raise _Stop(self._unresponsive(max(probe_in, PROBE_INTERVAL_SECONDS)))
        wait = wait_for_token(
            store, instance_uid, settings.fetch_qps, settings.fetch_burst, sleep=self.engine.sleep
        )
        if wait > 0:
            raise _Stop(_paced("Paced", wait))

    def _unresponsive(self, wait: float) -> Outcome:
        """Not fetched, and no slot held: a probe finds out when the instance answers again.
        Synced=False/FetchFailed tells why; no event (the probe's own failure emits one)."""
        name = self.spec.instance_name if self.spec else "?"
        outcome = failure(
            f"not fetched: HikyoInstance {name} did not answer in time; one request at a "
            "time probes it until it answers",
            requeue=Requeue.AFTER,
            delay=spread(wait, self.spec.uid if self.spec else self.name),
        )
        outcome.events = []
        return outcome

    # -- R16 -----------------------------------------------------------------------------

    def _answer(
        self,
        spec: SecretSpec,
        result: FetchResult,
        cursor: str | None,
        target: SecretObject | None,
        key: bytes,
        binding: str,
    ) -> Outcome:
        if result.outcome is FetchOutcome.DELIVERY:
            assert result.delivery is not None
            self.engine.store.clear_not_found(spec.uid)
            remember_capabilities(self.engine.store, self.instance_uid, result.delivery)
            return self._delivered(spec, result.delivery, target, key, binding)
        if result.outcome is FetchOutcome.AUTHORITATIVE_NOT_FOUND:
            return self._not_found(spec, cursor, key, binding)
        if result.outcome is FetchOutcome.NOT_MATERIALIZED:  # S4.12
            message = (
                "the environment has no published revision yet (or the pinned one was "
                "collected): nothing was written"
            )
            return Outcome(
                reason="NotMaterialized",
                message=message,
                requeue=Requeue.RESYNC,
                lifecycle="Retained",
                conditions={SYNCED: Condition(SYNCED, "False", "NotMaterialized", message)},
                events=[Event("Warning", "NotMaterialized", message)],
            )
        if result.outcome is FetchOutcome.RATE_LIMITED:  # S4.1.6: no backoff step
            pause_instance(
                self.engine.store,
                self.instance_uid,
                result.retry_after or 1.0,
                self.engine.wall_seconds(),
            )
            return failure(
                "rate limited by the Hikyo server (status 429)",
                requeue=Requeue.AFTER,
                delay=result.retry_after or 1.0,
            )
        return failure(f"fetch failed: {result.detail}")  # S4.11

    def _delivered(
        self,
        spec: SecretSpec,
        delivery: Delivery,
        target: SecretObject | None,
        key: bytes,
        binding: str,
    ) -> Outcome:
        stored_conditions = {
            c["type"]: c for c in (self.cr.get("status") or {}).get("conditions") or []
        }
        findings = expiry.evaluate(delivery, stored_conditions, self.now)  # S4.13 first
        if delivery.current:
            outcome = Outcome(
                reason="Current",
                requeue=Requeue.RESYNC,
                lifecycle="Synced",
                conditions={
                    SYNCED: Condition(SYNCED, "True", "Current", "the delivered content is current")
                },
            )
            stamp = (self.cr.get("status") or {}).get("stamp")
            if stamp:  # R16: read-only S6.5, no patches and no event (S4.17)
                outcome = with_rollout(outcome, self._roll_out(spec, stamp, patch=False))
        else:
            outcome = self._full_delivery(spec, delivery, target, key, binding)
        outcome.conditions = {**findings.conditions, **outcome.conditions}
        outcome.status = {**findings.status, **outcome.status}
        outcome.events = [*findings.events, *outcome.events]
        return outcome

    def _full_delivery(
        self,
        spec: SecretSpec,
        delivery: Delivery,
        target: SecretObject | None,
        key: bytes,
        binding: str,
    ) -> Outcome:
        content = assemble(spec, delivery.keys)
        if isinstance(content, ContentRefusal):
            if content.withdraw_typed:  # S4.10.2 via a valid 200
                return self._withdraw(
                    spec, key, Condition(DELIVERY, "False", content.reason, content.message)
                )
            # S5.4: a Delivery refusal clears the cursor and leaves Synced as it was.
            return refusal(
                Condition(DELIVERY, "False", content.reason, content.message), clear_cursor=True
            )
        return self._write(spec, content, delivery, target, key, binding)

    def _write(
        self,
        spec: SecretSpec,
        content: Content,
        delivery: Delivery,
        target: SecretObject | None,
        key: bytes,
        binding: str,
    ) -> Outcome:
        """S4.8, S4.9: Secret first (verified), then the status carries the cursor, last."""
        writer = SecretWriter(self.cluster)
        try:
            written, changed = writer.converge(spec, target, content.data)
        except WriteFailed as error:
            return failure(str(error), clear_cursor=True)
        stored = self.cr.get("status") or {}
        status: dict[str, Any] = {
            "cursor": delivery.cursor,
            "cursorBinding": binding,
            "stamp": compute_stamp(key, content.data),
            "managedSecretUID": written.uid,
            "managedSecretResourceVersion": written.resource_version,
            "keyCount": len(content.data),
        }
        if changed or not stored.get("lastDelivery"):
            status["lastDelivery"] = now_text(self.now)
        events = []
        if changed:
            verb = "created" if target is None else "updated"
            events.append(
                Event(
                    "Normal",
                    "Delivered",
                    f"Secret {spec.target_name} {verb} with {len(content.data)} keys",
                )
            )
        delivery_condition: Condition | None = None
        if content.missing:
            delivery_condition = Condition(
                DELIVERY,
                "False",
                "KeysMissing",
                f"the server did not deliver mapped keys {key_list(content.missing)}; their "
                "destinations are absent from the Secret",
            )
        elif content.env_skip:
            delivery_condition = Condition(
                DELIVERY,
                "True",
                "EnvFromSkip",
                f"destinations {key_list(content.env_skip)} may be skipped by envFrom without "
                "relaxed environment variable validation",
            )
        if delivery_condition is not None:
            events.append(Event("Warning", delivery_condition.reason, delivery_condition.message))
        outcome = Outcome(
            reason="Delivered",
            message=f"{len(content.data)} keys",
            requeue=Requeue.RESYNC,
            lifecycle="Synced",
            conditions={
                SYNCED: Condition(
                    SYNCED,
                    "True",
                    "Delivered",
                    f"Secret {spec.target_name} holds the delivered content",
                ),
                SCRUBBED: None,
                DELIVERY: delivery_condition,
            },
            status=status,
            events=events,
            wrote_secret=changed,
        )
        rollout = self._roll_out(spec, status["stamp"], patch=True)  # S4.9 step 2
        return with_rollout(outcome, rollout, warn=True)

    def _not_found(self, spec: SecretSpec, cursor: str | None, key: bytes, binding: str) -> Outcome:
        """S4.10.0: act on an authoritative 404 only when a second, cursor-less one confirms it."""
        already_scrubbed = any(
            c.get("type") == SCRUBBED and c.get("status") == "True"
            for c in (self.cr.get("status") or {}).get("conditions") or []
        )
        store = self.engine.store
        now = self.engine.wall_seconds()
        wait = self.settings.not_found_confirmation_seconds
        if not already_scrubbed:
            seen = store.not_found_seen(spec.uid)
            if seen and now - seen[1] > NOT_FOUND_RECORD_TTL:
                seen = None
            if seen is None or seen[0] != binding:
                store.record_not_found(spec.uid, binding, now)
                return _confirming(wait)
            if cursor is not None or now - seen[1] < wait:
                return _confirming(max(wait - (now - seen[1]), 1.0))
        store.clear_not_found(spec.uid)
        if spec.target_type == OPAQUE:
            return self._scrub(spec, key)
        return self._withdraw(spec, key, None)

    def _scrub(self, spec: SecretSpec, key: bytes) -> Outcome:
        """S4.10.1: empty an Opaque target; an absent one stays absent."""
        writer = SecretWriter(self.cluster)
        try:
            emptied = writer.empty(spec)
        except WriteFailed as error:
            return failure(str(error), clear_cursor=True)
        except NotOwned:
            return _not_owned(spec.target_name)
        return self._scrubbed(spec, key, emptied, None)

    def _withdraw(self, spec: SecretSpec, key: bytes, delivery: Condition | None) -> Outcome:
        """S4.10.2: a typed target cannot be empty, so it is deleted, with preconditions."""
        writer = SecretWriter(self.cluster)
        try:
            writer.delete_typed(spec)
        except WriteFailed as error:
            return failure(str(error), clear_cursor=True)
        except NotOwned:
            return _not_owned(spec.target_name)
        return self._scrubbed(spec, key, None, delivery)

    def _scrubbed(
        self, spec: SecretSpec, key: bytes, emptied: SecretObject | None, delivery: Condition | None
    ) -> Outcome:
        what = "emptied" if emptied is not None else "deleted or left absent"
        message = (
            f"the Hikyo server no longer authorizes this delivery: Secret "
            f"{spec.target_name} was {what}"
        )
        conditions: dict[str, Condition | None] = {
            SCRUBBED: Condition(SCRUBBED, "True", "AuthorizationWithdrawn", message),
            SYNCED: None,
        }
        events = [Event("Warning", "AuthorizationWithdrawn", message)]
        if delivery is not None:
            conditions[DELIVERY] = delivery
            events.append(Event("Warning", delivery.reason, delivery.message))
        outcome = Outcome(
            reason="AuthorizationWithdrawn",
            message=message,
            requeue=Requeue.RESYNC,
            lifecycle="Scrubbed",
            conditions=conditions,
            events=events,
            status={
                "cursor": None,
                "cursorBinding": None,
                "stamp": empty_content_stamp(key),
                "managedSecretUID": emptied.uid if emptied else None,
                "managedSecretResourceVersion": emptied.resource_version if emptied else None,
                "keyCount": 0,
            },
            wrote_secret=True,
        )
        # S4.10.1 (3)/(5), S4.10.2 (4): the empty-content stamp restarts the opted-in workloads.
        rollout = self._roll_out(spec, outcome.status["stamp"], patch=True)
        return with_rollout(outcome, rollout, warn=True)

    # -- S4.9 step 2: rollouts (S6) ----------------------------------------------------------

    def _roll_out(self, spec: SecretSpec, stamp: str, *, patch: bool) -> RolloutFinding:
        return roll_out(
            self.cluster,
            self.engine.store,
            self.settings,
            spec,
            stamp,
            patch=patch,
            now=self.engine.wall_seconds(),
        )

    # -- S4.15 and the status write --------------------------------------------------------

    def _forbidden(self, error: Forbidden) -> Outcome:
        if error.namespace_terminating:
            return stop_quietly("NamespaceTerminating")
        try:
            allowed = self.cluster.access_allowed(
                error.verb, error.group, error.resource, error.subresource, self.namespace
            )
        except KubeError:
            allowed = False
        kind = error.resource + (f"/{error.subresource}" if error.subresource else "")
        if allowed:
            return failure(
                f"forbidden by admission or quota: {kind} {error.verb}", clear_cursor=True
            )
        message = (
            f"the operator may not {error.verb} {kind} in namespace {self.namespace}: "
            "bind the operator to this namespace (Helm operator.namespaces)"
        )
        return Outcome(
            reason="NamespaceNotBound",
            message=message,
            requeue=Requeue.BACKOFF,
            lifecycle="Unreconciled",
            conditions={
                UNRECONCILED: Condition(UNRECONCILED, "True", "NamespaceNotBound", message)
            },
            events=[Event("Warning", "NamespaceNotBound", message)],
        ).clearing_cursor()

    def _write_status(self, outcome: Outcome, stored: dict[str, Any], result: RunResult) -> Outcome:
        outcome.conditions = {**self.passed, **outcome.conditions}
        desired = desired_status(
            stored,
            outcome,
            generation=result.generation,
            now=now_text(self.now),
            operator_namespace=self.settings.operator_namespace,
        )
        result.conditions_after = desired["conditions"]
        if not status_differs(stored, desired):
            return outcome  # S4.17: nothing changed, nothing written
        if outcome.fetched:
            desired["lastFetch"] = now_text(self.now)
        patch: dict[str, Any] = {name: None for name in stored if name not in desired}
        patch.update(desired)
        try:
            self.cluster.patch_hikyosecret_status(
                self.namespace, self.name, patch, self.cr["metadata"]["resourceVersion"]
            )
        except KubeError as error:
            log.warning("status of %s/%s not written: %s", self.namespace, self.name, error)
            written = failure(f"status write failed: {error}")
            written.fetched, written.write_status = outcome.fetched, False
            written.wrote_secret = outcome.wrote_secret
            result.conditions_after = result.conditions_before
            return written
        result.status_written = True
        return outcome


def _paced(reason: str, delay: float) -> Outcome:
    """S4.1.6: not a failure: no write, no backoff step, run again when a token is due."""
    return Outcome(reason=reason, requeue=Requeue.AFTER, delay=delay, write_status=False)


def _rerun(reason: str) -> Outcome:
    """R2 stops after the finalizer patch; the resulting watch event (or this) runs it again."""
    return Outcome(reason=reason, requeue=Requeue.AFTER, delay=0.0, write_status=False)


def _not_owned(target_name: str) -> Outcome:
    return refusal(
        Condition(
            CONFLICT,
            "True",
            "ManagedSecretNotOwned",
            f"Secret {target_name} exists and is not managed by this HikyoSecret; the operator "
            "never adopts a Secret: delete or rename it, or choose another target.name",
        )
    )


def _confirming(delay: float) -> Outcome:
    outcome = failure(
        "not found; confirming before acting (S4.10.0)", requeue=Requeue.AFTER, delay=delay
    )
    outcome.forced_full_next = True
    return outcome
