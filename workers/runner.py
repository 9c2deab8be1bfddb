"""Running one queued reconcile: take the per-key lock, keep it renewed, reconcile with fenced
writes, record, and let the queue schedule the next run (S4.1.3, S4.1.4)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from urllib3.exceptions import HTTPError

from k8s.client import CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS
from k8s.errors import KubeError, describe

from . import metrics
from .engine.outcome import Requeue
from .engine.reconcile import RunResult, evaluate_rollout, reconcile
from .engine.reports import heartbeat_rides, heartbeat_slack, run_after_heartbeat
from .keys import ObjectKey
from .queue.base import KeyedQueue, Lock, Priority
from .runtime import Runtime
from .store_errors import store_errors

log = logging.getLogger(__name__)

LOCK_TTL_SECONDS = 120.0
RENEW_EVERY_SECONDS = 30.0
DEADLINE_SECONDS = 90.0  # S4.1.4: past it a run writes nothing more and its key is released
# A write that passed its fence just before the deadline can take one request's timeouts to end
# (k8s/client.py); the key is released only after that, so two runs never write at once.
WRITE_GRACE_SECONDS = CONNECT_TIMEOUT_SECONDS + REQUEST_TIMEOUT_SECONDS


class _RunGuard(threading.Thread):
    """One run's lock: renewed every 30 s until the 90 s deadline, then the run is abandoned
    (S4.1.4). An abandoned run may still be inside a request, but its fence refuses every
    further write; once a write already under way has had its time (``grace``), the key is
    released with backoff, so another worker takes it without waiting for the lock to expire
    (the lock's TTL outlasts the grace). Exactly one of the run and this guard settles the key.
    """

    def __init__(
        self,
        queue: KeyedQueue,
        lock: Lock,
        *,
        deadline: float = DEADLINE_SECONDS,
        grace: float = WRITE_GRACE_SECONDS,
        renew_every: float = RENEW_EVERY_SECONDS,
        ttl: float = LOCK_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name="lock-renewer", daemon=True)
        self.queue, self.lock, self.ttl, self.clock = queue, lock, ttl, clock
        self.deadline, self.grace, self.renew_every = deadline, grace, renew_every
        self.deadline_at = clock() + deadline
        self.done = threading.Event()
        self.lost: str | None = None
        self.abandoned = False  # settled by this guard after the deadline
        self._settled = False
        self._settling = threading.Lock()

    def run(self) -> None:
        while not self.done.wait(min(self.renew_every, max(self.deadline_at - self.clock(), 0))):
            if self.clock() >= self.deadline_at:
                self.lost = f"reconcile deadline of {self.deadline:g} s passed"
                if not self.done.wait(self.grace):
                    self._abandon()
                return
            try:
                renewed = self.queue.renew(self.lock, self.ttl)
            except Exception as error:  # the store is unreachable: the fence checks it too
                log.warning("renewing the lock of %s failed: %s", self.lock.key, describe(error))
                continue
            if not renewed:
                self.lost = "per-key lock no longer held"
                return

    def _abandon(self) -> None:
        if not self.claim(abandoning=True):
            return  # the run settled first
        try:
            self.queue.finish(self.lock, Requeue.BACKOFF)
        except Exception as error:  # the store is unreachable: the lock expires by its TTL
            log.warning("releasing the key of %s failed: %s", self.lock.key, describe(error))
            return
        log.warning(
            "reconcile of %s abandoned at its %g s deadline; key released, retried with backoff",
            self.lock.key,
            self.deadline,
        )

    def fence(self) -> str | None:
        """Why this run may no longer write (S4.1.4), or None."""
        if self.lost is None and self.clock() >= self.deadline_at:
            return f"reconcile deadline of {self.deadline:g} s passed"
        if self.lost is None and not self.queue.holds(self.lock):
            return "per-key lock no longer held"
        return self.lost

    def past_deadline(self) -> bool:
        return self.clock() >= self.deadline_at

    def claim(self, *, abandoning: bool = False) -> bool:
        """Takes the one settlement of the key; False when it was taken already. The guard
        marks the run abandoned in the same step, so a late result is never recorded."""
        with self._settling:
            if self._settled:
                return False
            self._settled = True
            self.abandoned = abandoning
            return True

    def settle(self, requeue: Requeue, **timer: Any) -> bool:
        """Releases the key and sets its next due time, once; False when already settled."""
        if not self.claim():
            return False
        self.queue.finish(self.lock, requeue, **timer)
        return True


def run_reconcile(
    runtime: Runtime, key: ObjectKey, forced_full: bool = False, *, dispatched_only: bool = False
) -> RunResult | None:
    """Returns the run's result, or None when another process holds the key (it is then marked
    dirty and runs once more after that run), the run failed, or it was abandoned at its
    deadline. ``dispatched_only`` (a broker message): None when the key is not handed out now,
    a second copy of a message whose first copy has run (``KeyedQueue.begin``)."""
    lock = runtime.queue.begin(
        key, runtime.identity, ttl=LOCK_TTL_SECONDS, dispatched_only=dispatched_only
    )
    if lock is None:
        return None
    return run_locked(runtime, lock, forced_full)


def run_locked(runtime: Runtime, lock: Lock, forced_full: bool = False) -> RunResult | None:
    """The run under a lock ``begin`` gave; it settles the key. None when the run failed (one
    line logged) or was abandoned at its deadline. Each run that ends is counted once in the
    metrics (S8.6), after its key is settled."""
    with metrics.running():
        return _run_locked(runtime, lock, forced_full)


def _run_locked(runtime: Runtime, lock: Lock, forced_full: bool) -> RunResult | None:
    queue, key = runtime.queue, lock.key
    # Module constants read per run, so a test can shorten them.
    guard = _RunGuard(
        queue,
        lock,
        deadline=DEADLINE_SECONDS,
        grace=WRITE_GRACE_SECONDS,
        renew_every=RENEW_EVERY_SECONDS,
        ttl=LOCK_TTL_SECONDS,
    )
    guard.start()
    started, clock, wall_start = datetime.now(UTC), time.monotonic(), time.time()
    try:
        engine = runtime.engine(guard.fence)
        result = reconcile(engine, key.namespace, key.name, key.uid, forced_full=forced_full)
    except (KubeError, HTTPError, OSError, *store_errors()) as error:
        # The apiserver or the store is unreachable or failing: one line, back off, the next
        # run repairs.
        log.warning("reconcile of %s interrupted: %s", key, describe(error))
        _settle_failed(guard, metrics.INTERRUPTED, clock)
        return None
    except Exception:
        # Our own bug: log with the key and traceback, back off, go on.
        log.exception("reconcile of %s failed unexpectedly", key)
        _settle_failed(guard, metrics.INTERNAL_ERROR, clock)
        return None
    finally:
        guard.done.set()
    if not guard.claim():
        # The guard released the key already; this late result is not recorded.
        metrics.record_failed_run(metrics.DEADLINE_EXCEEDED, time.monotonic() - clock)
        return None
    outcome = result.outcome
    requeue = outcome.requeue
    if guard.past_deadline() and requeue is not Requeue.NONE:
        requeue = Requeue.BACKOFF  # S4.1.4: a run past its deadline is retried with backoff
    resync_at_least: float | None = None  # the next run carries the next heartbeat
    try:
        runtime.record(result, started, time.monotonic() - clock)
        if result.uid and runtime.settings.status_reporting and _report_after(runtime, key, result):
            resync_at_least = run_after_heartbeat(result.resync_seconds)
        elif result.reads_kept:
            # No report follows this run: its reads would only sit in memory for their 30 s
            # (issue 52: a resync wave of 1,000 CRs held ~18 MiB of them).
            runtime.recent_reads.take(result.uid)
    finally:  # the key is settled whatever recording does
        if not result.uid:  # gone, or replaced by another object with the same name
            queue.finish(lock, Requeue.NONE)
            queue.forget(key)
        else:
            queue.finish(
                lock,
                requeue,
                delay=outcome.delay,
                resync_seconds=result.resync_seconds,
                forced_full_next=outcome.forced_full_next,
                resync_at_least=resync_at_least,
            )
        settled = requeue if result.uid else Requeue.NONE
        metrics.record_run(result, settled, time.monotonic() - clock, key.uid)
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


def _report_after(runtime: Runtime, key: ObjectKey, result: RunResult) -> bool:
    """S7.4: a report after every status write; and a heartbeat that is due rides on this
    run's reads (S7.1 rev 3; never before it is due, rev 4). Either goes at once on a free
    report thread of this process; otherwise a status write's report is queued first, while a
    ride that found the report threads busy leaves the heartbeat as it was: the CR's next run
    may carry it, and it still goes alone when its wait for a run is over. True when a report
    goes now (handed over or queued first)."""
    written = result.status_written
    if not written:
        due_in = runtime.reports.due_in(key)
        slack = heartbeat_slack(result.resync_seconds)
        if not (result.reads_kept and heartbeat_rides(due_in, slack)):
            return False
    if runtime.hand_report is not None and runtime.hand_report(runtime, key):
        return True
    if written or runtime.hand_report is None:
        runtime.reports.add(key, priority=Priority.FIRST)
        return True
    return False


def _settle_failed(guard: _RunGuard, reason: str, started: float) -> None:
    """A run without a result: back off; counted whether or not this run settled the key
    (the guard may have abandoned it meanwhile)."""
    try:
        guard.settle(Requeue.BACKOFF)
    finally:
        metrics.record_failed_run(reason, time.monotonic() - started)


def run_rollout_evaluation(runtime: Runtime, key: ObjectKey) -> None:
    """S4.1.1: a workload changed; re-check S6.5 for this CR. No lock: it fetches nothing and
    writes only the status, guarded by the CR's resourceVersion; in embedded mode that write
    is fenced on the leader Lease (S4.1.4)."""
    try:
        engine = runtime.engine(lambda: None)  # no lock to check: the Lease alone
        result = evaluate_rollout(engine, key.namespace, key.name, key.uid)
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
