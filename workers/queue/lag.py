"""How late the reconcile queue runs keys now, for a run deciding whether the CR's heartbeat
rides on it (S7.4 with S7.1 rev 3).

A run expects the CR's next run one resync later, but when due keys back up (more CRs than
the workers get through in a resync) that next run comes later by as long as keys now wait
after falling due. A heartbeat falling due in between would go alone, reading the CR and its
credential again; counting the wait lets it ride instead. The leader's queue measures each
wait as it hands out a key; in embedded mode the runs share that process. The largest wait
of the last minute counts, so a burst of fresh edits taken at once does not hide a resync
backlog behind them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .base import QueueObserver

LAG_WINDOW_SECONDS = 60.0


class ScheduleLag:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, window: float = LAG_WINDOW_SECONDS
    ) -> None:
        self._clock, self._half = clock, window / 2
        self._lock = threading.Lock()
        self._since = clock()  # when the current half-window began
        self._current = 0.0  # the largest wait noted in the current half-window
        self._previous = 0.0  # ... and in the one before it

    def note(self, waited_seconds: float) -> None:
        with self._lock:
            self._roll()
            self._current = max(self._current, waited_seconds)

    def seconds(self) -> float:
        """The largest wait between due and taken over the last one to two half-windows."""
        with self._lock:
            self._roll()
            return max(self._current, self._previous)

    def _roll(self) -> None:
        now = self._clock()
        elapsed = now - self._since
        if elapsed < self._half:
            return
        self._previous = self._current if elapsed < 2 * self._half else 0.0
        self._current = 0.0
        self._since = now


@dataclass
class LagObserver:
    """A queue observer that notes each key's wait in ``lag`` and passes everything on."""

    inner: QueueObserver
    lag: ScheduleLag

    def added(self, count: int = 1) -> None:
        self.inner.added(count)

    def taken(self, waited_seconds: float) -> None:
        self.lag.note(waited_seconds)
        self.inner.taken(waited_seconds)

    def retried(self) -> None:
        self.inner.retried()
