"""The operator process: leader election, and on the leader the watchers and the dispatcher.

Embedded mode runs reconciles on a thread pool here; scaled mode sends Celery tasks to
``celery -A workers.celery_app worker`` processes. Both use the same queue interface and the
same ``run_reconcile`` (design.md "Running modes").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from kubernetes import client

from k8s.errors import describe
from k8s.gateway import GROUP, INSTANCES_PLURAL, SECRETS_PLURAL, VERSION
from k8s.leader import LeaderElector
from k8s.served_crds import read_crds
from k8s.slim_api import AppsV1, CustomObjects
from k8s.watch import Resource, Watcher
from k8s.watch_cache import WatchedReads, chain

from . import metrics
from .broker_window import WorkerSlots
from .engine.crd_check import CHECKED_CRDS, served_crd_problems
from .engine.ports import DAEMON_SET, DEPLOYMENT, STATEFUL_SET
from .keys import ObjectKey
from .queue.base import Priority, Ticket
from .queue.lag import LagObserver
from .report_gate import ReportGate
from .report_threads import ReportThreads
from .runner import RolloutEvaluations, run_reconcile, run_rollout_evaluation
from .runtime import Runtime
from .shards import layout_of, of_another_layout
from .sources import EventRouter

if TYPE_CHECKING:  # scaled mode only imports it (and redis) at run time
    from .published_reads import ReadsPublisher

log = logging.getLogger(__name__)

# The workload watches, by the slim client's method name, with the kind each one feeds.
WORKLOAD_KINDS = {"deployment": DEPLOYMENT, "stateful_set": STATEFUL_SET, "daemon_set": DAEMON_SET}
# Distinct CRs reconciled at once (S4.1.4; the reference operator runs 4). A run mostly waits
# on the apiserver and the instance, so 8 keep one process busy: P9 at 20,000 ran 92 unchanged
# resyncs a second with 4, 111 with 8 (docs/performance.md).
EMBEDDED_WORKERS = 8
# Scaled mode: kombu's Redis transport keeps one list per priority step (0, 3, 6, 9) and a
# worker pops them in that order. A reconcile task carries its ticket's priority, so a first
# sync sent after resyncs still runs before them (S4.1.6) among the keys already in the broker;
# reports come last (S7.4). Rollout-only evaluations carry none, which is 0.
RECONCILE_PRIORITY = {Priority.FIRST: 0, Priority.NORMAL: 3, Priority.RESYNC: 6}
REPORT_PRIORITY = 9

CRD_CHECK_EVERY_SECONDS = 600.0  # S8.7
# While a check fails, look again sooner: S8.7 holds every reconcile until one passes, and a
# fixed CRD should not wait ten minutes to be noticed.
CRD_RECHECK_FAILING_SECONDS = 15.0
CRD_UNCHECKED = "served CRDs not checked yet (S8.7)"
# S4.1.8: shard 0 of a layout deletes what other layouts scheduled this long after it starts
# leading (their leaders are long gone by then, and their keys' runs settled).
RETIRE_OTHER_LAYOUTS_AFTER_SECONDS = 3600.0


class ServedCrdCheck(threading.Thread):
    """S8.7 on the leader: at the start of leadership and every 10 min, GET both CRDs and
    compare them (``workers.engine.crd_check``). ``problem`` is None while the last check
    passed; until the first check passes it is not (nothing may be enqueued before)."""

    def __init__(
        self,
        read: Callable[[], Mapping[str, Any]],
        stop: threading.Event,
        *,
        version: str = VERSION,
        every: float = CRD_CHECK_EVERY_SECONDS,
        failing_every: float = CRD_RECHECK_FAILING_SECONDS,
    ) -> None:
        super().__init__(name="served-crd-check", daemon=True)
        self.read, self.stop_event, self.version = read, stop, version
        self.every, self.failing_every = every, failing_every
        self.problem: str | None = CRD_UNCHECKED

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.check_once()
            self.stop_event.wait(self.failing_every if self.problem else self.every)

    def check_once(self) -> str | None:
        try:
            crds = self.read()
        except Exception as error:
            # A read that fails proves nothing about the schema: keep the last verdict, but
            # never pass before one check has.
            log.warning("served-CRD check could not read the CRDs: %s", describe(error))
            if self.problem == CRD_UNCHECKED:
                self.problem = f"served CRDs unreadable (S8.7): {describe(error)}"
            return self.problem
        problems = served_crd_problems(crds, self.version)
        found = f"served-CRD check failed (S8.7): {'; '.join(problems)}" if problems else None
        if found != self.problem:
            if found:
                log.error("%s; enqueueing nothing until the CRDs are upgraded", found)
            else:
                log.info("served-CRD check passed (S8.7)")
        self.problem = found
        return found


class OperatorProcess:
    def __init__(
        self,
        runtime: Runtime,
        *,
        send_task: Callable[[Ticket], None] | None = None,
        send_rollout_evaluation: Callable[[ObjectKey], None] | None = None,
        send_report: Callable[[Ticket], None] | None = None,
        leader_election: bool = True,
        embedded_workers: int = EMBEDDED_WORKERS,
    ) -> None:
        self.runtime = runtime
        self.layout = layout_of(runtime.settings)  # S4.1.8: the shard this process leads
        # client-go's workqueue metrics (S8.6): the leader adds and takes, runs settle.
        runtime.queue.observer = LagObserver(
            metrics.workqueue(metrics.RECONCILE_QUEUE), runtime.schedule_lag
        )
        runtime.reports.observer = metrics.workqueue(metrics.REPORT_QUEUE)
        self.api_client: client.ApiClient = runtime.cluster.api_client
        self.send_task = send_task  # None: embedded mode
        self.leader_election = leader_election
        self.stop_event = threading.Event()
        self._leading: threading.Event | None = None
        self.watchers: list[Watcher] = []
        self._publisher: ReadsPublisher | None = None  # scaled: this term's published reads
        self.router: EventRouter | None = None
        self.elector: LeaderElector | None = None
        self.dispatcher: Any = None
        self.report_dispatcher: Any = None
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._pool = (
            ThreadPoolExecutor(embedded_workers, thread_name_prefix="reconcile")
            if send_task is None
            else None
        )
        self._pool_size = embedded_workers
        if self._pool is not None:
            metrics.set_max_concurrent_reconciles(embedded_workers)
        # Scaled mode's broker window, shared with the other shard leaders.
        self._worker_slots = WorkerSlots(runtime.queue, shares=self.layout.shards)
        if send_task is None:
            runtime.leader_ok = self.is_leader
        self.crd_check: ServedCrdCheck | None = None  # S8.7, one per term of leadership
        self._rollouts = RolloutEvaluations(
            self._unless_crd_problem(send_rollout_evaluation or self._evaluate_here)
        )
        self.send_report = send_report
        # Reports run beside reconciles, never in their way (S7.4).
        self._report_threads = (
            ReportThreads(on_done=self._report_done) if send_report is None else None
        )
        self._report_gate = ReportGate()
        if self._report_threads is not None:
            runtime.hand_report = self._report_threads.hand

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if not self.leader_election:
            self._lead()
            return
        self.elector = LeaderElector(
            self.api_client,
            self.runtime.settings.operator_namespace,
            self.runtime.identity,
            on_started=self._lead,
            on_stopped=self._follow,
            stop=self.stop_event,
            name=self.layout.lease_name,
        )
        self.elector.start()

    def stop(self) -> None:
        self.stop_event.set()
        self._follow()
        if self.elector is not None:
            self.elector.join(timeout=15)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._report_threads is not None:
            self._report_threads.shutdown()

    def is_leader(self) -> bool:
        return self._leading is not None and not self._leading.is_set()

    def synced(self) -> bool:
        return bool(self.watchers) and all(w.synced.is_set() for w in self.watchers)

    def problem(self) -> str | None:
        """Why the leader cannot do its job right now, for /readyz; None when it can."""
        if not self.is_leader():
            return None
        crd_problem = self._crd_problem()
        if crd_problem:  # S8.7
            return f"{crd_problem} (enqueueing nothing: {self._waiting()} HikyoSecrets waiting)"
        if not self.synced():
            return "watches not synced"
        if self.dispatcher is not None and self.dispatcher.store_error:
            return f"keyed-queue store unreachable: {self.dispatcher.store_error}"
        return None

    def metrics_collector(self) -> metrics.OperatorCollector:
        """What /metrics reads from this process at scrape time (S8.6)."""
        return metrics.OperatorCollector(
            leader=self.is_leader,
            queues=self._metric_queues,
            lifecycles=self._router_counts("lifecycle_counts"),
            readiness=self._router_counts("readiness_counts"),
            credential_expiry=self._router_counts("credential_expiry_counts"),
            worker_slots=self._worker_slots.slots if self._pool is None else None,
            shard=(self.layout.shard, self.layout.shards),
        )

    def _metric_queues(self) -> dict[str, Any]:
        queues: dict[str, Any] = {metrics.RECONCILE_QUEUE: self.runtime.queue}
        if self.runtime.settings.status_reporting:
            queues[metrics.REPORT_QUEUE] = self.runtime.reports
        return queues

    def _router_counts(self, name: str) -> Callable[[], dict[str, int] | None]:
        """One of the router's counts of the CRs (its watch: the leader's view), read at scrape
        time; None while this process has no router."""

        def read() -> dict[str, int] | None:
            counts = getattr(self.router, name, None)
            return counts() if callable(counts) else None

        return read

    # -- leadership ----------------------------------------------------------------------

    def _lead(self) -> None:
        leading = threading.Event()  # set = stop leading
        # S8.7 before anything is dispatched: the check starts failing ("not checked yet").
        self.crd_check = ServedCrdCheck(lambda: read_crds(self.api_client, CHECKED_CRDS), leading)
        self.crd_check.start()
        self._leading = leading
        settings = self.runtime.settings
        self.router = EventRouter(
            self.runtime.queue,
            settings.operator_namespace,
            rollout_evaluation=self._rollouts.request if settings.trigger_rollouts else None,
            reports=self.runtime.reports if settings.status_reporting else None,
        )
        # This term's watches also answer the reads they may (issue 13): here in embedded
        # mode, through the keyed-queue store for scaled workers (workers.published_reads).
        watched = WatchedReads()
        publisher = self._reads_publisher(watched, leading)
        self.watchers = []
        # The claimant index costs the leader memory per CR: kept only where something reads
        # it (embedded reconciles, or the workers through the publisher; not a shard's leader).
        serves_claimants = self.send_task is None or publisher is not None
        for resource, handler, feeds in self._resources(self.router):
            if feeds == WatchedReads.CLAIMANTS and not serves_claimants:
                feeds = ""
            if feeds:  # the cache, then what is published from it, then the router
                published = [publisher.handler(feeds)] if publisher is not None else []
                handler = chain(watched.handler(feeds), *published, handler)
            watcher = Watcher(self.api_client, resource, handler, leading)
            if feeds:
                watched.fed_by(feeds, watcher)
            self.watchers.append(watcher)
        if self.send_task is None:
            self.runtime.cluster.watched = watched
        for watcher in self.watchers:
            watcher.start()
        if publisher is not None:
            publisher.start()
        self._publisher = publisher
        from .dispatcher import Dispatcher

        router = self.router
        workers_gone = self.runtime.queue.workers_gone  # where the workers advertise, for both
        self.dispatcher = Dispatcher(
            self.runtime.queue,
            self._submit,
            leading,
            capacity=self._capacity,
            on_store_lost=lambda: router.reenqueue_all(),
            workers_gone=workers_gone,
        )
        self.dispatcher.start()
        if settings.status_reporting:
            self.report_dispatcher = Dispatcher(
                self.runtime.reports,
                self._submit_report,
                leading,
                capacity=self._report_capacity,
                on_store_lost=router.reschedule_reports,
                workers_gone=workers_gone,
                what="report-queue",
            )
            self.report_dispatcher.start()
        if self.layout.shard == 0 and self.send_task is not None:
            threading.Thread(
                target=self._retire_other_layouts, args=(leading,), name="retire", daemon=True
            ).start()

    def _retire_other_layouts(self, leading: threading.Event) -> None:
        """S4.1.8: keys another shard layout scheduled (before a change of the shard count)
        expire nowhere else: shard 0 deletes them once, an hour into its term."""
        if leading.wait(RETIRE_OTHER_LAYOUTS_AFTER_SECONDS):
            return
        from .queue.redis import RedisQueue

        for queue in (self.runtime.queue, self.runtime.reports):
            if not isinstance(queue, RedisQueue):
                continue
            try:
                gone = queue.retire(
                    partial(of_another_layout, prefix=queue.prefix, layout=self.layout)
                )
            except Exception as error:  # the next term tries again
                log.warning("retiring other shard layouts' keys failed: %s", describe(error))
                continue
            if gone:
                log.info("retired %d keys other shard layouts left under %s", gone, queue.prefix)

    def _reads_publisher(
        self, watched: WatchedReads, leading: threading.Event
    ) -> ReadsPublisher | None:
        """Scaled mode on Redis: the publisher of this term's watched reads; else None."""
        if self.send_task is None:
            return None
        from .queue.redis import RedisQueue  # scaled mode only: embedded never imports redis

        if not isinstance(self.runtime.queue, RedisQueue):
            return None  # a scaled leader over the memory queue (tests): workers read as before
        if self.layout.sharded:
            # One shard's watches see only its namespaces' workloads, and workers serve every
            # shard: they read the apiserver, as they do without a publisher.
            return None
        from .published_reads import ReadsPublisher
        from .queue.published import PublishedStore

        elector = self.elector
        return ReadsPublisher(
            PublishedStore.beside(self.runtime.queue),
            watched,
            leading,
            lease_term=lambda: None if elector is None else elector.transitions,
        )

    def _follow(self) -> None:
        if self._leading is not None:
            self._leading.set()
            self.runtime.cluster.watched = None  # the term's watches stop: read as before
            if self._publisher is not None:
                self._publisher.withdraw()  # the workers too, now rather than at its expiry
            for dispatcher in (self.dispatcher, self.report_dispatcher):
                if dispatcher is not None:
                    dispatcher.wake()  # it sees the stop now, not after its tick

    def _resources(self, router: EventRouter) -> list[tuple[Resource, Any, str]]:
        """Instances cluster-wide; CRs (and, with triggerRollouts, workloads) in the watch list
        or everywhere, each with its handler and the watch cache it feeds.
        Secrets are never watched (S4.1.1)."""
        # not client.CustomObjectsApi / client.AppsV1Api: see k8s.slim_api
        custom, apps = CustomObjects(self.api_client), AppsV1(self.api_client)
        settings = self.runtime.settings
        resources = [
            (
                Resource(
                    "hikyoinstances",
                    custom.list_cluster_custom_object,
                    (GROUP, VERSION, INSTANCES_PLURAL),
                ),
                router.on_instance,
                WatchedReads.INSTANCES,
            )
        ]
        workloads = tuple(WORKLOAD_KINDS) if settings.trigger_rollouts else ()
        # S4.1.8: a shard leader keeps its own namespaces' CRs and workloads, not the others'.
        keep = self.layout.owns_object if self.layout.sharded else None
        for namespace in settings.namespaces or (None,):
            where = f" in {namespace}" if namespace else ""
            if namespace:
                crs = Resource(
                    f"hikyosecrets{where}",
                    custom.list_namespaced_custom_object,
                    (GROUP, VERSION, namespace, SECRETS_PLURAL),
                    keep,
                )
            else:
                crs = Resource(
                    "hikyosecrets",
                    custom.list_cluster_custom_object,
                    (GROUP, VERSION, SECRETS_PLURAL),
                    keep,
                )
            resources.append((crs, router.on_secret, WatchedReads.CLAIMANTS))
            for kind in workloads:
                if namespace:
                    lister, args = getattr(apps, f"list_namespaced_{kind}"), (namespace,)
                else:
                    lister, args = getattr(apps, f"list_{kind}_for_all_namespaces"), ()
                resource = Resource(f"{kind}s{where}", lister, args, keep)
                resources.append((resource, router.on_workload, WORKLOAD_KINDS[kind]))
        return resources

    # -- dispatching ---------------------------------------------------------------------

    def _capacity(self) -> int:
        if self._crd_problem():  # S8.7: keys stay waiting in the queue, none is dispatched
            return 0
        if self._pool is None:  # scaled: a window of keys in the broker (workers/broker_window)
            return self._worker_slots.free(self.runtime.queue)
        with self._in_flight_lock:
            return self._pool_size - self._in_flight

    def _submit(self, ticket: Ticket) -> None:
        if self.send_task is not None:
            self.send_task(ticket)
            return
        assert self._pool is not None
        with self._in_flight_lock:
            self._in_flight += 1
        future = self._pool.submit(run_reconcile, self.runtime, ticket.key, ticket.forced_full)
        future.add_done_callback(self._done)

    def _report_capacity(self) -> int:
        """Embedded: only as many reports as the pool runs at once leave the queue, and none
        while reconciles are backed up (the gate below). A due key taken beyond them would wait
        in the executor's own queue (a Future each: at thousands of CRs their heartbeats come
        due together) and count as dispatched all that time. Scaled: the reports' own window
        in the broker (workers/broker_window.py), behind the same gate."""
        if self._report_threads is None:
            slots = self._worker_slots.slots()
            free = self._worker_slots.window() - self.runtime.reports.dispatched_count()
        else:
            free = self._report_threads.free()
            slots = self._pool_size
        # S7.4 (workers/report_gate.py): reports yield to a backlog of reconciles, at least as
        # many due keys as reconcile slots (a cold start, a revision changing every CR), not to
        # the odd key of a steady resync load. Keys the S8.7 check holds wait for no slot.
        # Reports that have their run's reads at hand do not wait here: the run hands them to
        # its own process's report threads (``ReportThreads.hand``, workers too). Those left in
        # the queue would read the CR and its credential again, so they wait for the backlog.
        waiting = not self._crd_problem() and self.runtime.queue.due_at_least(max(slots, 1))
        return self._report_gate.slots(free, waiting, time.monotonic())

    def _submit_report(self, ticket: Ticket) -> None:
        if self.send_report is not None:
            self.send_report(ticket)
        elif self._report_threads is not None:
            self._report_threads.send(self.runtime, ticket.key)

    def _waiting(self) -> str:
        """How many keys the S8.7 hold keeps waiting, for /readyz; a store error never fails it."""
        try:
            return str(self.runtime.queue.depth())
        except Exception:
            return "?"

    def _crd_problem(self) -> str | None:
        check = self.crd_check
        return check.problem if check is not None else None

    def _unless_crd_problem(self, send: Callable[[ObjectKey], None]) -> Callable[[ObjectKey], None]:
        """S8.7 also holds rollout-only evaluations (they write status); dropping one is safe,
        since the first full reconcile after a passing check evaluates the rollout anyway."""

        def gated(key: ObjectKey) -> None:
            if self._crd_problem():
                log.debug("rollout evaluation of %s held: %s", key, self._crd_problem())
                return
            send(key)

        return gated

    def _evaluate_here(self, key: ObjectKey) -> None:
        if self._pool is not None:
            self._pool.submit(run_rollout_evaluation, self.runtime, key)
        else:
            run_rollout_evaluation(self.runtime, key)

    def _report_done(self) -> None:
        dispatcher = self.report_dispatcher
        if dispatcher is not None:
            dispatcher.wake()

    def _done(self, _future: Any) -> None:
        with self._in_flight_lock:
            self._in_flight -= 1
        dispatcher = self.dispatcher
        if dispatcher is not None:
            dispatcher.wake()  # the freed slot takes the next due key now, not at the next tick


def _shard_kwargs(shard: str) -> dict[str, str]:
    """A sharded leader's tasks name its shard (S4.1.8); an unsharded one's carry nothing new,
    so a worker of an older release still takes them."""
    return {"shard": shard} if shard else {}


def celery_sender(ticket: Ticket, shard: str = "") -> None:
    """Scaled mode: a Celery task carrying only (namespace, name, uid) and the shard's tag."""
    from . import tasks

    task = tasks.reconcile_full if ticket.forced_full else tasks.reconcile
    task.apply_async(
        args=list(ticket.key.as_args()),
        kwargs=_shard_kwargs(shard),
        priority=RECONCILE_PRIORITY[Priority(ticket.priority)],
    )


def celery_rollout_sender(key: ObjectKey) -> None:
    """Scaled mode: a rollout-only evaluation task, again only (namespace, name, uid)."""
    from . import tasks

    tasks.evaluate_rollout.apply_async(args=list(key.as_args()))


def celery_report_sender(ticket: Ticket, shard: str = "") -> None:
    """Scaled mode: a status-report task (S7), again only (namespace, name, uid), sent at the
    broker's lowest priority: a worker takes every waiting reconcile before it (S7.4)."""
    from . import tasks

    tasks.report_status.apply_async(
        args=list(ticket.key.as_args()), kwargs=_shard_kwargs(shard), priority=REPORT_PRIORITY
    )
