"""What the leader's watches already hold, served to its own reconciles (issue 13).

The embedded operator watches HikyoInstances and, with triggerRollouts, the workloads. Each
reconcile also read them again: one GET of the instance (R5, and once more per status report)
and three workload lists. Those reads may be served from the watch:

- a HikyoInstance's spec is immutable (S1.1.1); a deletion or a recreation reaches the cache
  before the router re-enqueues the CRs that name it (the cache is fed first), so a reconcile
  started by that event never sees the old object;
- the workload lists were already served from the apiserver's watch cache
  (``resourceVersion=0``, k8s.gateway.KubeCluster.list_workloads); this cache holds the same
  reduced records (k8s.workloads.workload_from), opted-in workloads only, nothing else.

- which CRs name each target (R7's candidates, the index S4.2 describes for older clusters):
  a CR that is the only one the index holds for its target skips R7's list, on every
  Kubernetes version (issue 37: at 2,000 CRs a namespace that list was 40 % of the apiserver's
  CPU in an unchanged resync, and one of 7 requests of a first sync). A contested target, a
  CR the index does not hold yet, or an index between a relist's pages still lists
  (workers.engine.observe).

The uncached reads the spec demands (the CR, the credential, the target, the stamp root, the
read-back) are not served here; the same-target list, when made, is the apiserver's at least
as new as the CR's own read (k8s.gateway.KubeCluster.list_hikyosecrets_for_target).
Until every watch feeding a cache has finished its first list, or once one of them stopped,
the cache answers "not known" and the caller makes the request as before.

A scaled worker has no watch: the leader publishes what these caches hold to the keyed-queue
store (workers.published_reads), and the worker's ``KubeCluster.watched`` reads it from there
through the same two lookups (``ServedReads``).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any, Protocol

from workers.engine.ports import Workload

from .workloads import workload_from

OnEvent = Callable[[str, dict[str, Any], bool], None]


class InstanceLookup(Protocol):
    def lookup(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(known, the instance or None when it does not exist); (False, None) when the
        answer cannot be vouched for and the caller must read the apiserver."""
        ...


class WorkloadLookup(Protocol):
    def lookup(self, namespace: str) -> list[Workload] | None:
        """The namespace's opted-in workloads; None when the caller must list them."""
        ...


class ClaimantLookup(Protocol):
    def lookup(self, namespace: str, target: str) -> tuple[str, ...] | None:
        """The UIDs of the CRs naming ``target`` in ``namespace``, sorted; None when the
        answer cannot be vouched for."""
        ...


class ServedReads(Protocol):
    """What ``KubeCluster`` asks before it reads the apiserver (k8s.gateway)."""

    instances: InstanceLookup
    workloads: WorkloadLookup
    claimants: ClaimantLookup


class _Fed(Protocol):
    """A watch as the cache sees it: whether its first list is complete, whether it runs."""

    synced: threading.Event
    listing: bool  # a list's pages are being handed out (k8s.watch.Watcher)

    def is_alive(self) -> bool: ...


class _Feeds:
    """The watches whose events fill one cache; the cache is usable while all of them are."""

    def __init__(self) -> None:
        self._watchers: list[_Fed] = []

    def add(self, watcher: _Fed) -> None:
        self._watchers.append(watcher)

    def ready(self) -> bool:
        watchers = self._watchers
        return bool(watchers) and all(w.synced.is_set() and w.is_alive() for w in watchers)

    def in_creation_order(self) -> bool:
        """Ready, and no watch is between a list's pages: every event so far came in
        resourceVersion order (a list's items come in name order)."""
        return self.ready() and not any(w.listing for w in self._watchers)


class InstanceCache:
    """HikyoInstances by name, from the instance watch."""

    def __init__(self) -> None:
        self.feeds = _Feeds()
        self._lock = threading.Lock()
        self._by_name: dict[str, dict[str, Any]] = {}

    def on_event(self, kind: str, obj: dict[str, Any], initial: bool) -> None:
        name = obj["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self._by_name.pop(name, None)
            else:
                self._by_name[name] = obj

    def lookup(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(known, the instance or None when it does not exist); (False, None) while the
        watch cannot vouch for the answer. A copy: callers may keep and change it."""
        if not self.feeds.ready():
            return False, None
        with self._lock:
            found = self._by_name.get(name)
        return True, copy.deepcopy(found) if found is not None else None

    def ready(self) -> bool:
        return self.feeds.ready()

    def current(self, name: str) -> dict[str, Any] | None:
        """The instance as the watch last saw it, ready or not (the publisher checks first)."""
        with self._lock:
            return self._by_name.get(name)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._by_name)


class WorkloadCache:
    """Opted-in Deployments, StatefulSets and DaemonSets per namespace, reduced as the
    workload list reduces them."""

    def __init__(self) -> None:
        self.feeds = _Feeds()
        self._lock = threading.Lock()
        # namespace -> uid -> the reduced record; an object that stops opting in is dropped
        self._by_namespace: dict[str, dict[str, Workload]] = {}

    def feed(self, kind: str) -> OnEvent:
        """The event handler for the watch of one workload ``kind`` (ports.DEPLOYMENT ...)."""

        def on_event(event: str, obj: dict[str, Any], initial: bool) -> None:
            metadata = obj["metadata"]
            namespace, uid = metadata.get("namespace", ""), metadata["uid"]
            workload = None if event == "DELETED" else workload_from(kind, obj)
            with self._lock:
                known = self._by_namespace.setdefault(namespace, {})
                if workload is None:
                    known.pop(uid, None)
                    if not known:
                        del self._by_namespace[namespace]
                else:
                    known[uid] = workload

        return on_event

    def lookup(self, namespace: str) -> list[Workload] | None:
        """The namespace's opted-in workloads, or None while the watches cannot vouch."""
        if not self.feeds.ready():
            return None
        with self._lock:
            return list((self._by_namespace.get(namespace) or {}).values())

    def ready(self) -> bool:
        return self.feeds.ready()

    def opted_in_count(self, namespace: str) -> int:
        """How many workloads in ``namespace`` opt in to some target, ready or not."""
        with self._lock:
            return len(self._by_namespace.get(namespace) or {})

    def opted_in_counts(self) -> dict[str, int]:
        """Every namespace with an opted-in workload, with how many."""
        with self._lock:
            return {namespace: len(known) for namespace, known in self._by_namespace.items()}


def target_key(namespace: str, target: str) -> str:
    """One target's key in the index and as published: neither name can hold a "/"."""
    return f"{namespace}/{target}"


def _named_target(obj: dict[str, Any]) -> str | None:
    spec = obj.get("spec")
    target = spec.get("target") if isinstance(spec, dict) else None
    name = target.get("name") if isinstance(target, dict) else None
    if not isinstance(name, str) or not name:
        return None
    return target_key(obj["metadata"].get("namespace", ""), name)


class TargetCache:
    """HikyoSecrets by the target they name, from the CR watch: for each (namespace,
    ``spec.target.name``) the UIDs naming it. A DELETED event (a relist's too) is matched by
    UID, since it may carry no spec."""

    def __init__(self) -> None:
        self.feeds = _Feeds()
        self._lock = threading.Lock()
        self._key_of: dict[str, str] = {}  # uid -> target_key
        # target_key -> its uids, sorted: a tuple, as most hold one (a set of one is 4x larger)
        self._uids_of: dict[str, tuple[str, ...]] = {}
        self._listeners: list[Callable[[tuple[str, ...]], None]] = []

    def listen(self, changed: Callable[[tuple[str, ...]], None]) -> None:
        """``changed`` gets the target keys whose claimants an event changed (the publisher),
        after the index holds them and before the next handler of the chain runs."""
        self._listeners.append(changed)

    def on_event(self, kind: str, obj: dict[str, Any], initial: bool) -> None:
        uid = obj["metadata"]["uid"]
        key = None if kind == "DELETED" else _named_target(obj)
        with self._lock:
            old = self._key_of.get(uid)
            if old == key:
                return  # most events: a status write, the target unchanged
            if old is not None:
                del self._key_of[uid]
                left = tuple(u for u in self._uids_of[old] if u != uid)
                if left:
                    self._uids_of[old] = left
                else:
                    del self._uids_of[old]
            if key is not None:
                self._key_of[uid] = key
                self._uids_of[key] = tuple(sorted((*self._uids_of.get(key, ()), uid)))
        changed = tuple(k for k in (old, key) if k is not None)
        for listener in self._listeners:
            listener(changed)

    def lookup(self, namespace: str, target: str) -> tuple[str, ...] | None:
        if not self.ready():
            return None
        return self.claimants(target_key(namespace, target))

    def ready(self) -> bool:
        """Answers only while the index holds the CRs in the order they were created (R7's
        use of it rests on that, workers.engine.observe): not before the first list ends,
        nor while a relist hands out its pages."""
        return self.feeds.in_creation_order()

    def claimants(self, key: str) -> tuple[str, ...]:
        """The UIDs naming the target ``key``, sorted, ready or not (the publisher checks)."""
        with self._lock:
            return self._uids_of.get(key, ())

    def snapshot(self) -> dict[str, tuple[str, ...]]:
        with self._lock:
            return dict(self._uids_of)


def chain(*handlers: OnEvent) -> OnEvent:
    """One watch handler calling each of ``handlers`` in order (the cache before the router)."""

    def on_event(kind: str, obj: dict[str, Any], initial: bool) -> None:
        for handler in handlers:
            handler(kind, obj, initial)

    return on_event


class WatchedReads:
    """The caches one leadership term's watches fill; KubeCluster asks them first."""

    INSTANCES = "instances"  # what the instance watch feeds; workload watches name their kind
    CLAIMANTS = "claimants"  # what the CR watches feed

    def __init__(self) -> None:
        self.instances = InstanceCache()
        self.workloads = WorkloadCache()
        self.claimants = TargetCache()

    def handler(self, feeds: str) -> OnEvent:
        """The cache's handler for a watch that ``feeds`` INSTANCES, CLAIMANTS or a workload
        kind."""
        if feeds == self.INSTANCES:
            return self.instances.on_event
        if feeds == self.CLAIMANTS:
            return self.claimants.on_event
        return self.workloads.feed(feeds)

    def fed_by(self, feeds: str, watcher: _Fed) -> None:
        """The cache answers only while ``watcher`` (and the others feeding it) is synced."""
        caches = {self.INSTANCES: self.instances, self.CLAIMANTS: self.claimants}
        caches.get(feeds, self.workloads).feeds.add(watcher)
