"""S4.1.3 / pattern 4: per-key exponential backoff, ±20 % jitter, then clamped to [1 s, 5 min]."""

from __future__ import annotations

import random

import pytest

from tests.support.jitter import FixedJitter
from workers.queue.backoff import backoff_delay

BACKOFF_DRAW = (0.8, 1.2)  # S4.1.3's backoff jitter


@pytest.mark.parametrize(
    ("failures", "factor", "seconds"),
    [
        pytest.param(1, 1.0, 1.0, id="first-failure-1s"),
        pytest.param(2, 1.0, 2.0, id="doubles"),
        pytest.param(5, 1.0, 16.0, id="fifth"),
        pytest.param(1, 0.8, 1.0, id="jitter-below-1s-is-clamped-up"),
        pytest.param(1, 1.2, 1.2, id="jitter-above-1s-kept"),
        pytest.param(4, 0.8, 6.4, id="jitter-low"),
        pytest.param(4, 1.2, 9.6, id="jitter-high"),
        pytest.param(9, 1.2, 300.0, id="jitter-past-5min-is-clamped-down"),
        pytest.param(9, 0.8, 204.8, id="ninth-low-under-cap"),
        pytest.param(10, 0.8, 300.0, id="tenth-always-capped"),
        pytest.param(10_000, 1.0, 300.0, id="huge-count-no-overflow"),
        pytest.param(0, 1.0, 1.0, id="zero-is-first"),
        pytest.param(-3, 1.0, 1.0, id="negative-is-first"),
    ],
)
def test_backoff_delay(failures: int, factor: float, seconds: float):
    assert backoff_delay(failures, FixedJitter(factor, BACKOFF_DRAW)) == pytest.approx(seconds)


def test_backoff_jitter_stays_within_bounds_and_varies():
    rng = random.Random(3)
    delays = [backoff_delay(4, rng) for _ in range(200)]
    assert all(6.4 <= d <= 9.6 for d in delays)
    assert max(delays) - min(delays) > 1.0


def test_backoff_is_reproducible_with_a_seeded_rng():
    assert backoff_delay(3, random.Random(11)) == backoff_delay(3, random.Random(11))


def test_backoff_without_rng_uses_module_randomness():
    assert 1.0 <= backoff_delay(1) <= 1.2
