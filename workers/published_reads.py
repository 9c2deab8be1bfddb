"""Scaled mode: the leader's watched reads, published for the workers (issue 13).

In embedded mode a reconcile asks the leader's watch caches for the HikyoInstance and the
namespace's opted-in workloads (k8s.watch_cache). A scaled worker has no watch, so it made
those four requests to the apiserver on every reconcile (the instance GET, and a LIST each of
Deployments, StatefulSets and DaemonSets) and one more instance GET per status report: 4 of
its 13.2 requests per CR at a cold start of 1,000.

The leader now publishes what its caches hold to the keyed-queue store (workers.queue
.published), and a worker's ``KubeCluster.watched`` is a ``PublishedReads`` over it:

- the instances, without what could hold a credential: a URL's userinfo (refused at fetch
  time, S3.1, so the worker still refuses it) and the annotations (kubectl's last-applied
  copy repeats the URL), since nothing secret belongs in the store (S0.4);
- per namespace, how many workloads opt in to some target. A worker lists the namespace's
  workloads only when that count is not 0; with none opted in, the list it would have made is
  empty (``resourceVersion=0`` lists are from the apiserver's watch cache anyway, a moment
  stale, k8s.gateway.KubeCluster.list_workloads). Stamps never leave the leader;
- per target (``namespace/name``), the UIDs of the CRs naming it: R7's candidates
  (k8s.watch_cache.TargetCache), names and UIDs only.

It is as fresh as the embedded caches: the leader's watch handler updates its cache, then
publishes, then lets the router enqueue (``k8s.watch_cache.chain``), so the run an event starts
reads what the event brought. Until every watch feeding a part has listed, once one stops, when
the leader steps down or cannot write to Redis, the part is withdrawn or expires
(``VIEW_TTL_SECONDS``) and the worker reads the apiserver as before.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from k8s.watch_cache import OnEvent, WatchedReads, target_key
from workers.engine.ports import Workload
from workers.engine.userinfo import without_userinfo

from .queue.published import PublishedStore

log = logging.getLogger(__name__)

INSTANCES = "instances"
WORKLOADS = "workloads"
CLAIMANTS = "claimants"
VIEW_TTL_SECONDS = 10.0  # a leader that stops refreshing stops vouching within this
REFRESH_EVERY_SECONDS = 2.0
TICK_SECONDS = 1.0
STORE_ERRORS = (redis.RedisError, OSError)


UNPUBLISHED_METADATA = frozenset({"managedFields", "annotations"})


def instance_text(instance: dict[str, Any] | None) -> str | None:
    """An instance as published: its JSON without ``managedFields`` and annotations (nobody
    reads them) and with any userinfo of ``spec.url`` replaced by a fixed word."""
    if instance is None:
        return None
    metadata = {
        k: v for k, v in instance.get("metadata", {}).items() if k not in UNPUBLISHED_METADATA
    }
    published = {**instance, "metadata": metadata}
    spec = instance.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("url"), str):
        published["spec"] = {**spec, "url": without_userinfo(spec["url"])}
    return json.dumps(published, separators=(",", ":"))


def claimants_text(uids: tuple[str, ...]) -> str | None:
    """A target's claimants as published: their UIDs, sorted, comma-separated; none is absent."""
    return ",".join(uids) or None


def count_text(count: int) -> str | None:
    """A namespace's opted-in workload count as published; a namespace with none is absent."""
    return str(count) if count > 0 else None


@dataclass
class _Part:
    """One published part: where its fields come from and the token it is published under."""

    name: str
    ready: Callable[[], bool]
    snapshot: Callable[[], dict[str, str]]
    current: Callable[[str], str | None]
    token: str | None = None
    dirty: bool = False  # an event may be missing from the published hash: write it anew
    refreshed_at: float = 0.0


class ReadsPublisher(threading.Thread):
    """The leader's publisher for one term: event handlers to chain after the caches, and a
    thread that publishes, refreshes and withdraws each part."""

    def __init__(
        self,
        store: PublishedStore,
        reads: WatchedReads,
        stop: threading.Event,
        *,
        ttl: float = VIEW_TTL_SECONDS,
        refresh_every: float = REFRESH_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        new_token: Callable[[], str] = lambda: secrets.token_hex(8),
        lease_term: Callable[[], int | None] = lambda: None,
    ) -> None:
        super().__init__(name="published-reads", daemon=True)
        self.store, self.stop_event = store, stop
        self.ttl, self.refresh_every = ttl, refresh_every
        self.clock, self.new_token, self.lease_term = clock, new_token, lease_term
        instances, workloads, claimants = reads.instances, reads.workloads, reads.claimants
        self.instances = _Part(
            INSTANCES,
            instances.ready,
            lambda: {name: instance_text(obj) or "" for name, obj in instances.snapshot().items()},
            lambda name: instance_text(instances.current(name)),
        )
        self.workloads = _Part(
            WORKLOADS,
            workloads.ready,
            lambda: {ns: str(count) for ns, count in workloads.opted_in_counts().items()},
            lambda namespace: count_text(workloads.opted_in_count(namespace)),
        )
        self.claimants = _Part(
            CLAIMANTS,
            claimants.ready,
            lambda: {key: claimants_text(uids) or "" for key, uids in claimants.snapshot().items()},
            lambda key: claimants_text(claimants.claimants(key)),
        )
        self._lock = threading.Lock()  # events and the thread write the same parts
        self._failing: str | None = None  # the error type while Redis refuses, said once
        # This term's number (workers.queue.published), taken at the first publication: the
        # leader Lease's leaseTransitions when ``lease_term`` knows it, else Redis's counter.
        self.term: int | None = None
        self._outranked = False  # a newer term's leader publishes: said once
        self.parts = (self.instances, self.workloads, self.claimants)
        # Called only when a CR's target changes (most CR events are status writes).
        claimants.listen(self._claimants_changed)

    # -- the watch side ------------------------------------------------------------------

    def handler(self, feeds: str) -> OnEvent:
        """The handler for a watch that ``feeds`` INSTANCES (WatchedReads.INSTANCES),
        CLAIMANTS or a workload kind; chained after the cache's own handler, before the
        router's. The claimants cache calls the publisher itself (``TargetCache.listen``)."""
        if feeds == WatchedReads.CLAIMANTS:
            return lambda kind, obj, initial: None
        if feeds == WatchedReads.INSTANCES:
            return lambda kind, obj, initial: self.changed(self.instances, obj["metadata"]["name"])
        return lambda kind, obj, initial: self.changed(
            self.workloads, obj["metadata"].get("namespace", "")
        )

    def _claimants_changed(self, keys: tuple[str, ...]) -> None:
        part = self.claimants
        if not part.ready():
            # A relist's page: published alone, a new CR could be seen before an older one of
            # a later page. No write until the tick withdraws the part and, the list done,
            # writes it whole; meanwhile workers read the hash as it was before the relist.
            with self._lock:
                part.dirty = True
            return
        for key in keys:
            self.changed(part, key)

    def changed(self, part: _Part, field: str) -> None:
        """Publish ``field`` as the cache holds it now (so events from several watches, in any
        order, leave the last state); a part not published yet takes it in its snapshot."""
        with self._lock:
            if part.token is None or part.dirty or self.stop_event.is_set():
                return
            try:
                written = self.store.put(part.name, part.token, field, part.current(field))
            except STORE_ERRORS as error:
                self._fault(error)
                written = False
            if not written:
                part.dirty = True  # the thread writes the whole part again at its next tick

    # -- the thread ----------------------------------------------------------------------

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.tick()
            self.stop_event.wait(TICK_SECONDS)
        self.withdraw()

    def tick(self) -> None:
        for part in self.parts:
            with self._lock:
                try:
                    asked = self._keep(part)
                except STORE_ERRORS as error:
                    self._fault(error)
                    part.dirty = True
                else:
                    if asked:  # a part that asked nothing cannot tell that Redis is back
                        self._recovered()

    def _keep(self, part: _Part) -> bool:
        """Publishes, refreshes or withdraws ``part`` as due; True when it asked the store."""
        if self.stop_event.is_set() or not part.ready():  # nor may the workers' reads
            if part.token is None:
                return False
            self.store.withdraw(part.name, part.token)
            part.token = None
            return True
        now = self.clock()
        if part.token is not None and not part.dirty:
            if now - part.refreshed_at < self.refresh_every:
                return False
            if self.store.refresh(part.name, part.token, self.ttl):
                part.refreshed_at = now
                return True
            # the pointer names another token (another leader, a store restarted empty)
        if self.term is None:
            lease_term = self.lease_term()
            self.term = self.store.next_term() if lease_term is None else lease_term
        old, token = part.token, f"{self.term}.{self.new_token()}"
        fields = part.snapshot()
        written = self.store.replace(part.name, token, fields, self.ttl)
        if old is not None:
            self.store.withdraw(part.name, old)  # its hash, now no reader's
        if not written:
            # A newer term's leader publishes it (a Lease handover this process has not seen
            # yet): never taken back from it; tried again each tick until this term ends.
            part.token, part.dirty = None, True
            if not self._outranked:
                log.info("a newer leader publishes the watched reads; leaving them to it")
            self._outranked = True
            return True
        part.token, part.dirty, part.refreshed_at = token, False, now
        log.info("published the watched %s for the workers (%d entries)", part.name, len(fields))
        return True

    def withdraw(self) -> None:
        """At the end of the term (the stop event set first): workers read the apiserver
        again at once, and no tick in progress publishes after this."""
        with self._lock:
            for part in self.parts:
                if part.token is None:
                    continue
                try:
                    self.store.withdraw(part.name, part.token)
                except STORE_ERRORS as error:  # it expires on the server within the TTL
                    self._fault(error)
                part.token = None

    def _fault(self, error: BaseException) -> None:
        # the type only: a Redis error's text can hold the URL (and its password)
        kind = type(error).__name__
        if self._failing != kind:
            log.warning(
                "watched reads not published to the keyed-queue store (%s): workers read the "
                "apiserver until they are again",
                kind,
            )
        self._failing = kind

    def _recovered(self) -> None:
        if self._failing is not None:
            log.info("watched reads published to the keyed-queue store again")
            self._failing = None


class _PublishedInstances:
    def __init__(self, store: PublishedStore) -> None:
        self.store = store

    def lookup(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        try:
            known, text = self.store.read(INSTANCES, name)
            return known, None if text is None else json.loads(text)
        except (*STORE_ERRORS, ValueError) as error:
            log.debug(
                "published instance not read (%s): reading the apiserver", type(error).__name__
            )
            return False, None


class _PublishedWorkloads:
    def __init__(self, store: PublishedStore) -> None:
        self.store = store

    def lookup(self, namespace: str) -> list[Workload] | None:
        try:
            known, count = self.store.read(WORKLOADS, namespace)
        except STORE_ERRORS as error:
            log.debug("published workloads not read (%s): listing them", type(error).__name__)
            return None
        # none opted in: the list is empty; some: list them (stamps are never published)
        return [] if known and count is None else None


class _PublishedClaimants:
    def __init__(self, store: PublishedStore) -> None:
        self.store = store

    def lookup(self, namespace: str, target: str) -> tuple[str, ...] | None:
        try:
            known, text = self.store.read(CLAIMANTS, target_key(namespace, target))
        except STORE_ERRORS as error:
            log.debug("published claimants not read (%s): listing them", type(error).__name__)
            return None
        if not known:
            return None
        return tuple(text.split(",")) if text else ()


class PublishedReads:
    """A scaled worker's ``KubeCluster.watched`` (k8s.watch_cache.ServedReads)."""

    def __init__(self, store: PublishedStore) -> None:
        self.instances = _PublishedInstances(store)
        self.workloads = _PublishedWorkloads(store)
        self.claimants = _PublishedClaimants(store)
