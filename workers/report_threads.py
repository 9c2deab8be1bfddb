"""Status reports sent on a few threads of one process, beside its reconciles (S7.4).

Embedded, these threads send the report queue's due reports and the ones a finished run hands
over; in a Celery worker, only the handed ones. A handed report goes at once, on the reads its
run just kept (S7.1 rev 3): queued instead, it could reach another process, or come back after
those reads are stale, and read the CR and its credential again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .keys import ObjectKey
from .reporting import run_report
from .runtime import Runtime

REPORT_THREADS = 2  # status reports sent at once, beside the reconciles (S7.4)
# Reports a finished run hands over may wait this many deep for a thread: a few POSTs' time,
# well inside the 30 s its reads stay fresh (S7.1 rev 3).
HANDED_REPORTS_WAITING = 8


class ReportThreads:
    """The report threads of one process and the reports in flight on them."""

    def __init__(
        self,
        threads: int = REPORT_THREADS,
        handed_waiting: int = HANDED_REPORTS_WAITING,
        on_done: Callable[[], None] = lambda: None,
    ) -> None:
        self.threads = threads
        self._depth = threads + handed_waiting
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="report")
        self._lock = threading.Lock()
        self._in_flight = 0
        self._on_done = on_done

    def free(self) -> int:
        """Threads not sending a report now (reports waiting for one count against them)."""
        with self._lock:
            return self.threads - self._in_flight

    def hand(self, runtime: Runtime, key: ObjectKey) -> bool:
        """Runtime.hand_report: a run's report onto these threads; False when they are busy
        and ``handed_waiting`` reports wait for them already."""
        with self._lock:
            if self._in_flight >= self._depth:
                return False
            self._in_flight += 1
        return self._start(runtime, key, handed=True)

    def send(self, runtime: Runtime, key: ObjectKey) -> None:
        """A report the queue handed out (embedded): the caller asked ``free`` first."""
        with self._lock:
            self._in_flight += 1
        self._start(runtime, key, handed=False)

    def shutdown(self) -> None:
        """Reports not yet begun are dropped: their CRs' heartbeats still wait in the queue."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _start(self, runtime: Runtime, key: ObjectKey, handed: bool) -> bool:
        try:
            future = self._pool.submit(run_report, runtime, key, handed=handed)
        except RuntimeError:  # stopping: the pool is shut down
            self._done(None)
            return False
        future.add_done_callback(self._done)
        return True

    def _done(self, _future: Future[Any] | None) -> None:
        with self._lock:
            self._in_flight -= 1
        self._on_done()
