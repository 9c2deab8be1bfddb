"""Go duration syntax for resyncInterval (S4.16)."""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation

_UNITS_NS = {
    "ns": Decimal(1),
    "us": Decimal(1_000),
    "µs": Decimal(1_000),
    "μs": Decimal(1_000),  # Go also accepts the Greek mu
    "ms": Decimal(1_000_000),
    "s": Decimal(1_000_000_000),
    "m": Decimal(60_000_000_000),
    "h": Decimal(3_600_000_000_000),
}
_TERM = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|μs|ms|s|m|h)")
# Go's time.Duration is an int64 of nanoseconds: about 2,562,047 h.
MAX_NANOSECONDS = 2**63 - 1
DEFAULT_RESYNC_SECONDS = 300.0
MIN_RESYNC_SECONDS = 10.0
RESYNC_JITTER = (0.9, 1.1)  # S4.1.3 / S4.16: each resync timer draws its factor in this range


class InvalidDuration(ValueError):
    """The text is not a Go duration, or overflows one."""


@functools.lru_cache(maxsize=64)  # a few distinct resyncIntervals, parsed at every reconcile
def parse_go_duration(text: str) -> float:
    """Seconds for a Go duration such as ``1h30m`` or ``10000ms``; raises InvalidDuration."""
    if not text:
        raise InvalidDuration("empty duration")
    position, total = 0, Decimal(0)
    while position < len(text):
        match = _TERM.match(text, position)
        if not match:
            raise InvalidDuration(f"not a Go duration: {text!r}")
        try:
            total += Decimal(match.group(1)) * _UNITS_NS[match.group(2)]
        except InvalidOperation as error:
            raise InvalidDuration(f"not a Go duration: {text!r}") from error
        position = match.end()
    if total > MAX_NANOSECONDS:
        raise InvalidDuration(f"duration {text!r} overflows")
    return float(total / Decimal(1_000_000_000))


def resync_seconds(text: str | None) -> float:
    """S4.16: empty ⇒ 5 min; below 10 s or overflowing ⇒ InvalidDuration (never defaulted)."""
    if not text:
        return DEFAULT_RESYNC_SECONDS
    seconds = parse_go_duration(text)
    if seconds < MIN_RESYNC_SECONDS:
        raise InvalidDuration(f"resyncInterval {text!r} is below the 10s minimum")
    return seconds
