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
TURN_WAIT_SECONDS = 30.0  # the longest a run waits for another run creating the root


class RecentStampRoot:
    """S6.3 rev 3: one process may reuse an uncached read of the root for at most 60 s (it
    changes only by deletion and re-creation; at 1,000 CRs the per-run read was one apiserver
    request in nine). Only a root that was there is kept: an absent one is read again on every
    run, so whether to create it stays R12's decision over a fresh read.

    While nothing is kept, one run of the process reads at a time, and a run that finds the
    root absent holds that turn until it has created the root (``keep``) or its run ends
    (``finish``): the others then reuse the root it made instead of each listing every CR for
    S6.3's check and losing the create to it (a fresh install at 1,000 CRs ran 3 CRs twice).
    A run waits at most ``wait`` seconds for the turn, then reads as if alone.
    """

    def __init__(
        self,
        timer: Callable[[], float],
        window: float = ROOT_REUSE_SECONDS,
        wait: float = TURN_WAIT_SECONDS,
    ) -> None:
        self._timer, self._window, self._wait = timer, window, wait
        self._lock = threading.Lock()
        self._kept: tuple[SecretObject, float] | None = None
        self._turn = threading.Lock()
        self._holder = threading.local()  # .turn: this thread's run holds the turn

    def read(self, read_uncached: Callable[[], SecretObject | None]) -> SecretObject | None:
        now = self._timer()
        kept = self._reusable(now)
        if kept is not None:
            return kept
        mine = self._holds_turn()
        if not mine:
            mine = self._turn.acquire(timeout=self._wait)
            if mine:
                self._holder.turn = True
            kept = self._reusable(self._timer())  # what the run before us kept or created
            if kept is not None:
                self.finish()
                return kept
        try:
            root = read_uncached()
        except BaseException:
            self.finish()
            raise
        with self._lock:
            self._kept = None if root is None else (root, now)
        if root is not None:
            self.finish()
        return root

    def keep(self, root: SecretObject) -> None:
        """The root this run just created (its write's answer is the read, S4.8.4 rev 3); the
        runs waiting for it go on with it."""
        with self._lock:
            self._kept = (root, self._timer())
        self.finish()

    def finish(self) -> None:
        """A run's end: the turn its thread still holds goes to the next run."""
        if self._holds_turn():
            self._holder.turn = False
            self._turn.release()

    def _holds_turn(self) -> bool:
        return bool(getattr(self._holder, "turn", False))

    def _reusable(self, now: float) -> SecretObject | None:
        with self._lock:
            if self._kept is not None and now - self._kept[1] < self._window:
                return self._kept[0]
        return None


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
