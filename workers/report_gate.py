"""When a status report may leave its queue in embedded mode: reports yield to reconciles.

S7.4 says a report "never delays a reconcile". Reports run on their own threads, but those
threads share the process and the machine with the reconciles: during a cold start or a
revision that changes every CR, a report sent beside a waiting reconcile takes the CPU (and
two apiserver reads and an HTTPS POST) that the reconciles needed, so Secrets arrive later.
So while reconciles are backed up (the caller decides what counts), no report is taken. A
report is history, but it must not starve either: once reports have been held this long
without a break, one at a time goes again, however busy the reconciles are.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD_LIMIT_SECONDS = 60.0


@dataclass
class ReportGate:
    hold_limit: float = HOLD_LIMIT_SECONDS
    held_since: float | None = None  # when the current unbroken hold began

    def slots(self, free: int, reconciles_waiting: bool, now: float) -> int:
        """How many reports may be taken now, of the ``free`` report slots."""
        if not reconciles_waiting:
            self.held_since = None
            return max(free, 0)
        if self.held_since is None:
            self.held_since = now
        if now - self.held_since >= self.hold_limit:
            return min(max(free, 0), 1)
        return 0
