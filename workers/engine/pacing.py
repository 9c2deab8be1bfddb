"""Outbound pacing per Hikyo instance (S4.1.6): one token bucket shared by every process, and
a pause of every request to an instance after it answered 429."""

from __future__ import annotations

import time
from collections.abc import Callable

from .ports import CoordinationStore

TOKEN_WAIT_BUDGET = 5.0  # no token within 5 s: stop before the fetch, requeue when one is due
MAX_PAUSE = 300.0


def pause_left(store: CoordinationStore, instance_uid: str, now: float) -> float:
    until = store.get_note(f"instance-paused:{instance_uid}")
    return max(0.0, float(until) - now) if until else 0.0


def pause_instance(store: CoordinationStore, instance_uid: str, seconds: float, now: float) -> None:
    """After a 429: clamp(Retry-After, 1 s, 5 min) for every request to the instance."""
    seconds = min(max(seconds, 1.0), MAX_PAUSE)
    store.put_note(f"instance-paused:{instance_uid}", repr(now + seconds), seconds)


def wait_for_token(
    store: CoordinationStore,
    instance_uid: str,
    rate: float,
    burst: int,
    *,
    budget: float = TOKEN_WAIT_BUDGET,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Takes a token, sleeping up to ``budget`` seconds for one; returns 0 when taken, else the
    seconds until one is due (the caller requeues then; this is not a failure)."""
    waited = 0.0
    while True:
        wait = store.take_token(f"instance:{instance_uid}", rate, burst)
        if wait <= 0:
            return 0.0
        if waited + wait > budget:
            return wait
        sleep(wait)
        waited += wait
