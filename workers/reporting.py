"""One status-report attempt for one HikyoSecret (S7): gate, body, credential, POST, verdict.

Runs as its own task with its own keyed queue (one report in flight per CR; triggers during a
run coalesce into one follow-up with the latest status, S7.4). It never writes the CR's status,
conditions or events, so it cannot loop (S7.4).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .engine.credentials import Credential
from .engine.errors import HikyoClientError
from .engine.fetch import requested_for
from .engine.fetched import Scope
from .engine.observe import read_credential
from .engine.outcome import Requeue
from .engine.pacing import (
    GateNotes,
    gate_note_names,
    instance_gate,
    note_answer,
    pause_instance,
    pause_scope,
    resumed,
)
from .engine.ports import CoordinationStore
from .engine.reports import (
    CAPABILITY_TTL,
    capabilities_note,
    heartbeat_period,
    heartbeat_slack,
    report_body,
    reporting_offered,
    verdict,
)
from .engine.spec import SpecInvalid, parse_spec
from .keys import ObjectKey
from .runtime import Runtime
from .store_errors import store_errors

log = logging.getLogger(__name__)

REPORT_LOCK_TTL = 60.0
CLUSTER_ID_NOTE = "cluster-id"
CLUSTER_ID_RETRY = 300.0  # S7.6: re-read at most every 5 min while unreadable
# A waiting report's note outlives its wait by this much, so the retry still finds it.
WAITING_NOTE_MARGIN = 30.0


@dataclass(frozen=True)
class ReportAttempt:
    """What the observation store keeps: time, HTTP status, the conditions sent; nothing else."""

    key: ObjectKey
    at: datetime
    http_status: int | None
    outcome: str
    conditions: list[dict[str, str]] = field(default_factory=list)


def run_report(
    runtime: Runtime, key: ObjectKey, *, dispatched_only: bool = False, handed: bool = False
) -> ReportAttempt | None:
    """``handed``: a reconcile handed this report over with its reads (Runtime.hand_report),
    outside the queue; it stands for the CR's waiting heartbeat, which its finish moves to P
    later (``KeyedQueue.begin``'s ``claim_waiting``)."""
    queue = runtime.reports
    lock = queue.begin(
        key,
        runtime.identity,
        ttl=REPORT_LOCK_TTL,
        dispatched_only=dispatched_only,
        claim_waiting=handed,
    )
    if lock is None:
        # One in flight: this trigger coalesces into its follow-up. Or (dispatched_only) a
        # broker message's second copy, whose first copy has sent the report.
        return None
    try:
        attempt, next_in = _attempt(runtime, key)
    except store_errors() as error:
        # The store is unreachable: one line, not a traceback; if finishing fails too, the lock
        # expires and the dispatcher's stale check makes the key due again (S8.4).
        log.warning("status report of %s interrupted: %s", key, type(error).__name__)
        with contextlib.suppress(*store_errors()):
            queue.finish(lock, Requeue.AFTER, delay=300.0)
        return None
    except Exception as error:  # a report is best effort: never let it break the worker
        log.warning("status report of %s failed: %s", key, type(error).__name__)
        queue.finish(lock, Requeue.AFTER, delay=300.0)
        return None
    if next_in is None:
        queue.finish(lock, Requeue.NONE)
        queue.forget(key)
        return None
    queue.finish(lock, Requeue.AFTER, delay=next_in)
    if attempt is not None:
        runtime.record_report(attempt)
        log.info("status report of %s: %s", key, attempt.outcome)
    return attempt


def _pace_wait(
    runtime: Runtime,
    scope: str,
    now: float,
    requester: str,
    gate_notes: GateNotes | None = None,
) -> float:
    """0 when this report may go to the instance now (a token taken), else seconds to wait:
    the S4.1.6 pause of its org, the unresponsive-instance probe gate, the instance's token
    bucket. ``scope``: the report's ``pause_scope``; ``gate_notes``: its ``gate_note_names``
    when already read."""
    store = runtime.queue
    instance_uid, _, org = scope.partition("/")  # a UID holds no "/"
    # A report to an instance that stopped answering would hold a worker slot like a fetch:
    # it waits for the probe gate too (the report may be the probe).
    gate = instance_gate(store, instance_uid, org, now, requester, gate_notes)
    return (
        gate.paused
        or gate.resume_in
        or gate.probe_in
        or store.take_token(
            f"instance:{instance_uid}", runtime.settings.fetch_qps, runtime.settings.fetch_burst
        )
    )


def _waiting_note(key: ObjectKey) -> str:
    return f"report-waiting:{key.uid}"


def _attempt(runtime: Runtime, key: ObjectKey) -> tuple[ReportAttempt | None, float | None]:
    """(the attempt, seconds until the next one); (None, None) when the CR is gone.

    A report that had to wait for its instance's pace (a token, a pause, the probe gate)
    notes the instance's UID and org (``pause_scope``) for the wait; its next attempt asks the
    pace first and, while it must still wait, reads nothing (issue 13: at 1,000 CRs the waits
    cost ~17 GETs of the CR and as many of the instance per report). Once it may go,
    everything is read as always. The notes an attempt needs are read together: those of the
    CR and the cluster first, the instance's once it is known (issue 13: 7 reads of the store
    per report became 3); a report on its reconcile's reads knows the instance that reconcile
    used, and reads its notes with the others (issue 37: one round trip and one instance read
    less per heartbeat).
    """
    cluster, store = runtime.cluster, runtime.queue
    reused = runtime.recent_reads.take(key.uid)  # S7.1 rev 3: its reconcile's reads
    known_instance = reused.instance if reused is not None else None
    waited, reports_paused, known_cluster_id, *instance_notes = store.get_notes(
        _waiting_note(key),
        _reports_paused_note(key),
        CLUSTER_ID_NOTE,
        *(
            ()
            if reused is None or known_instance is None
            else _instance_note_names(
                known_instance["metadata"]["uid"], reused.org, _requester_of(reused.cr)
            )
        ),
    )
    paced_scope, _, paced_requester = (waited or "").partition(" ")
    if paced_scope:
        if reports_paused:  # S7.5: the pause wins, as below
            paced_scope = ""
        else:
            wait = _pace_wait(runtime, paced_scope, time.time(), paced_requester)
            if wait > 0:  # the reads taken above are dropped: after the wait it reads again
                store.put_note(_waiting_note(key), waited or "", wait + WAITING_NOTE_MARGIN)
                return None, wait
    cr = reused.cr if reused is not None else cluster.get_hikyosecret(key.namespace, key.name)
    if cr is None or cr["metadata"]["uid"] != key.uid:
        return None, None
    try:
        spec = parse_spec(cr)
    except SpecInvalid:
        return None, heartbeat_period(300.0)
    period = heartbeat_period(spec.resync_seconds)
    if reports_paused:  # S7.5
        return None, period
    instance = known_instance or cluster.get_instance(spec.instance_name)
    if instance is None:
        return None, period
    instance_uid = instance["metadata"]["uid"]
    scope, requester = pause_scope(instance_uid, spec.org), requested_for(spec)
    if not instance_notes:
        instance_notes = store.get_notes(*_instance_note_names(instance_uid, spec.org, requester))
    capabilities, *gate = instance_notes
    if not reporting_offered(capabilities):
        return None, period  # S7.2: only to a server that advertised the capability
    cluster_id = _cluster_id(runtime, known_cluster_id)
    body = report_body(cr, cluster_id) if cluster_id else None
    if body is None:
        return None, period
    now = time.time()
    # S4.1.6: reports share the instance's pace; a token taken above for this very instance
    # and org is this report's.
    gate_notes: GateNotes = (gate[0], gate[1], gate[2], gate[3])
    wait = 0.0 if paced_scope == scope else _pace_wait(runtime, scope, now, requester, gate_notes)
    if wait > 0:
        store.put_note(_waiting_note(key), f"{scope} {requester}", wait + WAITING_NOTE_MARGIN)
        return None, wait
    if reused is not None:
        token = reused.token
    else:
        credential = read_credential(cluster, runtime.settings, spec, instance)  # S2.3.5
        if not isinstance(credential, Credential):
            return None, period  # refused (S2.4): the reconcile reports why
        token = credential.token
    try:
        client = runtime.clients(instance)
    except HikyoClientError:
        return None, period
    answer = client.report_status(
        Scope(spec.org, spec.project, spec.environment), token=token, report=body
    )
    note_answer(store, instance_uid, answer.detail if answer.status is None else None, requester)
    slack = heartbeat_slack(spec.resync_seconds)  # a run may carry it until then (S7.4 rev 4)
    decided = verdict(answer.status, answer.retry_after, period, slack)
    if answer.status == 204 and capabilities is not None:  # S7.2 rev 4: a 204 renews it too
        _renew_capabilities(store, instance_uid, capabilities)
    if gate_notes[2] and answer.status not in (None, 429):  # the first after a pause: it ends
        resumed(store, scope)
    if answer.status == 429:  # S7.5: plus the instance pause
        pause_instance(store, scope, answer.retry_after or 1.0, now)
    if decided.pause:
        store.put_note(_reports_paused_note(key), "1", decided.pause)
    attempt = ReportAttempt(
        key, datetime.now(UTC), answer.status, decided.summary, body["conditions"]
    )
    return attempt, decided.next_in


# Each process renews an instance's capability note at most this often: a heartbeat per CR
# per period would otherwise write it once per report.
CAPABILITY_RENEW_SECONDS = 3600.0
_renewed_at: dict[str, float] = {}  # instance UID -> when this process last renewed its note
_monotonic: Callable[[], float] = time.monotonic  # read per call, so a test can set a clock


def _renew_capabilities(store: CoordinationStore, instance_uid: str, capabilities: str) -> None:
    now = _monotonic()
    last = _renewed_at.get(instance_uid)
    if last is not None and now - last < CAPABILITY_RENEW_SECONDS:
        return
    _renewed_at[instance_uid] = now
    store.put_note(capabilities_note(instance_uid), capabilities, CAPABILITY_TTL)


def _instance_note_names(
    instance_uid: str, org: str, requester: str
) -> tuple[str, str, str, str, str]:
    """The notes a report reads about its instance: its S7.2 capabilities and its gate's."""
    return capabilities_note(instance_uid), *gate_note_names(instance_uid, org, requester)


def _requester_of(cr: dict[str, Any]) -> str:
    """S4.1.9's requester of a CR's requests, "" when its spec no longer parses."""
    try:
        return requested_for(parse_spec(cr))
    except SpecInvalid:
        return ""


def _reports_paused_note(key: ObjectKey) -> str:
    return f"reports-paused:{key.uid}"


def _cluster_id(runtime: Runtime, known: str | None) -> str | None:
    """S7.6: the kube-system Namespace UID, kept in the store (``known``: its note, read with
    the attempt's others); unreadable => inactive (log)."""
    store = runtime.queue
    if known is not None:
        return known or None  # "" marks a recent failed read
    try:
        uid = runtime.cluster.namespace_uid("kube-system")
    except Exception as error:
        log.warning(
            "cluster id unreadable (%s): status reporting paused for 5 min", type(error).__name__
        )
        uid = None
    store.put_note(CLUSTER_ID_NOTE, uid or "", 24 * 3600.0 if uid else CLUSTER_ID_RETRY)
    return uid


def attempt_fields(attempt: ReportAttempt) -> dict[str, Any]:
    return {
        "uid": attempt.key.uid,
        "namespace": attempt.key.namespace,
        "name": attempt.key.name,
        "at": attempt.at,
        "http_status": attempt.http_status,
        "outcome": attempt.outcome,
        "conditions": attempt.conditions,
    }
