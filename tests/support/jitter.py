"""A seam for jitter draws (S4.1.3): a Random whose ``uniform`` always gives one factor."""

from __future__ import annotations

import random


class FixedJitter(random.Random):
    """Always ``factor``; the draw asked for must be over ``expected`` (its low and high end)."""

    def __init__(self, factor: float, expected: tuple[float, float]) -> None:
        super().__init__(0)
        self.factor, self.expected = factor, expected

    def uniform(self, a: float, b: float) -> float:
        assert (a, b) == self.expected
        return self.factor
