"""S4.1.4: before each Kubernetes write, check that this run still holds its per-key lock and
is within its 90 s deadline; otherwise abort without writing (the next run repairs, S4.9)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from k8s.errors import FenceLost

DEADLINE_SECONDS = 90.0

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


class FencedCluster:
    """A Cluster proxy whose writes first ask ``still_held()`` and check the deadline."""

    def __init__(
        self,
        cluster: Any,
        still_held: Callable[[], bool],
        deadline_seconds: float = DEADLINE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cluster = cluster
        self._still_held = still_held
        self._clock = clock
        self._deadline = clock() + deadline_seconds

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._cluster, name)
        if name not in WRITES:
            return attribute

        def fenced(*args: Any, **kwargs: Any) -> Any:
            if self._clock() > self._deadline:
                raise FenceLost(name, "reconcile deadline of 90 s passed")
            if not self._still_held():
                raise FenceLost(name, "per-key lock no longer held")
            return attribute(*args, **kwargs)

        return fenced
