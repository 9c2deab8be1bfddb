"""Running one queued reconcile: take the per-key lock, keep it renewed, reconcile with fenced
writes, record, and let the queue schedule the next run (S4.1.3, S4.1.4)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from urllib3.exceptions import HTTPError

from k8s.errors import KubeError

from .engine.outcome import Requeue
from .engine.reconcile import RunResult, evaluate_rollout, reconcile
from .keys import ObjectKey
from .queue.base import Priority
from .runtime import Runtime

log = logging.getLogger(__name__)

LOCK_TTL_SECONDS = 120.0
RENEW_EVERY_SECONDS = 30.0


class _Renewer(threading.Thread):
    def __init__(self, runtime: Runtime, lock: object) -> None:
        super().__init__(name="lock-renewer", daemon=True)
        self.runtime, self.lock = runtime, lock
        self.done = threading.Event()
        self.lost = False

    def run(self) -> None:
        while not self.done.wait(RENEW_EVERY_SECONDS):
            if not self.runtime.queue.renew(self.lock, LOCK_TTL_SECONDS):
                self.lost = True
                return


def run_reconcile(runtime: Runtime, key: ObjectKey, forced_full: bool = False) -> RunResult | None:
    """Returns the run's result, or None when another process holds the key (it is then marked
    dirty and runs once more after that run)."""
    queue = runtime.queue
    lock = queue.begin(key, runtime.identity, ttl=LOCK_TTL_SECONDS)
    if lock is None:
        return None
    renewer = _Renewer(runtime, lock)
    renewer.start()
    started, clock, wall_start = datetime.now(UTC), time.monotonic(), time.time()
    try:
        engine = runtime.engine(lambda: not renewer.lost and queue.holds(lock))
        result = reconcile(engine, key.namespace, key.name, key.uid, forced_full=forced_full)
    except (KubeError, HTTPError, OSError) as error:
        # The apiserver is unreachable or failing: one line, back off, the next run repairs.
        log.warning(
            "reconcile of %s interrupted: %s",
            key,
            error if isinstance(error, KubeError) else type(error).__name__,
        )
        queue.finish(lock, Requeue.BACKOFF)
        return None
    except Exception:
        # Our own bug: log with the key and traceback, back off, go on.
        log.exception("reconcile of %s failed unexpectedly", key)
        queue.finish(lock, Requeue.BACKOFF)
        return None
    finally:
        renewer.done.set()
    runtime.record(result, started, time.monotonic() - clock)
    outcome = result.outcome
    if not result.uid:  # gone, or replaced by another object with the same name
        queue.finish(lock, Requeue.NONE)
        queue.forget(key)
        return result
    if result.status_written and runtime.settings.status_reporting:
        runtime.reports.add(key, priority=Priority.FIRST)  # S7.4: after every status write
    queue.finish(
        lock,
        outcome.requeue,
        delay=outcome.delay,
        resync_seconds=result.resync_seconds,
        forced_full_next=outcome.forced_full_next,
    )
    # One line per run with wall-clock bounds, so overlapping runs would be visible (S4.1.4).
    log.info(
        "run %s uid=%s start=%.6f end=%.6f outcome=%s%s",
        key,
        key.uid,
        wall_start,
        time.time(),
        outcome.reason,
        f" ({outcome.message})" if outcome.message else "",
    )
    return result


def run_rollout_evaluation(runtime: Runtime, key: ObjectKey) -> None:
    """S4.1.1: a workload changed; re-check S6.5 for this CR. No lock: it fetches nothing and
    writes only the status, guarded by the CR's resourceVersion."""
    try:
        result = evaluate_rollout(runtime.engine(), key.namespace, key.name, key.uid)
    except Exception as error:  # best effort: the next reconcile re-evaluates anyway
        log.warning("rollout evaluation of %s failed: %s", key, type(error).__name__)
        return
    if result.status_written:
        log.info("rollout of %s re-evaluated: %s", key, result.outcome.reason)


class RolloutEvaluations:
    """Coalesces rollout-only evaluations to at most one per CR per 10 s (S4.1.1)."""

    INTERVAL_SECONDS = 10.0

    def __init__(
        self, submit: Callable[[ObjectKey], None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.submit, self.clock = submit, clock
        self._lock = threading.Lock()
        self._last: dict[ObjectKey, float] = {}
        self._pending: set[ObjectKey] = set()

    def request(self, key: ObjectKey) -> None:
        with self._lock:
            if key in self._pending:
                return
            last = self._last.get(key, -self.INTERVAL_SECONDS)
            wait = last + self.INTERVAL_SECONDS - self.clock()
            self._pending.add(key)
        timer = threading.Timer(max(wait, 0.0), self._fire, args=(key,))
        timer.daemon = True
        timer.start()

    def _fire(self, key: ObjectKey) -> None:
        with self._lock:
            self._pending.discard(key)
            self._last[key] = self.clock()
        self.submit(key)
