"""A worker process for the multi-process lock test (imported by ``spawn`` children, so it
stays free of pytest and fixtures)."""

from __future__ import annotations

import random

import redis

from workers.engine.outcome import Requeue
from workers.keys import ObjectKey
from workers.queue.base import Priority
from workers.queue.redis import RedisQueue, member


def hammer(
    port: int, prefix: str, check_prefix: str, keys: list[tuple[str, str, str]], seed: int
) -> None:
    """Act as dispatcher, worker and watch at once on a few keys; count overlapping holders.

    The in-flight counters live in Redis (INCR is atomic across processes): a holder that sees
    a count other than 1 found another holder of the same key.
    """
    rng = random.Random(seed)
    client = redis.Redis(host="127.0.0.1", port=port)
    queue = RedisQueue(client, prefix=prefix, rng=rng)
    object_keys = [ObjectKey(*key) for key in keys]
    outcomes = [Requeue.RESYNC, Requeue.BACKOFF, Requeue.NONE]
    try:
        for _ in range(200):
            key = rng.choice(object_keys)
            queue.add(key, priority=rng.choice(list(Priority)))
            for candidate in [t.key for t in queue.take_due(limit=2)] + [key]:
                lock = queue.begin(candidate, f"process-{seed}")
                if lock is None:
                    continue
                counter = f"{check_prefix}:inflight:{member(candidate)}"
                if client.incr(counter) != 1:
                    client.incr(f"{check_prefix}:overlaps")
                client.incr(f"{check_prefix}:runs")
                if not queue.holds(lock):  # the fencing check a real run makes before writing
                    client.incr(f"{check_prefix}:fenced")
                client.decr(counter)
                queue.finish(lock, rng.choice(outcomes), resync_seconds=10)
    finally:
        client.close()
