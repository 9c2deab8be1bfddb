"""Clocks a test moves instead of sleeping (issue 34): an engine's windows pass at once."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from workers.engine.reconcile import Engine


class FakeClock:
    """Seconds that move only when a test says so (a queue's or a sink's clock)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class ShiftedClock:
    """The real clock plus whatever the test has advanced it by.

    Real time keeps running underneath, so status times stay plausible next to the
    apiserver's and the devserver's own clocks; only the engine sees the shift.
    """

    def __init__(self) -> None:
        self.offset = 0.0

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset)

    def wall_seconds(self) -> float:
        return time.time() + self.offset


def on_clock(engine: Engine, clock: ShiftedClock) -> Engine:
    """``engine`` reading its status times and wall seconds from ``clock``."""
    return replace(engine, clock=clock.now, wall_seconds=clock.wall_seconds)
