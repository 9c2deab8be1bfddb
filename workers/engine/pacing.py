"""Outbound pacing per Hikyo instance (S4.1.6): one token bucket shared by every process, and
a pause of every request to an instance for one org after it answered 429."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import NamedTuple

from .ports import CoordinationStore

TOKEN_WAIT_BUDGET = 5.0  # no token within 5 s: stop before the fetch, requeue when one is due
MIN_PAUSE = 1.0
MAX_PAUSE = 300.0
# At a pause's end its CRs come back within this window, in the order they became due; the CR
# whose request drew the 429 comes back after the window (S4.1.6 rev 3), so it never runs
# ahead of CRs that waited longer (each window's draw of tokens keeps the order it is given).
RESUME_WINDOW = 1.0
INSTANCE_PAUSED = "InstancePaused"  # the reason of a run that waits for a 429 pause
# S4.1.6 rev 4: at a pause's end the first request (the earliest due) goes alone; the others
# look again this often until it is answered with something other than 429. A first request
# that gets no answer at all lets another go after about one client timeout.
RESUME_POLL_SECONDS = 1.0
RESUME_CLAIM_SECONDS = 30.0
RESUMING_MEMORY_SECONDS = 600.0  # after the pause: how long the first request may be awaited


def pause_scope(instance_uid: str, org: str) -> str:
    """What one 429 pauses (S4.1.6 rev 3): the real server limits machine fetches per org and
    per instance, so a pause covers one org of one instance; an instance-wide limit answers
    429 to every org, which pauses each in turn."""
    return f"{instance_uid}/{org}"


def _pause_note(scope: str) -> str:
    return f"instance-paused:{scope}"


def _resuming_note(scope: str) -> str:
    return f"instance-resuming:{scope}"


def _left(until: str | None, now: float) -> float:
    return max(0.0, float(until) - now) if until else 0.0


def pause_seconds(retry_after: float | None) -> float:
    """clamp(Retry-After, 1 s, 5 min); absent => 1 s (S4.1.6)."""
    return min(max(retry_after or MIN_PAUSE, MIN_PAUSE), MAX_PAUSE)


def pause_instance(store: CoordinationStore, scope: str, seconds: float, now: float) -> None:
    """After a 429: every request to the instance for the org of ``scope`` (``pause_scope``)
    waits clamp(Retry-After, 1 s, 5 min)."""
    seconds = pause_seconds(seconds)
    until = repr(now + seconds)
    store.put_note(_pause_note(scope), until, seconds)
    # Until a request after it is answered with something other than 429, one at a time.
    store.put_note(_resuming_note(scope), until, seconds + RESUMING_MEMORY_SECONDS)


def paused_for(store: CoordinationStore, instance_uid: str, org: str, now: float) -> float:
    """Seconds left of the 429 pause of (instance, org), without taking anything: a CR that
    waits for it mints no ServiceAccount token (S4.1.6 rev 4)."""
    return _left(store.get_note(_pause_note(pause_scope(instance_uid, org))), now)


def resumed(store: CoordinationStore, scope: str) -> None:
    """The first request after a pause was answered with something other than 429: the rest
    of the (instance, org) may go (S4.1.6 rev 4)."""
    store.put_note(_resuming_note(scope), "", 0.001)  # cleared: a note expiring at once


def resume_delay_after_429(retry_after: float | None) -> float:
    """When the CR whose request drew a 429 runs again: after the pause and after the window
    in which the CRs that waited for it come back (S4.1.6 rev 3)."""
    return pause_seconds(retry_after) + RESUME_WINDOW


def resume_delay_while_paused(paused_left: float) -> float:
    """When a CR that found its (instance, org) paused runs again: at the pause's end, placed
    in the resume window by how long it has waited, so the CRs that became due first run first
    (a CR that met the pause with ``paused_left`` seconds to go became due before one that met
    it with less). Pure arithmetic on the seconds left, so every process agrees."""
    left = min(max(paused_left, 0.0), MAX_PAUSE)
    return left + RESUME_WINDOW * (1.0 - left / MAX_PAUSE)


def wait_for_token(
    store: CoordinationStore,
    instance_uid: str,
    rate: float,
    burst: int,
    *,
    budget: float = TOKEN_WAIT_BUDGET,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Takes a token, sleeping up to ``budget`` seconds for one; returns 0 when taken, else the
    seconds until one is due (the caller requeues then; this is not a failure)."""
    waited = 0.0
    while True:
        wait = store.take_token(f"instance:{instance_uid}", rate, burst)
        if wait <= 0:
            return 0.0
        if waited + wait > budget:
            return wait
        sleep(wait)
        waited += wait


# -- an instance that does not answer (S4.1.9 rev 4) ------------------------------------------
#
# A Hikyo server that accepts connections and never answers holds every run that fetches from
# it for the whole client timeout. Left alone, its CRs fill every worker slot and starve the
# CRs of healthy instances. But one timeout is the failure of the CR whose request timed out
# (S3.5: its own backoff), not of its neighbours: one slow credential says nothing about the
# instance. Only when requests for two different requesters (credential or org) time out with
# no answer from the instance in between is it judged not answering; then one fetch at a time
# probes it (at most one per PROBE_INTERVAL_SECONDS, all processes together) and the other CRs
# wait like a pause, without holding a slot, until any answer ends it.

PROBE_INTERVAL_SECONDS = 30.0  # about one client timeout: one probe hanging at a time
UNRESPONSIVE_MEMORY_SECONDS = 600.0  # a quiet instance is trusted again after 10 min
SLOW_FAILURES = frozenset({"timeout", "connect timeout"})
_REMEMBERED_REQUESTERS = 8  # the timed-out requesters a note keeps (two judge the instance)


def _unresponsive_note(instance_uid: str) -> str:
    return f"instance-unresponsive:{instance_uid}"


def _timeouts_note(instance_uid: str) -> str:
    return f"instance-timeouts:{instance_uid}"


def _requester_note(instance_uid: str, requested_for: str) -> str:
    return f"requester-unresponsive:{instance_uid}:{requested_for}"


def requester(org: str, credential: str) -> str:
    """Whom a request was made for (S4.1.9: a credential, in an org), as a digest: the store
    keeps no credential name, and two different digests timing out judge the instance."""
    return hashlib.sha256(f"{org}\0{credential}".encode()).hexdigest()[:16]


class InstanceGate(NamedTuple):
    """What holds a request to an instance back before its token: seconds left of its 429
    pause, and seconds until this run may probe it while it does not answer (0: go)."""

    paused: float
    probe_in: float
    resume_in: float = 0.0  # another request goes first after the pause: look again then
    resuming: bool = False  # this request is the first after a pause: its answer ends it
    # The probe is for this request's requester only: its own requests time out, while the
    # instance answers others (S4.1.9: that trouble stays the requester's).
    requester_only: bool = False


GateNotes = tuple[str | None, str | None, str | None, str | None]


def gate_note_names(instance_uid: str, org: str, requested_for: str) -> tuple[str, str, str, str]:
    """The notes ``instance_gate`` reads, for a caller that reads them with others."""
    scope = pause_scope(instance_uid, org)
    return (
        _pause_note(scope),
        _unresponsive_note(instance_uid),
        _resuming_note(scope),
        _requester_note(instance_uid, requested_for),
    )


def instance_gate(
    store: CoordinationStore,
    instance_uid: str,
    org: str,
    now: float,
    requested_for: str,
    notes: GateNotes | None = None,
) -> InstanceGate:
    """The org's 429 pause at the instance, then the one first request after it, else the
    probe of an instance, or of this requester, that stopped answering (S4.1.9), from one
    read of the notes (issue 13: a round trip less per run); ``notes`` are those of
    ``gate_note_names`` when already read. A paused instance takes no probe token."""
    names = gate_note_names(instance_uid, org, requested_for)
    paused_until, unresponsive, resuming, requester_hung = notes or store.get_notes(*names)
    paused = _left(paused_until, now)
    if paused > 0:
        return InstanceGate(paused, 0.0)
    if resuming:  # each pause has a claim of its own: its end lets one request through
        claim = f"resume:{pause_scope(instance_uid, org)}:{resuming}"
        wait = store.take_token(claim, 1.0 / RESUME_CLAIM_SECONDS, 1)
        if wait > 0:
            return InstanceGate(0.0, 0.0, resume_in=min(wait, RESUME_POLL_SECONDS))
    if unresponsive:
        return InstanceGate(0.0, _take_probe(store, instance_uid), resuming=bool(resuming))
    if requester_hung:
        probe_in = _take_probe(store, instance_uid, requested_for)
        return InstanceGate(0.0, probe_in, resuming=bool(resuming), requester_only=True)
    return InstanceGate(0.0, 0.0, resuming=bool(resuming))


def _take_probe(store: CoordinationStore, instance_uid: str, requested_for: str = "") -> float:
    """The probe of the instance, or with ``requested_for`` of that requester's requests."""
    bucket = f"probe:{instance_uid}" + (f":{requested_for}" if requested_for else "")
    return store.take_token(bucket, 1.0 / PROBE_INTERVAL_SECONDS, 1)


def note_answer(
    store: CoordinationStore, instance_uid: str, failure_detail: str | None, requested_for: str
) -> None:
    """After a request for ``requested_for`` (``requester``): a timeout holds that requester's
    other requests back behind one probe at a time, and a second requester's timeout with no
    answer in between holds the whole instance back (S4.1.9); an answer clears the instance's
    marks and that requester's. ``failure_detail`` is the transport failure's fixed text,
    None when the server answered."""
    unresponsive, timeouts = _unresponsive_note(instance_uid), _timeouts_note(instance_uid)
    mine = _requester_note(instance_uid, requested_for)
    if failure_detail in SLOW_FAILURES:
        store.put_note(mine, failure_detail, UNRESPONSIVE_MEMORY_SECONDS)
        _take_probe(store, instance_uid, requested_for)  # this run was its probe
        seen = {name for name in (store.get_note(timeouts) or "").split(",") if name}
        seen.add(requested_for)
        if len(seen) >= 2:
            store.put_note(unresponsive, failure_detail, UNRESPONSIVE_MEMORY_SECONDS)
            _take_probe(store, instance_uid)  # this run was one
        kept = ",".join(sorted(seen)[:_REMEMBERED_REQUESTERS])
        store.put_note(timeouts, kept, UNRESPONSIVE_MEMORY_SECONDS)
        return
    for name, present in zip(
        (unresponsive, timeouts, mine), store.get_notes(unresponsive, timeouts, mine), strict=True
    ):
        if present:
            store.put_note(name, "", 0.001)  # cleared: a note expiring at once


def spread(seconds: float, cr_uid: str) -> float:
    """``seconds`` stretched by up to 2x, fixed per CR, so stood-off CRs do not wake together."""
    return seconds * (1.0 + (int(hashlib.sha256(cr_uid.encode()).hexdigest()[:4], 16) / 65536))
