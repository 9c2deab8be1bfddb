"""Where the leader's dispatched work runs, chosen once at start (design.md "Running modes").

``EmbeddedExecutor`` runs reconciles, reports and rollout evaluations on threads of this
process; ``CeleryExecutor`` sends each as a Celery task carrying only (namespace, name, uid) to
``celery -A workers.celery_app worker`` processes. The leader (``workers.leader.process``) asks
either one the same questions (how many keys may leave the queue now, where this term's
watched reads are served) and never which mode it is in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from k8s.watch_cache import WatchedReads

from .. import metrics
from ..broker_window import WorkerSlots
from ..keys import ObjectKey
from ..queue.base import Priority, Ticket
from ..report_threads import ReportThreads
from ..runner import run_reconcile, run_rollout_evaluation
from ..runtime import Runtime
from ..shards import ShardLayout
from .retired_layouts import retire_other_layouts

if TYPE_CHECKING:  # scaled mode only imports it (and redis) at run time
    from ..published_reads import ReadsPublisher

log = logging.getLogger(__name__)

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


class Executor(Protocol):
    """What the leader needs from where its work runs."""

    # The runs read this process's watch caches (embedded), or another process's (scaled).
    runs_in_process: bool
    # Free worker slots for /metrics, read at scrape time; None where this process runs them.
    worker_slots: Callable[[], int] | None

    def bind(self, *, is_leader: Callable[[], bool], on_run_done: Callable[[], None],
             on_report_done: Callable[[], None]) -> None: ...  # fmt: skip

    def reconcile(self, ticket: Ticket) -> None: ...

    def report(self, ticket: Ticket) -> None: ...

    def evaluate_rollout(self, key: ObjectKey) -> None: ...

    def capacity(self) -> int:
        """Reconcile keys that may leave the queue now."""
        ...

    def report_room(self) -> tuple[int, int]:
        """(report keys that may leave the queue now, reconcile slots that run them)."""
        ...

    def reads_publisher(self, watched: WatchedReads, leading: threading.Event,
                        lease_term: Callable[[], int | None]) -> ReadsPublisher | None:  # fmt: skip
        """The publisher of a term's watched reads, where the runs read them elsewhere."""
        ...

    def begin_term(self, watched: WatchedReads, leading: threading.Event) -> None:
        """A term's watches are set up (not started yet): serve their reads to the runs."""
        ...

    def stop(self) -> None: ...


class EmbeddedExecutor:
    """Reconciles on a thread pool here, reports on their own threads beside them (S7.4)."""

    runs_in_process = True
    worker_slots = None

    def __init__(self, runtime: Runtime, workers: int = EMBEDDED_WORKERS) -> None:
        self.runtime, self.workers = runtime, workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="reconcile")
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        self._on_run_done: Callable[[], None] = lambda: None
        metrics.set_max_concurrent_reconciles(workers)
        self._report_threads: ReportThreads | None = None

    def bind(
        self,
        *,
        is_leader: Callable[[], bool],
        on_run_done: Callable[[], None],
        on_report_done: Callable[[], None],
    ) -> None:
        self.runtime.leader_ok = is_leader
        self._on_run_done = on_run_done
        self._report_threads = ReportThreads(on_done=on_report_done)
        self.runtime.hand_report = self._report_threads.hand

    def reconcile(self, ticket: Ticket) -> None:
        with self._in_flight_lock:
            self._in_flight += 1
        try:
            future = self._pool.submit(run_reconcile, self.runtime, ticket.key, ticket.forced_full)
        except RuntimeError:  # shut down while the dispatcher handed the key out: stopping
            with self._in_flight_lock:
                self._in_flight -= 1
            log.debug("reconcile of %s dropped: the process is stopping", ticket.key)
            return
        future.add_done_callback(self._done)

    def report(self, ticket: Ticket) -> None:
        assert self._report_threads is not None, "bind() first"
        self._report_threads.send(self.runtime, ticket.key)

    def evaluate_rollout(self, key: ObjectKey) -> None:
        try:
            self._pool.submit(run_rollout_evaluation, self.runtime, key)
        except RuntimeError:  # the pool was shut down: a timer that fired as the process stops
            log.debug("rollout evaluation of %s dropped: the process is stopping", key)

    def capacity(self) -> int:
        with self._in_flight_lock:
            return self.workers - self._in_flight

    def report_room(self) -> tuple[int, int]:
        # Only as many reports as run at once leave the queue: a key taken beyond them would
        # wait in the executor's own queue (a Future each: at thousands of CRs their
        # heartbeats come due together) and count as dispatched all that time.
        assert self._report_threads is not None, "bind() first"
        return self._report_threads.free(), self.workers

    def reads_publisher(
        self,
        watched: WatchedReads,
        leading: threading.Event,
        lease_term: Callable[[], int | None],
    ) -> ReadsPublisher | None:
        return None  # the runs here read the term's watches directly

    def begin_term(self, watched: WatchedReads, leading: threading.Event) -> None:
        self.runtime.cluster.watched = watched

    def stop(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._report_threads is not None:
            self._report_threads.shutdown()

    def _done(self, _future: Future[Any]) -> None:
        with self._in_flight_lock:
            self._in_flight -= 1
        self._on_run_done()  # the freed slot takes the next due key now, not at the next tick


class CeleryExecutor:
    """Celery tasks to the workers, a window of keys in the broker at a time
    (workers/broker_window.py), shared with the other shard leaders."""

    runs_in_process = False

    def __init__(
        self,
        runtime: Runtime,
        layout: ShardLayout,
        *,
        send_task: Callable[[Ticket], None] | None = None,
        send_report: Callable[[Ticket], None] | None = None,
        send_rollout_evaluation: Callable[[ObjectKey], None] | None = None,
    ) -> None:
        self.runtime, self.layout = runtime, layout
        self._send_task = send_task or partial(celery_sender, shard=layout.tag)
        self._send_report = send_report or partial(celery_report_sender, shard=layout.tag)
        self._send_rollout = send_rollout_evaluation or celery_rollout_sender
        self._slots = WorkerSlots(runtime.queue, shares=layout.shards)
        self.worker_slots = self._slots.slots

    def bind(
        self,
        *,
        is_leader: Callable[[], bool],
        on_run_done: Callable[[], None],
        on_report_done: Callable[[], None],
    ) -> None:
        """The workers finish runs in their own processes: nothing here to wake or fence."""

    def reconcile(self, ticket: Ticket) -> None:
        self._send_task(ticket)

    def report(self, ticket: Ticket) -> None:
        self._send_report(ticket)

    def evaluate_rollout(self, key: ObjectKey) -> None:
        self._send_rollout(key)

    def capacity(self) -> int:
        return self._slots.free(self.runtime.queue)

    def report_room(self) -> tuple[int, int]:
        free = self._slots.window() - self.runtime.reports.dispatched_count()
        return free, self._slots.slots()

    def begin_term(self, watched: WatchedReads, leading: threading.Event) -> None:
        if self.layout.shard == 0:
            threading.Thread(
                target=retire_other_layouts,
                args=(self.runtime, self.layout, leading),
                name="retire",
                daemon=True,
            ).start()

    def stop(self) -> None:
        """Tasks already sent are the workers' (they finish or expire there)."""

    def reads_publisher(
        self,
        watched: WatchedReads,
        leading: threading.Event,
        lease_term: Callable[[], int | None],
    ) -> ReadsPublisher | None:
        """On Redis: the publisher of this term's watched reads for the workers; else None."""
        from ..queue.redis import RedisQueue  # scaled mode only: embedded never imports redis

        if not isinstance(self.runtime.queue, RedisQueue):
            return None  # a scaled leader over the memory queue (tests): workers read as before
        if self.layout.sharded:
            # One shard's watches see only its namespaces' workloads, and workers serve every
            # shard: they read the apiserver, as they do without a publisher.
            return None
        from ..published_reads import ReadsPublisher
        from ..queue.published import PublishedStore

        return ReadsPublisher(
            PublishedStore.beside(self.runtime.queue), watched, leading, lease_term=lease_term
        )


def executor_for(runtime: Runtime, layout: ShardLayout, *, scaled: bool) -> Executor:
    """The one place the running mode is decided (a Redis URL given: scaled)."""
    return CeleryExecutor(runtime, layout) if scaled else EmbeddedExecutor(runtime)


def _shard_kwargs(shard: str) -> dict[str, str]:
    """A sharded leader's tasks name its shard (S4.1.8); an unsharded one's carry nothing new,
    so a worker of an older release still takes them."""
    return {"shard": shard} if shard else {}


def celery_sender(ticket: Ticket, shard: str = "") -> None:
    """A reconcile task carrying only (namespace, name, uid) and the shard's tag."""
    from .. import tasks

    task = tasks.reconcile_full if ticket.forced_full else tasks.reconcile
    task.apply_async(
        args=list(ticket.key.as_args()),
        kwargs=_shard_kwargs(shard),
        priority=RECONCILE_PRIORITY[Priority(ticket.priority)],
    )


def celery_rollout_sender(key: ObjectKey) -> None:
    """A rollout-only evaluation task, again only (namespace, name, uid)."""
    from .. import tasks

    tasks.evaluate_rollout.apply_async(args=list(key.as_args()))


def celery_report_sender(ticket: Ticket, shard: str = "") -> None:
    """A status-report task (S7), again only (namespace, name, uid), sent at the broker's
    lowest priority: a worker takes every waiting reconcile before it (S7.4)."""
    from .. import tasks

    tasks.report_status.apply_async(
        args=list(ticket.key.as_args()), kwargs=_shard_kwargs(shard), priority=REPORT_PRIORITY
    )
