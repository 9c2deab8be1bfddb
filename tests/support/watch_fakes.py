"""What the watch caches' tests feed them (k8s.watch_cache, workers.published_reads)."""

from __future__ import annotations

import threading
from typing import Any


class FakeWatcher:
    """A watch as the caches see it: whether its first list is complete, whether it runs."""

    def __init__(self, *, synced: bool = True, alive: bool = True) -> None:
        self.synced = threading.Event()
        if synced:
            self.synced.set()
        self.alive = alive
        self.listing = False

    def is_alive(self) -> bool:
        return self.alive


def instance_object(name: str, uid: str = "i-1", **metadata: Any) -> dict[str, Any]:
    """A HikyoInstance as a watch delivers it."""
    return {
        "apiVersion": "hikyo.dev/v1alpha1",
        "kind": "HikyoInstance",
        "metadata": {"name": name, "uid": uid, **metadata},
        "spec": {"url": "https://hikyo.example", "audience": "hikyo"},
    }


def hikyosecret_object(name: str, uid: str, target: str, namespace: str = "team") -> dict[str, Any]:
    """A HikyoSecret as a watch delivers it, with what the claimant index reads."""
    return {
        "apiVersion": "hikyo.dev/v1alpha1",
        "kind": "HikyoSecret",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"target": {"name": target}},
    }
