"""The stamp root (S6.3): the 32 random bytes every stamp key derives from.

Read uncached before every fetch (``observe``), except that a process reuses a read for up to
``ROOT_REUSE_SECONDS`` (``RecentStampRoot``, rev 3); created only when no CR holds a stamp yet (a
fresh install) or on explicit opt-in, since a new root restarts every opted-in workload once
(``decide``, R12); never replaced when its length is wrong.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .ports import SecretObject

STAMP_ROOT_SECRET = "hikyo-operator-stamp-root"
STAMP_ROOT_KEY = "root"
ROOT_REUSE_SECONDS = 60.0  # S6.3 rev 3


class RecentStampRoot:
    """S6.3 rev 3: one process may reuse an uncached read of the root for at most 60 s (it
    changes only by deletion and re-creation; at 1,000 CRs the per-run read was one apiserver
    request in nine). Only a root that was there is kept: an absent one is read again on every
    run, so whether to create it stays R12's decision over a fresh read."""

    def __init__(self, timer: Callable[[], float], window: float = ROOT_REUSE_SECONDS) -> None:
        self._timer, self._window = timer, window
        self._lock = threading.Lock()
        self._kept: tuple[SecretObject, float] | None = None

    def read(self, read_uncached: Callable[[], SecretObject | None]) -> SecretObject | None:
        now = self._timer()
        with self._lock:
            if self._kept is not None and now - self._kept[1] < self._window:
                return self._kept[0]
        root = read_uncached()
        with self._lock:
            self._kept = None if root is None else (root, now)
        return root


def stamped_in_reach(crs: Iterable[Mapping[str, Any]], operator_namespace: str) -> list[str]:
    """S6.3: "namespace/name" of the listed CRs (already limited to the watch list) whose
    recorded stamp a new root would invalidate.

    Left out: CRs in the operator namespace, which are never reconciled (S8.5), and CRs whose
    status another operator wrote (S4.1.7): their stamps come from that operator's root, so
    ours being absent loses nothing; taking such a CR over restarts its workloads once anyway.
    """
    found = []
    for cr in crs:
        metadata, status = cr.get("metadata") or {}, cr.get("status") or {}
        if not status.get("stamp") or metadata.get("namespace") == operator_namespace:
            continue
        if status.get("operatorNamespace") not in (None, "", operator_namespace):
            continue
        found.append(f"{metadata.get('namespace')}/{metadata.get('name')}")
    return found
