"""When a status report may leave its queue in embedded mode: reports yield to reconciles.

S7.4 says a report "never delays a reconcile". Reports run on their own threads, but those
threads share the process and the machine with the reconciles: during a cold start or a
revision that changes every CR, a report sent beside a waiting reconcile takes the CPU (and
two apiserver reads and an HTTPS POST) that the reconciles needed, so Secrets arrive later.
So while reconciles are backed up (the caller decides what counts), no report is taken. A
report is history, but it must not starve either: once reports have been held this long
without a break, one a second goes again, however busy the reconciles are. Not one after
another: under a backlog that lasts, that one slot never emptied, and each report it sent
read the CR and its credential again, while the runs' own reports (heartbeats riding on a
run's reads, workers/runner.py) carry most CRs' reports without a read.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD_LIMIT_SECONDS = 60.0
RELEASE_EVERY_SECONDS = 1.0  # past the hold, one report per this long


@dataclass
class ReportGate:
    hold_limit: float = HOLD_LIMIT_SECONDS
    release_every: float = RELEASE_EVERY_SECONDS
    held_since: float | None = None  # when the current unbroken hold began
    released_at: float | None = None  # when the hold last let a report go

    def slots(self, free: int, reconciles_waiting: bool, now: float) -> int:
        """How many reports may be taken now, of the ``free`` report slots."""
        if not reconciles_waiting:
            self.held_since = None
            return max(free, 0)
        if self.held_since is None:
            self.held_since = now
        if now - self.held_since < self.hold_limit or free <= 0:
            return 0
        if self.released_at is not None and now - self.released_at < self.release_every:
            return 0
        self.released_at = now
        return 1
