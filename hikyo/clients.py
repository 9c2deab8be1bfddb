"""Hikyo clients cached per HikyoInstance UID (S3.1); an instance's spec never changes (S1.1.1)."""

from __future__ import annotations

import threading
from typing import Any

from .client import HikyoClient


class ClientCache:
    def __init__(self, **client_options: Any) -> None:
        self._clients: dict[str, HikyoClient] = {}
        self._lock = threading.Lock()
        self._options = client_options

    def __call__(self, instance: dict[str, Any]) -> HikyoClient:
        """The client for ``instance``; raises InvalidBaseUrl / InvalidTrust (not cached)."""
        uid = instance["metadata"]["uid"]
        with self._lock:
            cached = self._clients.get(uid)
            if cached is None:
                spec = instance.get("spec") or {}
                cached = HikyoClient(spec.get("url", ""), spec.get("caBundle"), **self._options)
                self._clients[uid] = cached
            return cached

    def close(self) -> None:
        with self._lock:
            for cached in self._clients.values():
                cached.close()
            self._clients.clear()
