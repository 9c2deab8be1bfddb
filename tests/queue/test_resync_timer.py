"""S4.1.3: the resync timer's draw in [0.9, 1.1] x resyncInterval, and how ``resync_at_most``
cuts it for a run whose report just went (the next heartbeat then rides on the next run)."""

from __future__ import annotations

import pytest

from tests.support.jitter import FixedJitter
from workers.engine.outcome import Requeue
from workers.engine.reports import RIDE_MARGIN_SECONDS, run_before_heartbeat
from workers.queue.base import Priority, next_timer

RESYNC_DRAW = (0.9, 1.1)  # S4.1.3's resync jitter


def _resync_delay(factor: float, resync_at_most: float | None, resync: float = 300.0) -> float:
    timer = next_timer(
        Requeue.RESYNC,
        3,
        delay=None,
        resync_seconds=resync,
        rng=FixedJitter(factor, RESYNC_DRAW),
        resync_at_most=resync_at_most,
    )
    assert timer is not None and timer.priority is Priority.RESYNC and timer.failures == 0
    return timer.delay


@pytest.mark.parametrize(
    ("factor", "resync_at_most", "seconds"),
    [
        pytest.param(1.1, None, 330.0, id="no-limit-keeps-the-draw"),
        pytest.param(1.1, 295.0, 295.0, id="a-draw-past-the-limit-is-cut-to-it"),
        pytest.param(0.95, 295.0, 285.0, id="a-draw-before-the-limit-stays"),
        pytest.param(1.1, 200.0, 270.0, id="a-limit-under-the-range-gives-its-low-end"),
        pytest.param(1.1, 400.0, 330.0, id="a-limit-past-the-range-cuts-nothing"),
    ],
)
def test_resync_at_most_cuts_the_draw_within_the_jitter_s_range(factor, resync_at_most, seconds):
    assert _resync_delay(factor, resync_at_most) == pytest.approx(seconds)


def test_other_timers_ignore_resync_at_most():
    after = next_timer(
        Requeue.AFTER,
        0,
        delay=500.0,
        resync_seconds=300.0,
        rng=FixedJitter(1.0, RESYNC_DRAW),
        resync_at_most=10.0,
    )
    assert after is not None and after.delay == 500.0


@pytest.mark.parametrize(
    ("resync", "lag", "latest"),
    [
        pytest.param(300.0, 0.0, 300.0 - RIDE_MARGIN_SECONDS, id="default-5min-P-is-the-resync"),
        pytest.param(600.0, 20.0, 600.0 - RIDE_MARGIN_SECONDS - 20.0, id="late-keys-come-sooner"),
        pytest.param(30.0, 0.0, 300.0 - RIDE_MARGIN_SECONDS, id="short-resync-P-is-5min"),
    ],
)
def test_the_next_run_comes_before_the_heartbeat_the_report_sets(resync, lag, latest):
    """P after the report, less the margin for the run to be taken and to end; a short resync
    (P = 5 min, far past 1.1 x resync) is never cut by it."""
    assert run_before_heartbeat(resync, lag) == pytest.approx(latest)
    if resync * 1.1 < latest:
        assert _resync_delay(1.1, run_before_heartbeat(resync, lag), resync) == resync * 1.1
