"""S4.1.4: before each Kubernetes write, ask whether this run may still write (its per-key lock
is held, it is within its 90 s deadline, and in embedded mode this process still leads);
otherwise abort without writing (the next run repairs, S4.9)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k8s.errors import FenceLost

# The Cluster methods that write; reads pass straight through.
WRITES = frozenset(
    {
        "create_secret",
        "replace_secret",
        "delete_secret",
        "patch_hikyosecret_finalizers",
        "patch_hikyosecret_status",
        "emit_event",
        "patch_workload_stamp",
    }
)

# Why a run may no longer write, or None when it may.
Fence = Callable[[], str | None]


class FencedCluster:
    """A Cluster proxy whose writes first ask ``fence()``; a reason means abort unwritten."""

    def __init__(self, cluster: Any, fence: Fence) -> None:
        self._cluster = cluster
        self._fence = fence

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._cluster, name)
        if name not in WRITES:
            return attribute

        def fenced(*args: Any, **kwargs: Any) -> Any:
            lost = self._fence()
            if lost is not None:
                raise FenceLost(name, lost)
            return attribute(*args, **kwargs)

        return fenced
