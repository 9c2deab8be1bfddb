"""Times as the dashboard shows them (issue 35 item 3): ISO 8601 in UTC with seconds and the
zone, and a relative form beside. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def iso(at: datetime) -> str:
    """``2026-12-04T21:35:07Z``: the form the conditions' RFC 3339 times have."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clock(at: datetime) -> str:
    """``21:35:07``, for a span within a timeline whose day the full time names."""
    return at.astimezone(UTC).strftime("%H:%M:%S")


def relative(at: datetime, now: datetime) -> str:
    """``12 s ago``, ``3 min ago``, ``in 4 min``, ``now``: the largest whole unit."""
    seconds = round((now - at).total_seconds())
    if seconds == 0:
        return "now"
    span = abs(seconds)
    for size, unit in _UNITS:
        if span >= size:
            amount = f"{span // size} {unit}"
            return f"{amount} ago" if seconds > 0 else f"in {amount}"
    raise AssertionError("unreachable: a nonzero span is at least 1 s")
