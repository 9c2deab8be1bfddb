"""Shard leaders' Leases as the leaders record them (issue 51 item 3). The overview reads these
rows, never the apiserver: each leader writes its own Lease's facts (``LeaseRecorder``), on a
new term at once and otherwise at most once per ``RECORD_EVERY_SECONDS``. A leader that died
writes nothing more, so its row stays behind; ``leader_state`` tells a live row from a stale one
by the recorded renewal, the Lease's duration and the writer's cadence against an injected now.
A holder is a process's identity (a pod name): no value, token or cursor is ever here (S0.4).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from .healing import HEALER
from .models import LeaseRecord

log = logging.getLogger(__name__)

# The dispatcher's housekeeping round (workers/leader/dispatcher.py STALE_CHECK_EVERY): a live
# leader's row is at most this much older than its Lease.
RECORD_EVERY_SECONDS = 10.0
# The elector's retry period: how soon a new term (a new holder) reaches the store.
CHECK_EVERY_SECONDS = 2.0


@dataclass(frozen=True)
class LeaseFacts:
    """What a leader knows of the Lease it holds, as recorded."""

    lease: str
    shard: int
    shards: int
    holder: str
    acquired_at: datetime | None
    renewed_at: datetime
    duration_seconds: int
    transitions: int

    def term(self) -> tuple[str, datetime | None, int]:
        """What changes with a new holder or a new acquisition, not with a renewal."""
        return self.holder, self.acquired_at, self.transitions


def facts_of(operator: Any) -> LeaseFacts | None:
    """The Lease facts of a leading operator process (its public ``elector``, ``layout`` and
    ``is_leader()``); None when it does not lead by a Lease (a standby, no election)."""
    held = getattr(getattr(operator, "elector", None), "held", None)
    if held is None or not operator.is_leader():
        return None
    layout = operator.layout
    return LeaseFacts(
        lease=layout.lease_name,
        shard=layout.shard,
        shards=layout.shards,
        holder=held.holder,
        acquired_at=held.acquired_at,
        renewed_at=held.renewed_at,
        duration_seconds=held.duration_seconds,
        transitions=held.transitions,
    )


def record_lease(facts: LeaseFacts, now: datetime, lag: float = RECORD_EVERY_SECONDS) -> None:
    """One row per Lease, replaced by whoever holds it now; ``lag``: how far the writer's row
    may trail the Lease while it leads."""
    LeaseRecord.objects.update_or_create(
        lease=facts.lease,
        defaults={
            "shard": facts.shard,
            "shards": facts.shards,
            "holder": facts.holder[:253],
            "acquired_at": facts.acquired_at,
            "renewed_at": facts.renewed_at,
            "duration_seconds": max(0, facts.duration_seconds),
            "transitions": max(0, facts.transitions),
            "lag_seconds": lag,
            "recorded_at": now,
        },
    )


@dataclass(frozen=True)
class LeaderState:
    """A recorded Lease judged at a moment: whether a leader holds it (as far as the record
    tells), and until when the record vouches for it."""

    live: bool
    live_until: datetime | None

    @property
    def label(self) -> str:
        return "live" if self.live else "no live leader"


def leader_state(
    holder: str | None,
    renewed_at: datetime | None,
    duration_seconds: float,
    lag_seconds: float,
    now: datetime,
) -> LeaderState:
    """Pure. A record vouches for its holder until its renewal plus the Lease's duration plus
    how far the writer's row may trail its Lease while it leads; past that, or
    with no holder (a released Lease) or no record, no live leader is known. Clocks of the
    leader and the reader may differ: display only, the elector never trusts these times."""
    if not holder or renewed_at is None:
        return LeaderState(False, None)
    until = renewed_at + timedelta(seconds=max(0.0, duration_seconds + lag_seconds))
    return LeaderState(now < until, until)


def state_of(record: LeaseRecord | None, now: datetime) -> LeaderState:
    if record is None:
        return LeaderState(False, None)
    return leader_state(
        record.holder,
        record.renewed_at,
        record.duration_seconds,
        record.lag_seconds,
        now,
    )


def recorded() -> dict[str, LeaseRecord]:
    """Every recorded Lease by name: one query over at most one row per shard."""
    return {record.lease: record for record in LeaseRecord.objects.all()}


class LeaseRecorder(threading.Thread):
    """Started beside the operator process (run_operator): while it leads, writes its Lease's
    facts on a new term within ``check_every`` and otherwise every ``record_every``. Reads
    nothing from the apiserver: the elector's last acquire or renew is in memory. A failed
    write (the store away) is logged once and tried again next round; never raises."""

    def __init__(
        self,
        operator: Any,
        stop: threading.Event,
        *,
        record: Callable[[LeaseFacts, datetime, float], None] = record_lease,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        check_every: float = CHECK_EVERY_SECONDS,
        record_every: float = RECORD_EVERY_SECONDS,
    ) -> None:
        super().__init__(name="lease-recorder", daemon=True)
        self.operator, self.stop_event = operator, stop
        self._record, self._clock = record, clock
        self.check_every, self.record_every = check_every, record_every
        # How far a live leader's row may lag its Lease: a write is due every record_every,
        # noticed within a check, of a renewal up to a retry period old.
        self.lag = record_every + 2 * check_every
        self._written: LeaseFacts | None = None
        self._written_at: datetime | None = None
        self._failing: str | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.check_every):
                self.round()
        finally:
            connection.close()  # this thread's own connection

    def round(self) -> bool:
        """One check; whether it wrote."""
        facts = facts_of(self.operator)
        if facts is None:
            self._written = None  # leading again later is a new term, written at once
            return False
        now = self._clock()
        new_term = self._written is None or self._written.term() != facts.term()
        # abs(): a wall clock set back must not hold the next write off until it catches up.
        due = self._written_at is None or abs((now - self._written_at).total_seconds()) >= (
            self.record_every
        )
        if not (new_term or due) or facts == self._written:
            return False
        try:
            self._record(facts, now, self.lag)
        except Exception as error:
            if HEALER.note(error):
                HEALER.heal()  # outside any transaction: the next round finds the table
            described = type(error).__name__
            if described != self._failing:
                log.warning("recording lease %s failed: %s", facts.lease, described)
            self._failing = described
            return False
        self._failing = None
        self._written, self._written_at = facts, now
        return True
