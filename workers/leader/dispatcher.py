"""The leader's loop: due keys from the keyed queue go to workers (S4.1.5).

Embedded mode hands tickets to a thread pool in this process; scaled mode sends Celery tasks
that carry only (namespace, name, uid). The keys a worker that died had taken or prefetched are
due again as soon as its slot advertisement expires (workers/queue/orphans.py); keys dispatched
but never finished for any other reason (a lost message) after ``stale_after`` seconds. So
nothing is lost.

The loop never sleeps while a slot is free and a key is due: it takes again at once after a
round that filled every free slot, and a finished run (``wake``) ends its wait, so a slot does
not idle out the rest of a tick. The tick only paces polling for keys whose delay runs out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from ..queue.base import KeyedQueue, Ticket
from ..queue.orphans import orphaned

log = logging.getLogger(__name__)

TICK_SECONDS = 0.2
STALE_AFTER_SECONDS = 150.0  # longer than the 120 s lock TTL: a live run renews its lock
STALE_CHECK_EVERY = 10.0


class Dispatcher(threading.Thread):
    def __init__(
        self,
        queue: KeyedQueue,
        submit: Callable[[Ticket], None],
        stop: threading.Event,
        *,
        capacity: Callable[[], int] = lambda: 100,
        on_store_lost: Callable[[], None] = lambda: None,
        workers_gone: Callable[[], frozenset[str]] = frozenset,
        stale_after: float = STALE_AFTER_SECONDS,
        tick: float = TICK_SECONDS,
        housekeeping_every: float = STALE_CHECK_EVERY,
        what: str = "keyed-queue",
    ) -> None:
        super().__init__(name=f"{what} dispatcher", daemon=True)
        self.what = what
        self.queue, self.submit, self.stop_event = queue, submit, stop
        self.capacity, self.stale_after, self.tick = capacity, stale_after, tick
        self.housekeeping_every = housekeeping_every
        self.on_store_lost = on_store_lost
        self.workers_gone = workers_gone  # scaled mode: read where the workers advertise
        self._gone_seen: frozenset[str] = frozenset()
        self.dispatched = 0
        self.housekept = 0  # housekeeping rounds done (tests wait on it)
        self.store_error: str | None = None  # shown by /readyz while the store is unreachable
        self._marked = False
        self._wake = threading.Event()  # set by wake(): a slot came free, take again now

    def wake(self) -> None:
        """A dispatched run finished (its slot is free): the next round starts without waiting."""
        self._wake.set()

    def run(self) -> None:
        last_stale_check = time.monotonic()
        while not self.stop_event.is_set():
            try:
                if not self._marked:
                    # S8.4: this term's marker. A store that is merely new (a fresh process, an
                    # empty reports queue) is no loss: the watches' initial lists fill it.
                    if not self.queue.mark_generation():
                        log.info(
                            "%s store is new or was lost: the watches' lists fill it", self.what
                        )
                    self._marked = True
                self._wake.clear()  # before reading capacity: a run ending after it wakes us
                free = self.capacity()
                tickets = self.queue.take_due(limit=free) if free > 0 else []
                for ticket in tickets:
                    self.submit(ticket)
                    self.dispatched += 1
                if time.monotonic() - last_stale_check > self.housekeeping_every:
                    last_stale_check = time.monotonic()
                    self._housekeeping()
                    self.housekept += 1
            except Exception as error:
                # The queue store (Redis) may be down: say so once, keep trying, lose nothing.
                described = f"{type(error).__name__}: {error}"
                if described != self.store_error:
                    log.error("dispatching failed (%s); retrying every second", described)
                self.store_error = described
                self.stop_event.wait(1.0)
                continue
            if self.store_error is not None:
                log.info("dispatching resumed")
                self.store_error = None
            if not tickets or len(tickets) < free:
                # Nothing more is due, or every slot is busy: until a run ends or a tick passes.
                self._wake.wait(self.tick)

    def _housekeeping(self) -> None:
        self._hand_out_what_dead_workers_left()
        again = self.queue.redispatch_stale(self.stale_after)
        if again:
            log.warning("%d dispatched keys never finished; due again", again)
        if not self.queue.mark_generation():  # S8.4: the store came back empty
            log.warning("%s store was lost; re-enqueueing every HikyoSecret in reach", self.what)
            self.on_store_lost()

    def _hand_out_what_dead_workers_left(self) -> None:
        gone = self.workers_gone()
        newly_gone = gone - self._gone_seen
        runs = orphaned(self.queue.dispatched_runs(), gone, bool(newly_gone))
        again = self.queue.redispatch(runs) if runs else 0
        self._gone_seen = gone  # only once handed out: a store error retries the whole round
        if newly_gone:
            log.warning(
                "Celery workers gone without stopping: %s; %d of their keys due again",
                ", ".join(sorted(newly_gone)),
                again,
            )
        elif again:
            log.warning("%d keys of Celery workers gone without stopping due again", again)
