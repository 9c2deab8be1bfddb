"""One process's operator parts: Kubernetes client, keyed queue, Hikyo clients, recorder.

Built once at the edge (run_operator, the Celery worker, manage.py reconcile) from the typed
settings; reconciles get a fresh Engine whose Kubernetes writes are fenced by their lock.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from hikyo.clients import ClientCache
from k8s.client import api_client as build_api_client
from k8s.events import EventSink
from k8s.gateway import KubeCluster
from k8s.slim_api import CoreV1

from .engine.ports import CoordinationStore
from .engine.recent_reads import RecentReads
from .engine.reconcile import Engine, RunResult
from .engine.rendering import use_renderer
from .engine.settings import OperatorSettings
from .engine.stamp_root import RecentStampRoot
from .fencing import Fence, FencedCluster, FencedStore
from .keys import ObjectKey
from .queue.base import KeyedQueue
from .queue.lag import ScheduleLag
from .queue.orphans import incarnation, run_owner
from .render_pool import shared_pool
from .shards import ShardLayout, layout_of, layout_of_tag

QUEUE_PREFIX, REPORTS_PREFIX = "hikyo", "hikyo-reports"

Recorder = Callable[[RunResult, datetime, float], None]


def _no_recording(*args: Any) -> None:
    return None


_incarnation: str | None = None  # a Celery worker's name for this life (orphans.incarnation)


def name_this_worker(node_name: str) -> str:
    """A Celery worker's main process names its life once, before its pool forks: its slots
    are advertised under that name and its pool's runs own their locks under it."""
    global _incarnation
    if _incarnation is None:
        _incarnation = incarnation(node_name)
    return _incarnation


def worker_identity() -> str:
    if _incarnation is not None:
        return run_owner(_incarnation)
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class Runtime:
    settings: OperatorSettings
    cluster: KubeCluster
    queue: KeyedQueue
    reports: KeyedQueue = field(default_factory=lambda: build_queue(None))  # S7.4 cadence
    clients: ClientCache = field(default_factory=ClientCache)
    record: Recorder = _no_recording
    record_report: Callable[[Any], None] = _no_recording
    identity: str = field(default_factory=worker_identity)
    # Embedded mode also fences on the Lease (S4.1.4); workers only on their lock.
    leader_ok: Callable[[], bool] = lambda: True
    # This process's reuse windows (S6.3's stamp root, S7.1's reads), shared by every run.
    recent_root: RecentStampRoot = field(default_factory=lambda: RecentStampRoot(time.monotonic))
    recent_reads: RecentReads = field(default_factory=lambda: RecentReads(time.monotonic))
    # Sends a CR's report at once on this process's report threads (workers/report_threads.py),
    # with the runtime of its run, while the reads that run kept are fresh (S7.1 rev 3); False
    # when those threads are busy. None: reports go through the report queue only.
    hand_report: Callable[[Runtime, ObjectKey], bool] | None = None
    # How late the reconcile queue runs keys (workers/queue/lag.py): noted where keys are
    # taken, so only in the leader's process; a worker's stays 0.
    schedule_lag: ScheduleLag = field(default_factory=ScheduleLag)
    _shard_views: dict[str, Runtime] = field(default_factory=dict, init=False, repr=False)

    def engine(self, fence: Fence | None = None) -> Engine:
        cluster = self.cluster
        store: CoordinationStore = self.queue  # the queue backend is the coordination store
        if fence is not None:

            def fence_and_lease() -> str | None:
                # Each reason named apart: a lost Lease is not a lost lock.
                lost = fence()
                if lost is None and not self.leader_ok():
                    lost = "this process no longer holds the leader Lease"
                return lost

            cluster = FencedCluster(self.cluster, fence_and_lease)
            store = FencedStore(store, fence_and_lease)
        return Engine(
            cluster=cluster,
            store=store,
            settings=self.settings,
            client_for=self.clients,
            recent_root=self.recent_root,
            recent_reads=self.recent_reads,
        )

    def in_shard(self, tag: str) -> Runtime:
        """A worker's view for a task of the shard ``tag`` names (workers.shards): the same
        clients, windows and locks; that shard's scheduling. "" is the runtime itself."""
        if not tag:
            return self
        views = self._shard_views
        if tag not in views:
            layout = layout_of_tag(tag)  # a malformed tag fails here, before any run
            views[tag] = replace(
                self,
                queue=_in_shard(self.queue, QUEUE_PREFIX, layout),
                reports=_in_shard(self.reports, REPORTS_PREFIX, layout),
            )
        return views[tag]


def _in_shard(queue: KeyedQueue, prefix: str, layout: ShardLayout) -> KeyedQueue:
    from .queue.redis import RedisQueue  # sharding is scaled mode's, on Redis

    if not isinstance(queue, RedisQueue):
        raise ValueError(f"{layout} needs the scaled mode's Redis keyed queue")
    return queue.in_shard(layout.schedule_prefix(prefix))


def require_namespace(settings: OperatorSettings) -> None:
    if not settings.operator_namespace:
        raise ValueError(
            "HIKYO_OPERATOR_NAMESPACE (or POD_NAMESPACE) must name the operator's namespace"
        )


def build_queue(
    redis_url: str | None, prefix: str = QUEUE_PREFIX, layout: ShardLayout | None = None
) -> KeyedQueue:
    """Redis when configured (scaled mode), else in memory (embedded mode, S8.4)."""
    if redis_url:
        import redis

        from .queue.redis import RedisQueue

        # RedisQueue bounds every call (its socket timeouts); a pooled connection is checked
        # before reuse after 30 s idle, so one dropped by a Redis restart is not tried first.
        connection = redis.Redis.from_url(redis_url, health_check_interval=30)
        scheduling = (layout or ShardLayout()).schedule_prefix(prefix)
        return RedisQueue(connection, prefix=prefix, scheduling=scheduling)
    from .queue.memory import MemoryQueue

    return MemoryQueue()


def contain_templates() -> None:
    """S11.2 Containment: this process's template checks and renders run in renderer children
    under an operating-system budget, never in the interpreter that reconciles."""
    use_renderer(shared_pool())


def build_runtime(
    settings: OperatorSettings,
    *,
    kubeconfig: str | None = None,
    redis_url: str | None = None,
    record: Recorder = _no_recording,
    record_report: Callable[[Any], None] = _no_recording,
) -> Runtime:
    require_namespace(settings)
    contain_templates()
    layout = layout_of(settings)
    if layout.sharded and not redis_url:
        raise ValueError(
            f"HIKYO_OPERATOR_SHARDS={layout.shards} needs scaled mode (HIKYO_OPERATOR_REDIS_URL):"
            " an embedded operator is one shard"
        )
    queue = build_queue(redis_url, QUEUE_PREFIX, layout)
    api_client = build_api_client(kubeconfig)
    # S5.5.1: the event records live in the keyed-queue store, shared by every scaled worker.
    events = EventSink(CoreV1(api_client), records=queue)
    return Runtime(
        settings=settings,
        cluster=KubeCluster(api_client, events=events),
        queue=queue,
        reports=build_queue(redis_url, REPORTS_PREFIX, layout),
        record=record,
        record_report=record_report,
    )


def build_engine(settings: OperatorSettings, kubeconfig: str | None = None) -> Engine:
    """A stand-alone engine for one-off runs (manage.py reconcile): no queue, no fencing."""
    require_namespace(settings)
    contain_templates()
    return Engine(
        cluster=KubeCluster(build_api_client(kubeconfig)),
        store=build_queue(None),
        settings=settings,
        client_for=ClientCache(),
    )
