"""Status reports to the Hikyo server (S7): the closed body, the capability gate, the cadence and
what each answer means. Pure, except for the small notes kept in the coordination store.

A report carries identity, generation, lifecycle and each condition's type, status and reason:
never values, key names, mappings, acknowledgements, cursors, stamps or messages (S7.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .durations import RESYNC_JITTER
from .fetched import Delivery
from .ports import CoordinationStore

STATUS_REPORT = "status-report"
# S7.2 rev 4: 25 h, renewed by a 204 to a report, so a CR alone on its instance with a resync
# of 24 h or more still sends its 24 h heartbeat (its last fetch may be up to 24 h older).
CAPABILITY_TTL = 25 * 3600.0
PAUSE_SECONDS = 3600.0  # S7.5
MIN_PERIOD, MAX_PERIOD = 300.0, 24 * 3600.0  # S7.4
# A run meant to carry a heartbeat comes this long after it is due, so it is due by then.
RIDE_MARGIN_SECONDS = 1.0


def remember_capabilities(store: CoordinationStore, instance_uid: str, delivery: Delivery) -> None:
    """S7.2: the capability set of the latest valid 200, per instance, for 25 h."""
    capabilities = sorted(delivery.capabilities or ())
    store.put_note(capabilities_note(instance_uid), ",".join(capabilities), CAPABILITY_TTL)


def capabilities_note(instance_uid: str) -> str:
    return f"capabilities:{instance_uid}"


def reporting_offered(capabilities: str | None) -> bool:
    """S7.2: the instance's noted capability set (``capabilities_note``) offers reports."""
    return capabilities is not None and STATUS_REPORT in capabilities.split(",")


def heartbeat_period(resync_seconds: float) -> float:
    """S7.4: P = min(max(resyncInterval, 5 min), 24 h)."""
    return min(max(resync_seconds, MIN_PERIOD), MAX_PERIOD)


def heartbeat_slack(resync_seconds: float) -> float:
    """S7.4 rev 4: how long past its due time a heartbeat waits for the CR's next run to carry
    it (on the reads that run made, S7.1 rev 3): a resync at the jitter's high end where runs
    come at least once a period, so it goes out between P and P + resyncInterval after the last
    204; none where they come less often (it goes alone when due)."""
    if resync_seconds > heartbeat_period(resync_seconds):
        return 0.0
    return resync_seconds * RESYNC_JITTER[1]


def heartbeat_rides(due_in: float | None, slack: float) -> bool:
    """S7.4 rev 4: a run carries the CR's heartbeat once it is due and never before. The
    report queue holds it ``slack`` (``heartbeat_slack``) past its due time, so it is due when
    at most ``slack`` is left of that wait. ``due_in``: seconds until the report queue would
    send it alone (None: no report is waiting, e.g. one is in flight)."""
    return due_in is not None and due_in <= slack


def run_after_heartbeat(resync_seconds: float) -> float | None:
    """The earliest a CR's next run should come after a report that goes now (S7.4 rev 4), or
    None when any draw will do.

    That report makes the next heartbeat due P later. Where P is about the resync (a
    resyncInterval of 5 min or more, the default included), S4.1.3's jitter puts about half the
    next runs before P, too early to carry it: the heartbeat would then go alone, reading the
    CR and its credential again, or ride the run after. A run drawn no earlier than P (and a
    margin for the clocks) carries it; the queue never draws past the jitter's high end
    (``queue.base.next_timer``). Where runs come more often than once a period, one of them
    comes after P anyway; where every draw comes after P (a resync over P = 24 h), the
    heartbeat goes alone when due.
    """
    period = heartbeat_period(resync_seconds)
    low, high = (resync_seconds * factor for factor in RESYNC_JITTER)
    if period <= low or period > high:  # every draw comes after P, or runs come oftener
        return None
    return period + RIDE_MARGIN_SECONDS


def report_body(cr: dict[str, Any], cluster_id: str) -> dict[str, Any] | None:
    """S7.3's closed body, or None while the CR has no status write yet (S7.1) or is deleting."""
    metadata = cr.get("metadata") or {}
    status = cr.get("status") or {}
    if not status.get("lifecycle") or metadata.get("deletionTimestamp"):
        return None
    return {
        "cluster_id": cluster_id,
        "namespace": metadata["namespace"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "target": ((cr.get("spec") or {}).get("target") or {}).get("name", ""),
        "generation": int(metadata.get("generation") or 0),
        "observed_generation": int(status.get("observedGeneration") or 0),
        "lifecycle": status["lifecycle"],
        "conditions": [
            {"type": c["type"], "status": c["status"], "reason": c["reason"]}
            for c in status.get("conditions") or []
        ],
    }


@dataclass(frozen=True)
class ReportVerdict:
    """What an answer means: when to try again, and whether to pause this CR's reports."""

    accepted: bool
    next_in: float  # seconds until the next heartbeat or attempt
    pause: float = 0.0  # seconds of S7.5 pause (kept in the store)
    summary: str = ""


def verdict(
    status: int | None, retry_after: float | None, period: float, slack: float = 0.0
) -> ReportVerdict:
    """S7.5: 204 accepted; 401/403/404 and 400 pause 1 h; 429 waits min(Retry-After, 1 h);
    5xx and transport failures drop the report, the next heartbeat retries. After a 204 the
    report queue sends the next heartbeat alone ``slack`` after it is due, unless a run
    carries it first (S7.4 rev 4, ``heartbeat_slack``)."""
    if status == 204:
        return ReportVerdict(True, period + slack, summary="accepted")
    if status in (400, 401, 403, 404):
        return ReportVerdict(False, PAUSE_SECONDS, PAUSE_SECONDS, f"refused (status {status})")
    if status == 429:
        wait = min(retry_after or 1.0, PAUSE_SECONDS)
        return ReportVerdict(False, wait, wait, "rate limited (status 429)")
    what = f"status {status}" if status is not None else "transport failure"
    return ReportVerdict(False, period, summary=f"dropped ({what})")
