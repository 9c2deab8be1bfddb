"""S4.1.4: before each Kubernetes write, ask whether this run may still write (its per-key lock
is held, it is within its 90 s deadline, and in embedded mode this process still leads);
otherwise abort without writing (the next run repairs, S4.9).

Which calls write is read off the engine's port: every method of ``ClusterWrites`` is fenced,
every method of ``ClusterReads`` passes straight through, and nothing else of the wrapped
cluster (its API clients, helpers) is reachable, so no write can get past the fence unlisted."""

from __future__ import annotations

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
