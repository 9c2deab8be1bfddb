"""Scaled mode: how many handed-out keys may wait in the Celery broker at once.

The broker runs its messages in the order they were sent (within a priority step), so a key
sent early is run early whatever comes due later. Were every due key sent at once, a spec edit
(a first sync) would queue behind a backlog of resyncs already in the broker, against S4.1.6
("whenever both are due, first syncs run before resyncs"), and at thousands of CRs a cold
start's messages would outwait the stale check and be sent twice (S8.4). So the leader keeps
only a window of keys handed out (in the broker or running): every worker slot busy plus a
spare round of messages, so no slot idles between two dispatcher rounds; the rest stays in the
keyed queue, where the order is kept. Within the window, each task's broker priority
(``RECONCILE_PRIORITY`` in workers/operator_process.py) puts first syncs ahead of resyncs.

Workers say how many tasks they run at once (``SlotAdvertiser``, from each worker's main
process); the leader adds up the live ones (``WorkerSlots``). A worker that stops saying so
drops out after ``SLOTS_TTL_SECONDS`` and counts as dead: the keys it held are handed out again
(workers/queue/orphans.py). With no live worker, the window is the spare round alone, so a
worker of an older release (which does not advertise) is still served.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .queue.base import KeyedQueue

log = logging.getLogger(__name__)

SPARE_MIN = 32  # messages beyond the busy slots: more than a 0.2 s dispatcher tick drains
ADVERTISE_EVERY_SECONDS = 10.0
SLOTS_TTL_SECONDS = 30.0  # three missed advertisements: the worker is gone
SLOTS_READ_EVERY_SECONDS = 5.0


def window(slots: int, shares: int = 1) -> int:
    """Keys that may be handed out at once for ``slots`` live worker slots; split between
    ``shares`` shard leaders (S4.1.8), who share the workers, each its part rounded up."""
    whole = max(slots, 0) + max(slots, SPARE_MIN)
    return -(-whole // max(shares, 1))


class WorkerSlots:
    """The leader's view of the live worker slots, read from the store at most every few
    seconds (the dispatcher asks five times a second)."""

    def __init__(
        self,
        store: KeyedQueue,
        *,
        read_every: float = SLOTS_READ_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        shares: int = 1,
    ) -> None:
        self.store, self.read_every, self.clock = store, read_every, clock
        self.shares = shares  # shard leaders sharing these workers (S4.1.8)
        self._read_at: float | None = None
        self._live: tuple[int, int] | None = None
        self._lock = threading.Lock()  # both dispatchers and the /metrics scrape ask

    def slots(self) -> int:
        with self._lock:
            now = self.clock()
            if self._read_at is None or now - self._read_at >= self.read_every:
                live = self.store.live_slots()  # a store error reaches the caller, who says so
                self._read_at = now
                if live != self._live:
                    self._say(live)
                self._live = live
            assert self._live is not None
            return self._live[1]

    def free(self, queue: KeyedQueue) -> int:
        """How many more of ``queue``'s due keys may be handed out now."""
        return self.window() - queue.dispatched_count()

    def window(self) -> int:
        """This leader's part of the window (all of it unsharded)."""
        return window(self.slots(), self.shares)

    def _say(self, live: tuple[int, int]) -> None:
        workers, slots = live
        if workers:
            log.info(
                "%d Celery workers run %d tasks at once: up to %d keys handed out at a time",
                workers,
                slots,
                window(slots),
            )
        else:
            log.warning(
                "no Celery worker has advertised its slots in the last %.0f s: up to %d keys "
                "handed out at a time (are the workers running?)",
                SLOTS_TTL_SECONDS,
                window(0),
            )


class SlotAdvertiser(threading.Thread):
    """A worker's main process: "``worker`` runs ``slots`` tasks at once", every
    ``ADVERTISE_EVERY_SECONDS`` while it lives, withdrawn when it stops."""

    def __init__(
        self,
        store: KeyedQueue,
        worker: str,
        slots: int,
        *,
        every: float = ADVERTISE_EVERY_SECONDS,
        ttl: float = SLOTS_TTL_SECONDS,
    ) -> None:
        super().__init__(name="slot-advertiser", daemon=True)
        self.store, self.worker, self.slots = store, worker, slots
        self.every, self.ttl = every, ttl
        self.stop_event = threading.Event()
        self.advertised = 0  # rounds that reached the store (tests wait on it)
        self.withdrawn = False
        self._failing: str | None = None

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.advertise_once()
            self.stop_event.wait(self.every)

    def advertise_once(self) -> None:
        try:
            self.store.advertise_slots(self.worker, self.slots, self.ttl)
        except Exception as error:  # Redis away: say so once, try again next round
            described = type(error).__name__
            if described != self._failing:
                log.warning("cannot advertise this worker's slots (%s); retrying", described)
            self._failing = described
            return
        if self._failing is not None:
            log.info("advertising this worker's slots again")
            self._failing = None
        self.advertised += 1

    def drain(self) -> None:
        """From now on: no slots, but still alive (its running tasks hold their keys)."""
        self.slots = 0
        self.advertise_once()

    def stop(self) -> None:
        """Stops advertising and withdraws the slots; once is enough."""
        if self.withdrawn:
            return
        self.stop_event.set()
        if self.is_alive():
            self.join(timeout=6.0)  # a round in progress ends within the store's 5 s timeout
        self.withdrawn = True
        try:
            self.store.withdraw_slots(self.worker)
        except Exception as error:  # it expires on its own within the TTL
            log.warning("cannot withdraw this worker's slots (%s)", type(error).__name__)
            return
        log.info("this worker's slots withdrawn")
