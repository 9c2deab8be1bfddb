"""Prometheus metrics (S8.6), defined here and nowhere else; served on
HIKYO_OPERATOR_METRICS_ADDR (S8.1, default ``:8080``) by every process kind.

* ``run_operator`` (embedded and scaled): one process, threads; the global registry (with
  prometheus_client's process/platform collectors) plus :class:`OperatorCollector`, which reads
  the leader gauge, the queue depths and the leader's lifecycle counts at scrape time.
* a scaled-mode Celery worker: prometheus_client's *multiprocess mode*. The worker's main
  process empties a directory of its own (``PROMETHEUS_MULTIPROC_DIR``, or a fresh temporary
  one) before its prefork pool starts; every pool child writes its samples to per-PID files
  there, and the main process serves their sum (:func:`multiprocess_registry`). A pool child
  replaced by Celery keeps its counts (its files stay), live gauges drop a child that exited
  (:func:`process_exited`). One port per worker pod, whatever ``--concurrency`` is, and no
  port per child to discover; it works the same with ``--pool solo`` or ``threads``.

Labels are bounded and value-free (S0.4, S8.3): lifecycle and reason names from the engine,
HikyoInstance and namespace names, and constants. Never a key name, value, target, message,
cursor or stamp. Reasons and lifecycles that do not look like the engine's names are counted
as ``Other``, so even an engine bug cannot put free text into a label.

Nothing here may break a reconcile or a queue operation: every update is guarded
(:func:`_quietly`) and a collector that cannot read the store leaves its sample out.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    multiprocess,
    start_http_server,
    values,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .engine.conditions import CREDENTIAL_EXPIRY, LIFECYCLES, REASONS, UNRECONCILED
from .engine.decide_after_fetch import UNANSWERED_WAITS
from .engine.outcome import Requeue
from .engine.reconcile import RunResult

log = logging.getLogger(__name__)

# No ``*_created`` series beside each counter and histogram: controller-runtime's dashboards do
# not chart them, and they would double the exposition.
disable_created_metrics()

CONTROLLER = "hikyosecret"  # controller-runtime's controller="..." and workqueue name="..."
RECONCILE_QUEUE = CONTROLLER
REPORT_QUEUE = "statusreport"  # the S7 report queue, a second keyed queue

UNCHANGED = "Unchanged"  # a run that left the stored lifecycle as it was (quiet stops)
OTHER = "Other"

# Why a run produced no result (runner.py); not S5.1 reasons, which come from the engine.
INTERRUPTED = "Interrupted"  # the apiserver or the store failed mid-run
INTERNAL_ERROR = "InternalError"  # a bug: the traceback is in the log
DEADLINE_EXCEEDED = "DeadlineExceeded"  # abandoned at the 90 s deadline (S4.1.4)

FETCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# controller-runtime's reconcile_time_seconds buckets.
RECONCILE_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7),
    *(0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0),
    *(10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0),
)
# client-go's workqueue buckets: ExponentialBuckets(10e-9, 10, 12).
QUEUE_BUCKETS = tuple(10.0**exponent for exponent in range(-8, 4))

_REASON = re.compile(r"^[A-Z][A-Za-z0-9]{0,63}$")  # S5.1 reasons are CamelCase words
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # DNS-1123 subdomain


def reason_label(reason: str) -> str:
    return reason if _REASON.match(reason or "") else OTHER


def lifecycle_label(lifecycle: str | None) -> str:
    if not lifecycle:
        return UNCHANGED
    return lifecycle if lifecycle in LIFECYCLES else OTHER


NO_BLOCKER = "none"
EXPIRY_REASONS = tuple(REASONS[CREDENTIAL_EXPIRY]["True"])  # ExpiresSoon, Expired
FETCH_WAITS = ("InstancePaused", *UNANSWERED_WAITS)  # runs that waited instead of fetching
_BLOCKER = re.compile(r"^[A-Z][A-Za-z]{0,31}/[A-Za-z]{1,63}$")  # S5.1 Type/Reason


def blocker_label(blocker: str) -> str:
    """A first blocker (``workers.leader.sources.readiness_of``) as Type/Reason, else Other."""
    return blocker if _BLOCKER.match(blocker or "") else OTHER


def name_label(name: str) -> str:
    """A Kubernetes object name (HikyoInstance, namespace), or ``unknown``/``invalid``."""
    if not name:
        return "unknown"
    return name if _K8S_NAME.match(name) else "invalid"


def controller_result(requeue: Requeue) -> str:
    """controller-runtime's ``result`` label for one run that returned.

    BACKOFF is how the engine says "this run failed, retry with backoff" (a returned error in
    controller-runtime, which requeues rate-limited), so it is ``error``; AFTER is
    ``RequeueAfter`` (a first 404, a 429, a foreign owner's recheck); RESYNC and NONE are
    ``success`` (the resync is a timer, like a SyncPeriod resync, not a requeue).
    """
    if requeue is Requeue.BACKOFF:
        return "error"
    if requeue is Requeue.AFTER:
        return "requeue_after"
    return "success"


class Metrics:
    """Every metric the runner and the queues update, on one registry (None: multiprocess
    mode, where the samples live in files and nothing is registered)."""

    def __init__(self, registry: CollectorRegistry | None = REGISTRY) -> None:
        r = registry
        self.reconciles = Counter(
            "hikyo_operator_reconcile_total",
            "Reconcile runs by the lifecycle they left (Unchanged: a quiet stop) and their "
            "outcome reason (S5.1; Interrupted, InternalError, DeadlineExceeded: no result).",
            ["lifecycle", "reason"],
            registry=r,
        )
        self.fetch_seconds = Histogram(
            "hikyo_operator_fetch_duration_seconds",
            "Delivery fetches (S3.3) by HikyoInstance: time from request to answer or failure.",
            ["hikyo_instance"],
            buckets=FETCH_BUCKETS,
            registry=r,
        )
        self.fetch_429 = Counter(
            "hikyo_operator_fetch_429_total",
            "Delivery fetches answered 429 (S4.1.6), by HikyoInstance.",
            ["hikyo_instance"],
            registry=r,
        )
        self.fetch_waits = Counter(
            "hikyo_operator_fetch_waits_total",
            "Runs that waited instead of fetching, by HikyoInstance and why: InstancePaused "
            "(a 429 pause, S4.1.6), InstanceUnresponsive or CredentialUnanswered (S4.1.9). "
            "A wait is not a failure: the CR keeps its conditions.",
            ["hikyo_instance", "reason"],
            registry=r,
        )
        self.foreign_owner = Gauge(
            "hikyo_operator_foreign_owner",
            "HikyoSecrets standing off because a live operator elsewhere owns them (S4.1.7).",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.namespace_forbidden = Gauge(
            "hikyo_operator_namespace_forbidden",
            "1 while the latest run in the namespace was refused by RBAC (S4.15 "
            "NamespaceNotBound), 0 once a run there got through.",
            ["namespace"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.controller_reconciles = Counter(
            "controller_runtime_reconcile_total",
            "Reconcile runs by result (success, error, requeue_after), as controller-runtime.",
            ["controller", "result"],
            registry=r,
        )
        self.controller_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Reconcile runs that failed: raised, abandoned, or backed off.",
            ["controller"],
            registry=r,
        )
        self.controller_seconds = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Time of one reconcile run under its per-key lock.",
            ["controller"],
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Reconcile runs in progress in this process.",
            ["controller"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.queue_adds = Counter(
            "workqueue_adds_total",
            "Keys that entered the keyed queue (a key already waiting is not added twice).",
            ["name"],
            registry=r,
        )
        self.queue_retries = Counter(
            "workqueue_retries_total",
            "Keys requeued with backoff after a failed run.",
            ["name"],
            registry=r,
        )
        self.queue_seconds = Histogram(
            "workqueue_queue_duration_seconds",
            "Time from a key's due time to the leader taking it for a worker.",
            ["name"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.controller_panics = Counter(
            "controller_runtime_reconcile_panics_total",
            "Reconcile runs that raised an unexpected exception (a bug, traceback logged), as "
            "controller-runtime counts a recovered panic; each is an error run too.",
            ["controller"],
            registry=r,
        )
        self.max_concurrent = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Reconcile runs this process runs at once at most (its pool's size).",
            ["controller"],
            registry=r,
            multiprocess_mode="max",
        )
        self.work_seconds = Histogram(
            "workqueue_work_duration_seconds",
            "Time from taking a key to settling it: one run, under its per-key lock.",
            ["name"],
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.unfinished_seconds = Gauge(
            "workqueue_unfinished_work_seconds",
            "Seconds the runs in progress have run so far, summed (client-go: a large value "
            "with few runs means stuck runs).",
            ["name"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.longest_seconds = Gauge(
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest run in progress has run so far.",
            ["name"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self._start_at_zero()
        self.in_flight = InFlight(
            self.unfinished_seconds.labels(RECONCILE_QUEUE),
            self.longest_seconds.labels(RECONCILE_QUEUE),
        )
        self._lock = threading.Lock()
        self._standing_off: dict[str, float] = {}  # CR uid -> until (monotonic)
        self._clock: Callable[[], float] = time.monotonic

    def _start_at_zero(self) -> None:
        """The counters an alert takes ``increase()`` of, at 0 for every label set known before
        the first run: a series that first appears at 1 is no increase, so without this the
        first panic of a process would never page (issue 50)."""
        for result in ("success", "error", "requeue_after"):
            self.controller_reconciles.labels(CONTROLLER, result)
        self.controller_errors.labels(CONTROLLER)
        self.controller_panics.labels(CONTROLLER)
        for reason in (INTERRUPTED, INTERNAL_ERROR, DEADLINE_EXCEEDED):
            self.reconciles.labels(UNCHANGED, reason)

    # -- one run ------------------------------------------------------------------------

    def record_run(self, result: RunResult, requeue: Requeue, seconds: float, uid: str) -> None:
        """One run that returned a result; ``requeue`` is what the key was settled with."""
        outcome = result.outcome
        lifecycle, reason = lifecycle_label(outcome.lifecycle), reason_label(outcome.reason)
        self.reconciles.labels(lifecycle, reason).inc()
        self._controller(controller_result(requeue), seconds)
        if result.fetch_seconds is not None:
            instance = name_label(result.instance)
            self.fetch_seconds.labels(instance).observe(max(result.fetch_seconds, 0.0))
            if result.fetch_status == 429:
                self.fetch_429.labels(instance).inc()
        if outcome.reason in FETCH_WAITS:
            instance = name_label(result.names.get("instance") or result.instance)
            self.fetch_waits.labels(instance, outcome.reason).inc()
        namespace = name_label(result.namespace)
        self.namespace_forbidden.labels(namespace).set(
            1 if outcome.reason == "NamespaceNotBound" else 0
        )
        self._stand_off(uid or result.uid, outcome.reason == "ForeignOwner", outcome.delay)

    def record_failed_run(self, reason: str, seconds: float) -> None:
        """A run without a result (it raised, or was abandoned at its deadline)."""
        self.reconciles.labels(UNCHANGED, reason_label(reason)).inc()
        if reason == INTERNAL_ERROR:
            self.controller_panics.labels(CONTROLLER).inc()
        self._controller("error", seconds)

    def _controller(self, result: str, seconds: float) -> None:
        self.controller_reconciles.labels(CONTROLLER, result).inc()
        if result == "error":
            self.controller_errors.labels(CONTROLLER).inc()
        self.controller_seconds.labels(CONTROLLER).observe(max(seconds, 0.0))
        self.work_seconds.labels(RECONCILE_QUEUE).observe(max(seconds, 0.0))

    def _stand_off(self, uid: str, standing_off: bool, recheck: float | None) -> None:
        """The CRs this process last saw stand off, each until three of its rechecks passed
        without a run here (in scaled mode a later run may be another process's)."""
        if not uid:
            return
        with self._lock:
            now = self._clock()
            if standing_off:
                self._standing_off[uid] = now + 3 * max(float(recheck or 0.0), 60.0)
            else:
                self._standing_off.pop(uid, None)
            for stale in [u for u, until in self._standing_off.items() if until <= now]:
                del self._standing_off[stale]
            self.foreign_owner.set(len(self._standing_off))

    # -- the queues ---------------------------------------------------------------------

    def workqueue(self, name: str) -> WorkqueueObserver:
        return WorkqueueObserver(self, name)


class InFlight:
    """The runs in progress in this process, for client-go's two "stuck work" gauges: set at
    each run's start and end and, while any runs, every ``every`` seconds by a daemon thread
    (client-go updates them every 500 ms), so a scrape sees a long run's age grow."""

    def __init__(self, unfinished: Any, longest: Any, every: float = 1.0) -> None:
        self._unfinished, self._longest, self._every = unfinished, longest, every
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}  # run token -> start (monotonic)
        self._tokens = iter(range(1, 2**62))
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.clock: Callable[[], float] = time.monotonic

    def begin(self) -> int:
        with self._lock:
            token = next(self._tokens)
            self._started[token] = self.clock()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._refresh_while_running, name="metrics-in-flight", daemon=True
                )
                self._thread.start()
        self._wake.set()
        self.refresh()
        return token

    def end(self, token: int) -> None:
        with self._lock:
            self._started.pop(token, None)
        self.refresh()

    def refresh(self) -> None:
        with self._lock:  # set under the lock too: a stale refresh never lands after a newer one
            now = self.clock()
            ages = [max(now - started, 0.0) for started in self._started.values()]
            _quietly(self._unfinished.set, sum(ages))
            _quietly(self._longest.set, max(ages, default=0.0))

    def _refresh_while_running(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(self._every)
            self.refresh()
            with self._lock:
                if not self._started:
                    self._wake.clear()


class WorkqueueObserver:
    """What a keyed queue reports (``workers.queue.base.QueueObserver``); never raises."""

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._adds = metrics.queue_adds.labels(name)
        self._retries = metrics.queue_retries.labels(name)
        self._seconds = metrics.queue_seconds.labels(name)

    def added(self, count: int = 1) -> None:
        if count > 0:
            _quietly(self._adds.inc, count)

    def taken(self, waited_seconds: float) -> None:
        _quietly(self._seconds.observe, max(waited_seconds, 0.0))

    def retried(self) -> None:
        _quietly(self._retries.inc)


# -- what the operator process shows at scrape time ---------------------------------------


class OperatorCollector(Collector):
    """Read at scrape time: ``hikyo_operator_leader`` and the shard layout (its own shard, and
    every shard expected) always; on the Lease holder only (the one that watches and
    dispatches, S4.1.5) the queue depths and ``hikyo_operator_secrets``.

    ``queues`` maps a workqueue name to a queue; a queue (store) that cannot be read leaves its
    samples out of this scrape, the rest is served.
    """

    def __init__(
        self,
        *,
        leader: Callable[[], bool],
        queues: Callable[[], Mapping[str, Any]],
        lifecycles: Callable[[], Mapping[str, int] | None],
        readiness: Callable[[], Mapping[str, int] | None] = lambda: None,
        credential_expiry: Callable[[], Mapping[str, int] | None] = lambda: None,
        worker_slots: Callable[[], int] | None = None,
        shard: tuple[int, int] = (0, 1),
    ) -> None:
        self.leader, self.queues, self.lifecycles = leader, queues, lifecycles
        self.shard = shard  # (this process's shard, how many) (S4.1.8)
        self.readiness = readiness  # blocker ("" when Ready) -> HikyoSecrets
        self.credential_expiry = credential_expiry  # CredentialExpiry reason -> HikyoSecrets
        self.worker_slots = worker_slots  # scaled mode only (workers/broker_window.py)

    def describe(self) -> Iterable[Metric]:
        return [*self._families(), *self._scaled_families()]

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        leader_family, shard_family, expected_family, depth, workqueue_depth = families[:5]
        secrets, ready, expiring = families[5:]
        leading = _safely(self.leader, False)
        leader_family.add_metric([], 1.0 if leading else 0.0)
        yield leader_family
        shard, shards = self.shard
        shard_family.add_metric([str(shard), str(shards)], 1.0)
        yield shard_family
        for expected in range(shards):
            expected_family.add_metric([str(expected)], 1.0)
        yield expected_family
        if not leading:
            return
        for name, queue in (_safely(self.queues, {}) or {}).items():
            if name == RECONCILE_QUEUE:
                waiting = _safely(queue.depth, None)
                if waiting is not None:
                    depth.add_metric([], float(waiting))
            due = _safely(queue.due_count, None)
            if due is not None:
                workqueue_depth.add_metric([name], float(due))
        yield depth
        yield workqueue_depth
        counts: dict[str, int] = {}
        for lifecycle, count in (_safely(self.lifecycles, None) or {}).items():
            # No status.lifecycle yet reads Unreconciled, as the router and the dashboard say.
            label = lifecycle if lifecycle in LIFECYCLES else (OTHER if lifecycle else UNRECONCILED)
            counts[label] = counts.get(label, 0) + int(count)
        for label, count in sorted(counts.items()):
            secrets.add_metric([label], float(count))
        yield secrets
        readiness = _safely(self.readiness, None)
        if readiness is not None:
            by_state: dict[tuple[str, str], int] = {("true", NO_BLOCKER): 0}
            for blocker, count in readiness.items():
                state = ("true", NO_BLOCKER) if not blocker else ("false", blocker_label(blocker))
                by_state[state] = by_state.get(state, 0) + int(count)
            for state, count in sorted(by_state.items()):
                ready.add_metric(list(state), float(count))
            yield ready
        expiries = _safely(self.credential_expiry, None)
        if expiries is not None:
            by_reason = dict.fromkeys(EXPIRY_REASONS, 0)
            for reason, count in expiries.items():
                label = reason if reason in EXPIRY_REASONS else OTHER
                by_reason[label] = by_reason.get(label, 0) + int(count)
            for reason, count in sorted(by_reason.items()):
                expiring.add_metric([reason], float(count))
            yield expiring
        if self.worker_slots is not None:
            (slots_family,) = self._scaled_families()
            slots = _safely(self.worker_slots, None)
            if slots is not None:
                slots_family.add_metric([], float(slots))
            yield slots_family

    def _scaled_families(self) -> tuple[GaugeMetricFamily, ...]:
        if self.worker_slots is None:
            return ()
        return (
            GaugeMetricFamily(
                "hikyo_operator_worker_slots",
                "Tasks the live Celery workers run at once, as they advertise it (scaled mode; "
                "on the leader only). 0: no worker is running.",
            ),
        )

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(
                "hikyo_operator_leader", "1 while this process holds the leader Lease (S4.1.5)."
            ),
            GaugeMetricFamily(
                "hikyo_operator_shard_info",
                "Always 1: the shard this operator process leads or stands by for, of how many "
                "(S4.1.8; shard 0 of 1 unsharded). With hikyo_operator_leader, each shard's "
                "leader; hikyo_operator_secrets on it, the shard's size.",
                labels=["shard", "shards"],
            ),
            GaugeMetricFamily(
                "hikyo_operator_shard_expected",
                "Always 1, once for each shard this process's layout has (0 to shards - 1), "
                "so an alert names a shard that has no leader even when none of its processes "
                "is left to say so (S4.1.8).",
                labels=["shard"],
            ),
            GaugeMetricFamily(
                "hikyo_operator_queue_depth",
                "HikyoSecret keys waiting in the keyed queue, due now or at a scheduled time "
                "(resync, backoff); on the leader only.",
            ),
            GaugeMetricFamily(
                "workqueue_depth",
                "Keys due now and not yet taken (client-go's depth: ready items).",
                labels=["name"],
            ),
            GaugeMetricFamily(
                "hikyo_operator_secrets",
                "HikyoSecrets in reach by status.lifecycle, as the leader's watch sees them.",
                labels=["lifecycle"],
            ),
            GaugeMetricFamily(
                "hikyo_operator_secrets_ready",
                "HikyoSecrets in reach by their stored Ready condition (S5.2) and, when not "
                "Ready, the first blocker as Type/Reason; on the leader only.",
                labels=["ready", "blocker"],
            ),
            GaugeMetricFamily(
                "hikyo_operator_credential_expiry",
                "HikyoSecrets whose credential expires within 7 days (ExpiresSoon) or has "
                "(Expired), by their CredentialExpiry condition (S4.13); on the leader only.",
                labels=["reason"],
            ),
        )


def _safely(read: Callable[[], Any], default: Any) -> Any:
    try:
        return read()
    except Exception as error:  # the store is down, a bug: this sample is left out
        log.debug("a metric could not be read: %s", type(error).__name__)
        return default


def _quietly(update: Callable[..., Any], *args: Any) -> None:
    try:
        update(*args)
    except Exception as error:  # e.g. a full disk under the multiprocess directory
        log.debug("a metric could not be updated: %s", type(error).__name__)


# -- this process's metrics -------------------------------------------------------------------

_current: Metrics | None = None
_current_lock = threading.Lock()
_multiprocess_dir: str | None = None
_owned_dir = False  # made by enable_multiprocess, removed at shutdown


def current() -> Metrics:
    """This process's metrics, made on first use (after :func:`enable_multiprocess` in a
    worker's pool child, so its samples go to the shared files)."""
    global _current
    with _current_lock:
        if _current is None:
            _current = Metrics(None if _multiprocess_dir else REGISTRY)
        return _current


def record_run(result: RunResult, requeue: Requeue, seconds: float, uid: str) -> None:
    _quietly(lambda: current().record_run(result, requeue, seconds, uid))


def record_failed_run(reason: str, seconds: float) -> None:
    _quietly(lambda: current().record_failed_run(reason, seconds))


@contextlib.contextmanager
def running() -> Iterator[None]:
    """Counts this run in ``controller_runtime_active_workers`` and the workqueue's in-flight
    gauges; never fails the run."""
    try:
        gauge = current().active_workers.labels(CONTROLLER)
        gauge.inc()
    except Exception:
        gauge = None
    try:
        in_flight: InFlight | None = current().in_flight
        token = in_flight.begin()
    except Exception:
        in_flight, token = None, 0
    try:
        yield
    finally:
        if gauge is not None:
            _quietly(gauge.dec)
        if in_flight is not None:
            _quietly(in_flight.end, token)


def set_max_concurrent_reconciles(count: int) -> None:
    """The size of this process's pool of reconcile runs (embedded threads, worker slots)."""
    _quietly(lambda: current().max_concurrent.labels(CONTROLLER).set(count))


def workqueue(name: str) -> WorkqueueObserver:
    return current().workqueue(name)


# -- serving ----------------------------------------------------------------------------------


def serve(address: tuple[str, int], registry: CollectorRegistry = REGISTRY) -> WSGIServer:
    """``/metrics`` (any path) on ``address`` in a daemon thread. OSError when it cannot bind
    (the caller turns it into one line and a non-zero exit)."""
    host, port = address
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server


def operator_registry(collector: Collector) -> CollectorRegistry:
    """run_operator's registry: the global one (this module's metrics, prometheus_client's
    process/platform/GC collectors) plus the scrape-time collector of the operator process."""
    current()
    REGISTRY.register(collector)
    return REGISTRY


def enable_multiprocess(directory: str | None = None) -> str:
    """Before a Celery worker's pool starts (its main process): empty the samples directory and
    make every metric made from now on in this process and its children file-backed.

    The directory is ``directory``, else PROMETHEUS_MULTIPROC_DIR, else a fresh one under the
    temporary directory (an ``emptyDir`` under the chart), removed at :func:`shutdown`. One
    directory per worker: two workers sharing one would wipe each other's samples.
    """
    global _multiprocess_dir, _owned_dir, _current
    path = directory or os.environ.get("PROMETHEUS_MULTIPROC_DIR") or ""
    if not path:
        path, _owned_dir = tempfile.mkdtemp(prefix="hikyo-operator-metrics-"), True
    os.makedirs(path, exist_ok=True)
    for stale in glob.glob(os.path.join(path, "*.db")):  # samples of an earlier run
        os.remove(stale)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    # prometheus_client picks its value class from that variable when it is first imported,
    # and reads ``values.ValueClass`` each time a sample is made; the import may have been
    # before this (its own tests switch modes the same way).
    if not getattr(values.ValueClass, "_multiprocess", False):
        values.ValueClass = values.MultiProcessValue()
    with _current_lock:
        _multiprocess_dir, _current = path, None
    return path


def multiprocess_registry() -> CollectorRegistry:
    """The worker's exposition: the sum of its pool children's samples."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=_multiprocess_dir)
    return registry


def process_exited(pid: int | None) -> None:
    """A pool child ends: its live gauges stop counting (counters and histograms stay)."""
    if _multiprocess_dir and pid:
        _quietly(multiprocess.mark_process_dead, pid, _multiprocess_dir)


def shutdown(server: WSGIServer | None = None) -> None:
    if server is not None:
        _quietly(server.shutdown)
    if _owned_dir and _multiprocess_dir:
        shutil.rmtree(_multiprocess_dir, ignore_errors=True)
