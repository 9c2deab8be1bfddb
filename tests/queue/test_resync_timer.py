"""S4.1.3: the resync timer's draw in [0.9, 1.1] x resyncInterval, and how ``resync_at_least``
raises it for a run whose report just went (S7.4 rev 4: the next heartbeat then rides on the
next run, which comes no earlier than it is due)."""

from __future__ import annotations

import pytest

from tests.support.jitter import FixedJitter
from workers.engine.outcome import Requeue
from workers.engine.reports import (
    RIDE_MARGIN_SECONDS,
    heartbeat_period,
    heartbeat_rides,
    heartbeat_slack,
    run_after_heartbeat,
)
from workers.queue.base import Priority, next_timer

RESYNC_DRAW = (0.9, 1.1)  # S4.1.3's resync jitter


def _resync_delay(factor: float, resync_at_least: float | None, resync: float = 300.0) -> float:
    timer = next_timer(
        Requeue.RESYNC,
        3,
        delay=None,
        resync_seconds=resync,
        rng=FixedJitter(factor, RESYNC_DRAW),
        resync_at_least=resync_at_least,
    )
    assert timer is not None and timer.priority is Priority.RESYNC and timer.failures == 0
    return timer.delay


@pytest.mark.parametrize(
    ("factor", "resync_at_least", "seconds"),
    [
        pytest.param(0.9, None, 270.0, id="no-limit-keeps-the-draw"),
        pytest.param(0.9, 301.0, 301.0, id="a-draw-before-the-limit-is-raised-to-it"),
        pytest.param(1.05, 301.0, 315.0, id="a-draw-after-the-limit-stays"),
        pytest.param(0.9, 400.0, 330.0, id="a-limit-past-the-range-gives-its-high-end"),
        pytest.param(0.9, 200.0, 270.0, id="a-limit-under-the-range-raises-nothing"),
    ],
)
def test_resync_at_least_raises_the_draw_within_the_jitter_s_range(
    factor, resync_at_least, seconds
):
    assert _resync_delay(factor, resync_at_least) == pytest.approx(seconds)


def test_other_timers_ignore_resync_at_least():
    after = next_timer(
        Requeue.AFTER,
        0,
        delay=5.0,
        resync_seconds=300.0,
        rng=FixedJitter(1.0, RESYNC_DRAW),
        resync_at_least=500.0,
    )
    assert after is not None and after.delay == 5.0


@pytest.mark.parametrize(
    ("resync", "earliest"),
    [
        pytest.param(300.0, 300.0 + RIDE_MARGIN_SECONDS, id="default-5min-P-is-the-resync"),
        pytest.param(3600.0, 3600.0 + RIDE_MARGIN_SECONDS, id="an-hour"),
        pytest.param(30.0, None, id="short-resync-runs-come-after-P-anyway"),
        pytest.param(48 * 3600.0, None, id="long-resync-the-heartbeat-goes-alone"),
    ],
)
def test_the_next_run_comes_no_earlier_than_the_heartbeat_the_report_sets(resync, earliest):
    """P after the report and a margin; a short resync (P = 5 min, past 1.1 x resync) and a
    resync longer than P (24 h) leave the draw as it is."""
    assert run_after_heartbeat(resync) == earliest
    if earliest is not None:
        assert _resync_delay(0.9, earliest, resync) >= heartbeat_period(resync)


@pytest.mark.parametrize(
    ("resync", "slack"),
    [(300.0, 330.0), (60.0, 66.0), (3600.0, 3960.0), (48 * 3600.0, 0.0)],
)
def test_a_heartbeat_goes_between_p_and_p_plus_a_resync_after_the_last_204(resync, slack):
    """S7.4 rev 4: the report queue sends it alone ``slack`` after it is due unless a run
    carries it first; a run carries it only once it is due (at most ``slack`` left)."""
    assert heartbeat_slack(resync) == pytest.approx(slack)
    assert heartbeat_rides(slack, slack) and not heartbeat_rides(slack + 0.5, slack)
    assert not heartbeat_rides(None, slack)
