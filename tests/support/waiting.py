"""Poll until a condition holds or a deadline passes (never a bare sleep in tests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2, what: str = ""
) -> T:
    """Returns the first truthy result of ``probe``; fails with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or probe!r}")
