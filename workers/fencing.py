"""S4.1.4: before each Kubernetes write, ask whether this run may still write (its per-key lock
is held, it is within its 90 s deadline, and in embedded mode this process still leads);
otherwise abort without writing (the next run repairs, S4.9).

Which calls write is read off the engine's port: every method of ``ClusterWrites`` is fenced,
every method of ``ClusterReads`` passes straight through, and nothing else of the wrapped
cluster (its API clients, helpers) is reachable, so no write can get past the fence unlisted."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from k8s.errors import FenceLost

from .engine.ports import ClusterReads, write_methods

# The Cluster methods that write (those of ``ClusterWrites``): each call asks the fence first.
WRITES = write_methods()
# The Cluster methods that only read (those of ``ClusterReads``): passed straight through.
READS = frozenset(name for name in vars(ClusterReads) if not name.startswith("_"))

# Why a run may no longer write, or None when it may.
Fence = Callable[[], str | None]

log = logging.getLogger(__name__)


class FencedCluster:
    """A Cluster proxy whose writes first ask ``fence()``; a reason means abort unwritten."""

    def __init__(self, cluster: Any, fence: Fence) -> None:
        self._cluster = cluster
        self._fence = fence

    def __getattr__(self, name: str) -> Any:
        if name in READS:
            return getattr(self._cluster, name)
        if name not in WRITES:
            # Not on the port (a raw API client, a helper, a write missing from ClusterWrites):
            # refused rather than passed through unfenced.
            raise AttributeError(f"{name!r} is not a method of the engine's Cluster port")
        attribute = getattr(self._cluster, name)

        def fenced(*args: Any, **kwargs: Any) -> Any:
            lost = self._fence()
            if lost is not None:
                raise FenceLost(name, lost)
            return attribute(*args, **kwargs)

        return fenced


class FencedStore:
    """A CoordinationStore proxy whose S4.10.0 404 record is written only while the run may
    still write. A run abandoned at its deadline goes on in its thread while a newer run of
    the key may have read no record and delivered; a record written after that would let a
    later 404 skip its confirmation. Recording is rare (a first 404), so its one fence check
    costs little; a record not written is made by the next run that sees the 404 again."""

    def __init__(self, store: Any, fence: Fence) -> None:
        self._store = store
        self._fence = fence

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def record_not_found(self, cr_uid: str, binding: str, at: float) -> None:
        lost = self._fence()
        if lost is not None:
            log.info("the 404 for HikyoSecret uid %s is not recorded: %s", cr_uid, lost)
            return
        self._store.record_not_found(cr_uid, binding, at)
