"""Celery tasks: thin, identity-only (S0.4.4). A worker re-reads everything from Kubernetes.

``reconcile`` and ``reconcile_full`` differ only in withholding the cursor (S8.6); both carry
just (namespace, name, uid).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Any

from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from django.conf import settings

from controlplane.observations.recording import BackgroundRecorder

from . import metrics
from .celery_app import app
from .keys import ObjectKey
from .published_reads import PublishedReads
from .queue.published import PublishedStore
from .queue.redis import RedisQueue
from .report_threads import ReportThreads
from .reporting import run_report
from .runner import run_reconcile, run_rollout_evaluation
from .runtime import Runtime, build_runtime

log = logging.getLogger(__name__)

_runtime: Runtime | None = None
_runtime_lock = threading.Lock()
_report_threads: ReportThreads | None = None


def worker_runtime() -> Runtime:
    """One Runtime per worker process, built on first use (in a prefork pool child, so its
    metrics go to the worker's multiprocess files, workers/metrics.py)."""
    global _runtime, _report_threads
    with _runtime_lock:
        if _runtime is None:
            recorder = BackgroundRecorder()
            # A worker serves every shard (S4.1.8): each task names its own, so the runtime is
            # built unsharded whatever the shared environment says.
            runtime = build_runtime(
                replace(settings.HIKYO_OPERATOR, shards=1, shard=0),
                kubeconfig=settings.KUBECONFIG,
                redis_url=settings.REDIS_URL,
                record=recorder,
                record_report=recorder.report,
            )
            # The leader's watched reads, published for workers (workers.published_reads).
            if isinstance(runtime.queue, RedisQueue):
                runtime.cluster.watched = PublishedReads(PublishedStore.beside(runtime.queue))
            # Runs settle keys here: backoff requeues and the keys they queue again (S8.6).
            runtime.queue.observer = metrics.workqueue(metrics.RECONCILE_QUEUE)
            runtime.reports.observer = metrics.workqueue(metrics.REPORT_QUEUE)
            # A run's report goes from here, on the reads it kept (S7.1 rev 3), not through
            # the broker to whichever worker it reaches, which would read them again.
            _report_threads = ReportThreads()
            runtime.hand_report = _report_threads.hand
            _runtime = runtime
        return _runtime


@worker_process_init.connect
def _runtime_before_first_task(**_: Any) -> None:
    """A prefork child builds its runtime (Kubernetes client, queue stores, metrics) as it
    starts, so its first task does not pay for it (issue 13: ~0.2 CPU-s a child, eight
    children at once in a 4-worker cold start). A failure here is one line; the first task
    then builds it again and fails as it would have."""
    _build_runtime_now()


@worker_ready.connect
def _runtime_before_first_task_in_the_worker(sender: Any = None, **_: Any) -> None:
    """The threads pool (the chart's default) runs tasks in the worker process itself, which
    never sends worker_process_init: it builds its one runtime once ready. A prefork worker's
    main process runs no task and builds none."""
    pool_cls = getattr(getattr(sender, "controller", None), "pool_cls", None)
    if isinstance(pool_cls, type) and not issubclass(pool_cls, PreforkPool):
        _build_runtime_now()


@worker_process_shutdown.connect
@worker_shutdown.connect
def _stop_report_threads(**_: Any) -> None:
    """Handed reports not yet begun are dropped: their CRs' heartbeats still wait in the
    report queue, and one begun and cut off is due again after the stale check (S8.4)."""
    if _report_threads is not None:
        _report_threads.shutdown()


def _build_runtime_now() -> None:
    try:
        worker_runtime()
    except Exception as error:
        log.warning(
            "worker runtime not built at start (%s); the first task builds it",
            type(error).__name__,
        )


TASK_OPTIONS = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}

# The dispatcher sends these for keys it took (take_due). One that waits in the broker past
# the stale check is sent again (S8.4: a lost message must not lose its key); at thousands of
# CRs a cold start's backlog outlasts that check, so the copy that comes second does nothing
# (``dispatched_only``, KeyedQueue.begin).


# A sharded leader's tasks name its shard (``shard``, workers.shards: "s1of3"), so the worker
# settles the key where it was scheduled; an unsharded leader's carry none.


@app.task(name="hikyo.reconcile", **TASK_OPTIONS)
def reconcile(namespace: str, name: str, uid: str, shard: str = "") -> None:
    runtime = worker_runtime().in_shard(shard)
    run_reconcile(runtime, ObjectKey(namespace, name, uid), dispatched_only=True)


@app.task(name="hikyo.reconcile_full", **TASK_OPTIONS)
def reconcile_full(namespace: str, name: str, uid: str, shard: str = "") -> None:
    key = ObjectKey(namespace, name, uid)
    run_reconcile(worker_runtime().in_shard(shard), key, forced_full=True, dispatched_only=True)


@app.task(name="hikyo.evaluate_rollout", **TASK_OPTIONS)
def evaluate_rollout(namespace: str, name: str, uid: str) -> None:
    run_rollout_evaluation(worker_runtime(), ObjectKey(namespace, name, uid))


@app.task(name="hikyo.report_status", **TASK_OPTIONS)
def report_status(namespace: str, name: str, uid: str, shard: str = "") -> None:
    runtime = worker_runtime().in_shard(shard)
    run_report(runtime, ObjectKey(namespace, name, uid), dispatched_only=True)
