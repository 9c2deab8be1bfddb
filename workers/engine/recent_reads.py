"""S7.1 rev 3: a status report that follows its own reconcile may use that reconcile's
uncached reads of the CR and its credential, when it runs in the same process at most 30 s
later (at 5,000 CRs the re-reads were two apiserver requests per CR of 11.5).

Kept in this process's memory only, like any credential a run holds (S0.4): never in the
store. The CR kept is the one the reconcile left (its status as written), so a report never
describes an older status than a fresh read would; each entry is used once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

REUSE_SECONDS = 30.0
MAX_KEPT = 10_000  # a report backlog longer than this reads again, as it did before rev 3


def without_managed_fields(cr: dict[str, Any]) -> dict[str, Any]:
    """The CR a report may reuse, less ``metadata.managedFields`` (no report reads them, and
    they are most of a CR's size)."""
    metadata = cr.get("metadata")
    if not isinstance(metadata, dict) or "managedFields" not in metadata:
        return cr
    return {**cr, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


@dataclass(frozen=True)
class ReconcileReads:
    cr: dict[str, Any] = field(repr=False)
    token: str = field(repr=False)
    at: float = 0.0
    # The HikyoInstance the reconcile used and its spec's org: the report reads that
    # instance's notes with its own in one round trip (issue 37).
    instance: dict[str, Any] | None = field(default=None, repr=False)
    org: str = ""


class RecentReads:
    def __init__(self, timer: Callable[[], float], window: float = REUSE_SECONDS) -> None:
        self._timer, self._window = timer, window
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, ReconcileReads] = OrderedDict()

    def keep(
        self,
        uid: str,
        cr: dict[str, Any],
        token: str,
        instance: dict[str, Any] | None = None,
        org: str = "",
    ) -> None:
        now = self._timer()
        with self._lock:
            self._kept.pop(uid, None)
            self._kept[uid] = ReconcileReads(cr, token, now, instance, org)
            while self._kept and (
                len(self._kept) > MAX_KEPT
                or now - next(iter(self._kept.values())).at >= self._window
            ):
                self._kept.popitem(last=False)  # the oldest first: entries are kept in time order

    def take(self, uid: str) -> ReconcileReads | None:
        """The reads of ``uid``'s last reconcile when still fresh; each is handed out once."""
        with self._lock:
            kept = self._kept.pop(uid, None)
        if kept is None or self._timer() - kept.at >= self._window:
            return None
        return kept
