"""The operator process: leader election, and on the leader the watchers and the dispatcher.

Where the dispatched runs go (threads here, or Celery tasks to the workers) is the executor's
business (``workers.leader.executors``), chosen once at start; both modes use the same queue
interface and the same ``run_reconcile`` (design.md "Running modes").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from k8s.gateway import GROUP, INSTANCES_PLURAL, SECRETS_PLURAL, VERSION
from k8s.leader import LeaderElector
from k8s.served_crds import read_crds
from k8s.slim_api import AppsV1, CustomObjects
from k8s.watch import Resource, Watcher
from k8s.watch_cache import WatchedReads, chain

from .. import metrics
from ..engine.crd_check import CHECKED_CRDS
from ..engine.ports import DAEMON_SET, DEPLOYMENT, STATEFUL_SET
from ..keys import ObjectKey
from ..queue.base import Ticket
from ..queue.lag import LagObserver
from ..runner import RolloutEvaluations
from ..runtime import Runtime
from ..shards import layout_of
from .crd_check import ServedCrdCheck
from .dispatcher import Dispatcher
from .executors import EmbeddedExecutor, Executor
from .report_gate import ReportGate
from .sources import EventRouter

log = logging.getLogger(__name__)

# The workload watches, by the slim client's method name, with the kind each one feeds.
WORKLOAD_KINDS = {"deployment": DEPLOYMENT, "stateful_set": STATEFUL_SET, "daemon_set": DAEMON_SET}


class OperatorProcess:
    def __init__(
        self,
        runtime: Runtime,
        executor: Executor | None = None,
        *,
        leader_election: bool = True,
    ) -> None:
        self.runtime = runtime
        self.layout = layout_of(runtime.settings)  # S4.1.8: the shard this process leads
        # client-go's workqueue metrics (S8.6): the leader adds and takes, runs settle.
        runtime.queue.observer = LagObserver(
            metrics.workqueue(metrics.RECONCILE_QUEUE), runtime.schedule_lag
        )
        runtime.reports.observer = metrics.workqueue(metrics.REPORT_QUEUE)
        self.api_client: client.ApiClient = runtime.cluster.api_client
        self.executor: Executor = executor or EmbeddedExecutor(runtime)
        self.executor.bind(
            is_leader=self.is_leader, on_run_done=self._run_done, on_report_done=self._report_done
        )
        self.leader_election = leader_election
        self.stop_event = threading.Event()
        self._leading: threading.Event | None = None
        self.watchers: list[Watcher] = []
        self.router: EventRouter | None = None
        self.elector: LeaderElector | None = None
        self.dispatcher: Dispatcher | None = None
        self.report_dispatcher: Dispatcher | None = None
        self._publisher: Any = None  # a ReadsPublisher while this term publishes its reads
        self.crd_check: ServedCrdCheck | None = None  # S8.7, one per term of leadership
        self._rollouts = RolloutEvaluations(
            self._unless_crd_problem(self.executor.evaluate_rollout)
        )
        self._report_gate = ReportGate()  # reports run beside reconciles, never in their way

    @property
    def scaled(self) -> bool:
        """The runs happen in Celery workers, not here (the dashboard's mode)."""
        return not self.executor.runs_in_process

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
        self.executor.stop()

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
            worker_slots=self.executor.worker_slots,
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
        elector = self.elector
        publisher = self.executor.reads_publisher(
            watched, leading, lambda: None if elector is None else elector.transitions
        )
        self.watchers = []
        # The claimant index costs the leader memory per CR: kept only where something reads
        # it (embedded reconciles, or the workers through the publisher; not a shard's leader).
        serves_claimants = self.executor.runs_in_process or publisher is not None
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
        self.executor.begin_term(watched, leading)
        for watcher in self.watchers:
            watcher.start()
        if publisher is not None:
            publisher.start()
        self._publisher = publisher
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
        return self.executor.capacity()

    def _submit(self, ticket: Ticket) -> None:
        self.executor.reconcile(ticket)

    def _report_capacity(self) -> int:
        """The executor's room for reports (threads free here, or the reports' own window in
        the broker), behind S7.4's gate."""
        free, slots = self.executor.report_room()
        # S7.4 (workers/leader/report_gate.py): reports yield to a backlog of reconciles, at
        # least as many due keys as reconcile slots (a cold start, a revision changing every
        # CR), not to the odd key of a steady resync load. Keys the S8.7 check holds wait for
        # no slot. Reports that have their run's reads at hand do not wait here: the run hands
        # them to its own process's report threads (``ReportThreads.hand``, workers too). Those
        # left in the queue would read the CR and its credential again, so they wait.
        waiting = not self._crd_problem() and self.runtime.queue.due_at_least(max(slots, 1))
        return self._report_gate.slots(free, waiting, time.monotonic())

    def _submit_report(self, ticket: Ticket) -> None:
        self.executor.report(ticket)

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

    def _report_done(self) -> None:
        dispatcher = self.report_dispatcher
        if dispatcher is not None:
            dispatcher.wake()

    def _run_done(self) -> None:
        dispatcher = self.dispatcher
        if dispatcher is not None:
            dispatcher.wake()  # the freed slot takes the next due key now, not at the next tick
