"""The operator process: leader election, and on the leader the watchers and the dispatcher.

Embedded mode runs reconciles on a thread pool here; scaled mode sends Celery tasks to
``celery -A workers.celery_app worker`` processes. Both use the same queue interface and the
same ``run_reconcile`` (design.md "Running modes").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from k8s.gateway import GROUP, INSTANCES_PLURAL, SECRETS_PLURAL, VERSION
from k8s.leader import LeaderElector
from k8s.watch import Resource, Watcher

from .keys import ObjectKey
from .queue.base import Ticket
from .reporting import run_report
from .runner import RolloutEvaluations, run_reconcile, run_rollout_evaluation
from .runtime import Runtime
from .sources import EventRouter

log = logging.getLogger(__name__)

EMBEDDED_WORKERS = 4  # distinct CRs reconciled at once (the reference operator's number)


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
        self.api_client: client.ApiClient = runtime.cluster.api_client
        self.send_task = send_task  # None: embedded mode
        self.leader_election = leader_election
        self.stop_event = threading.Event()
        self._leading: threading.Event | None = None
        self.watchers: list[Watcher] = []
        self.router: EventRouter | None = None
        self.elector: LeaderElector | None = None
        self.dispatcher: Any = None
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._pool = (
            ThreadPoolExecutor(embedded_workers, thread_name_prefix="reconcile")
            if send_task is None
            else None
        )
        self._pool_size = embedded_workers
        if send_task is None:
            runtime.leader_ok = self.is_leader
        self._rollouts = RolloutEvaluations(send_rollout_evaluation or self._evaluate_here)
        self.send_report = send_report
        # Reports run beside reconciles, never in their way (S7.4).
        self._report_pool = (
            ThreadPoolExecutor(2, thread_name_prefix="report") if send_report is None else None
        )

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
        )
        self.elector.start()

    def stop(self) -> None:
        self.stop_event.set()
        self._follow()
        if self.elector is not None:
            self.elector.join(timeout=15)
        for pool in (self._pool, self._report_pool):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

    def is_leader(self) -> bool:
        return self._leading is not None and not self._leading.is_set()

    def synced(self) -> bool:
        return bool(self.watchers) and all(w.synced.is_set() for w in self.watchers)

    def problem(self) -> str | None:
        """Why the leader cannot do its job right now, for /readyz; None when it can."""
        if not self.is_leader():
            return None
        if not self.synced():
            return "watches not synced"
        if self.dispatcher is not None and self.dispatcher.store_error:
            return f"keyed-queue store unreachable: {self.dispatcher.store_error}"
        return None

    # -- leadership ----------------------------------------------------------------------

    def _lead(self) -> None:
        leading = threading.Event()  # set = stop leading
        self._leading = leading
        settings = self.runtime.settings
        if not self.runtime.queue.mark_generation():
            log.info("keyed-queue store is new or was lost: every CR in reach is re-enqueued")
        self.router = EventRouter(
            self.runtime.queue,
            settings.operator_namespace,
            rollout_evaluation=self._rollouts.request if settings.trigger_rollouts else None,
            reports=self.runtime.reports if settings.status_reporting else None,
        )
        self.watchers = [
            Watcher(self.api_client, resource, handler, leading)
            for resource, handler in self._resources(self.router)
        ]
        for watcher in self.watchers:
            watcher.start()
        from .dispatcher import Dispatcher

        router = self.router
        self.dispatcher = Dispatcher(
            self.runtime.queue,
            self._submit,
            leading,
            capacity=self._capacity,
            on_store_lost=lambda: router.reenqueue_all(),
        )
        self.dispatcher.start()
        if settings.status_reporting:
            Dispatcher(self.runtime.reports, self._submit_report, leading).start()

    def _follow(self) -> None:
        if self._leading is not None:
            self._leading.set()

    def _resources(self, router: EventRouter) -> list[tuple[Resource, Any]]:
        """Instances cluster-wide; CRs (and, with triggerRollouts, workloads) in the watch list
        or everywhere. Secrets are never watched (S4.1.1)."""
        custom = client.CustomObjectsApi(self.api_client)
        apps = client.AppsV1Api(self.api_client)
        settings = self.runtime.settings
        resources = [
            (
                Resource(
                    "hikyoinstances",
                    custom.list_cluster_custom_object,
                    (GROUP, VERSION, INSTANCES_PLURAL),
                ),
                router.on_instance,
            )
        ]
        workloads = (
            ("deployment", "stateful_set", "daemon_set") if settings.trigger_rollouts else ()
        )
        for namespace in settings.namespaces or (None,):
            where = f" in {namespace}" if namespace else ""
            if namespace:
                crs = Resource(
                    f"hikyosecrets{where}",
                    custom.list_namespaced_custom_object,
                    (GROUP, VERSION, namespace, SECRETS_PLURAL),
                )
            else:
                crs = Resource(
                    "hikyosecrets",
                    custom.list_cluster_custom_object,
                    (GROUP, VERSION, SECRETS_PLURAL),
                )
            resources.append((crs, router.on_secret))
            for kind in workloads:
                if namespace:
                    lister, args = getattr(apps, f"list_namespaced_{kind}"), (namespace,)
                else:
                    lister, args = getattr(apps, f"list_{kind}_for_all_namespaces"), ()
                resources.append((Resource(f"{kind}s{where}", lister, args), router.on_workload))
        return resources

    # -- dispatching ---------------------------------------------------------------------

    def _capacity(self) -> int:
        if self._pool is None:
            return 100
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

    def _submit_report(self, ticket: Ticket) -> None:
        if self.send_report is not None:
            self.send_report(ticket)
        elif self._report_pool is not None:
            self._report_pool.submit(run_report, self.runtime, ticket.key)

    def _evaluate_here(self, key: ObjectKey) -> None:
        if self._pool is not None:
            self._pool.submit(run_rollout_evaluation, self.runtime, key)
        else:
            run_rollout_evaluation(self.runtime, key)

    def _done(self, _future: Any) -> None:
        with self._in_flight_lock:
            self._in_flight -= 1


def celery_sender(ticket: Ticket) -> None:
    """Scaled mode: a Celery task carrying only (namespace, name, uid)."""
    from . import tasks

    task = tasks.reconcile_full if ticket.forced_full else tasks.reconcile
    task.apply_async(args=list(ticket.key.as_args()))


def celery_rollout_sender(key: ObjectKey) -> None:
    """Scaled mode: a rollout-only evaluation task, again only (namespace, name, uid)."""
    from . import tasks

    tasks.evaluate_rollout.apply_async(args=list(key.as_args()))


def celery_report_sender(ticket: Ticket) -> None:
    """Scaled mode: a status-report task (S7), again only (namespace, name, uid)."""
    from . import tasks

    tasks.report_status.apply_async(args=list(ticket.key.as_args()))
