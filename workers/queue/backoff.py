"""Per-key exponential backoff with jitter (S4.1.3; pattern 4, client-go's rate limiters)."""

from __future__ import annotations

import random

BASE_SECONDS = 1.0
MAX_SECONDS = 300.0  # 5 min
JITTER = (0.8, 1.2)  # ±20 %
_MAX_EXPONENT = 30  # 2**30 s is far past the clamp; keeps the float finite for any count


def backoff_delay(failures: int, rng: random.Random | None = None) -> float:
    """Seconds to wait after the ``failures``-th consecutive failure (1 => about 1 s).

    S4.1.3: 1 s doubling per failure, times uniform [0.8, 1.2], *then* clamped to [1 s, 300 s],
    so the first retry is never under 1 s and a long failure streak settles at exactly 5 min.
    A count below 1 is treated as the first failure.
    """
    exponent = min(max(failures, 1) - 1, _MAX_EXPONENT)
    jitter = (rng or random).uniform(*JITTER)
    return min(max(BASE_SECONDS * 2.0**exponent * jitter, BASE_SECONDS), MAX_SECONDS)
