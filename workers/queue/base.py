"""The keyed queue: the glue between the watches and the workers (design.md "The keyed queue").

It gives Celery the semantics of client-go's workqueue (pattern 1): a waiting key is queued once
(dedupe); at most one run per key across all processes, under a per-key lock with a TTL and a
fencing check (S4.1.4); a trigger during a run marks the key dirty so it runs once more after;
resync and backoff timers are due times in the store, never Celery ETAs (S4.1.3); first syncs
run before resyncs when both are due (S4.1.6, pattern 5). Reconcile returns a ``Requeue`` and the
queue decides the timing (pattern 2).

A key is in at most one of these states, plus a lock, a failure count and marks:

* waiting -- it has a due time and a priority (``add``/``schedule``/``finish``);
* dispatched -- ``take_due`` handed it out (leader only) and its run has not finished yet;
  ``redispatch_stale`` makes it due again when that run never started or died, and
  ``redispatch`` as soon as the worker it went to is known dead (workers/queue/orphans.py);
* dirty / pending -- a trigger that arrived while the key was dispatched or locked; applied
  when the run finishes.

Two backends implement this protocol: ``memory.MemoryQueue`` (embedded mode, S8.4; lost on
restart) and ``redis.RedisQueue`` (scaled mode; survives worker crashes and leader failover).
Both are also the engine's ``CoordinationStore`` (S4.10.0 not-found records, S6.5 stall times).
The store holds only keys, priorities, times, counts, digests and workload names: never values,
tokens, cursors or stamps (S0.4.1, S8.4).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from workers.engine.durations import RESYNC_JITTER
from workers.engine.outcome import Requeue
from workers.engine.ports import CoordinationStore
from workers.keys import ObjectKey

from .backoff import backoff_delay
from .orphans import DispatchedRun

__all__ = [
    "DEFAULT_LOCK_TTL",
    "GONE_KEPT_SECONDS",
    "NOT_FOUND_TTL_SECONDS",
    "Clock",
    "DispatchedRun",
    "KeyedQueue",
    "Lock",
    "Priority",
    "QueueObserver",
    "Requeue",
    "Ticket",
    "Timer",
    "Unobserved",
    "next_timer",
]

Clock = Callable[[], float]

DEFAULT_LOCK_TTL = 120.0  # S4.1.4
NOT_FOUND_TTL_SECONDS = 3600.0  # S4.10.0: a first 404 is remembered for 1 h
GONE_KEPT_SECONDS = 3600.0  # a dead worker's name, past any lock it could still hold


class Priority(enum.IntEnum):
    """Lower runs first when several keys are due (S4.1.6 "first syncs before resyncs")."""

    FIRST = 0  # new CRs, spec changes, instance changes, dirty re-runs
    NORMAL = 1  # retries (backoff, "after")
    RESYNC = 2  # initial list of CRs already Synced at their generation; periodic resyncs


@dataclass(frozen=True)
class Ticket:
    """A due key handed to a worker. ``forced_full``: withhold the cursor (S4.10.0)."""

    key: ObjectKey
    forced_full: bool
    priority: Priority


@dataclass(frozen=True)
class Lock:
    """A held per-key lock (S4.1.4). ``token`` is unique per acquisition (fencing)."""

    key: ObjectKey
    owner: str
    token: str


@dataclass(frozen=True)
class Timer:
    """The next due time a finished run asks for, and the failure count it leaves."""

    delay: float
    priority: Priority
    failures: int


def next_timer(
    requeue: Requeue,
    failures: int,
    *,
    delay: float | None,
    resync_seconds: float,
    rng: random.Random,
    resync_at_least: float | None = None,
) -> Timer | None:
    """S4.1.3: the timer one run's outcome asks for; None means no timer (``Requeue.NONE``).

    RESYNC resets the failure count and draws its delay in the jitter's range;
    ``resync_at_least`` raises that draw to it, never past the range's high end (the next run
    comes no earlier than the heartbeat it should carry, ``engine.reports.run_after_heartbeat``,
    S7.4 rev 4). BACKOFF adds one and waits per ``backoff_delay``;
    AFTER waits ``delay`` and keeps the count (a first 404 or a 429 is not a failure step,
    S4.10.0, S4.1.6); NONE forgets the count (controller-runtime: success => Forget).
    """
    if requeue is Requeue.RESYNC:
        low, high = RESYNC_JITTER
        delay = resync_seconds * rng.uniform(low, high)
        if resync_at_least is not None:
            delay = max(delay, min(resync_at_least, resync_seconds * high))
        return Timer(delay, Priority.RESYNC, 0)
    if requeue is Requeue.BACKOFF:
        return Timer(backoff_delay(failures + 1, rng), Priority.NORMAL, failures + 1)
    if requeue is Requeue.AFTER:
        return Timer(max(float(delay or 0.0), 0.0), Priority.NORMAL, failures)
    return None


def check_requeue(requeue: Requeue, delay: float | None) -> None:
    """AFTER without a delay is a caller bug: say so before the lock is touched."""
    if not isinstance(requeue, Requeue):
        raise TypeError(f"requeue must be a Requeue, not {type(requeue).__name__}")
    if requeue is Requeue.AFTER and delay is None:
        raise ValueError("Requeue.AFTER needs a delay")


class QueueObserver(Protocol):
    """What a queue reports for metrics (``workers.metrics``, client-go's workqueue metrics).
    Implementations never raise: a queue calls them under its own lock, mid-operation."""

    def added(self, count: int = 1) -> None:
        """Keys entered the waiting state (an add merged into a waiting key is not one)."""
        ...

    def taken(self, waited_seconds: float) -> None:
        """``take_due`` handed out a key that had been due for ``waited_seconds``."""
        ...

    def retried(self) -> None:
        """A run's key was settled with backoff (``Requeue.BACKOFF``)."""
        ...


class Unobserved:
    """The default observer: reports nowhere."""

    def added(self, count: int = 1) -> None:
        return None

    def taken(self, waited_seconds: float) -> None:
        return None

    def retried(self) -> None:
        return None


class KeyedQueue(CoordinationStore, Protocol):
    """The keyed-queue interface both running modes use (design.md "Running modes").

    It extends the engine's ``CoordinationStore`` (S4.10.0 not-found records, kept 1 h; S6.5
    stall first-seen times), so the queue backend is the engine's store. ``observer`` hears
    adds, takes and backoff requeues (metrics); by default nothing does.
    """

    observer: QueueObserver

    def add(
        self,
        key: ObjectKey,
        *,
        priority: Priority = Priority.NORMAL,
        delay: float = 0.0,
        forced_full: bool = False,
    ) -> None:
        """Queue ``key`` (dedupe: a waiting key keeps the higher priority and earlier due time;
        ``forced_full`` is OR-ed in). During a run the key is marked dirty instead (S4.1.4)."""
        ...

    def schedule(
        self,
        key: ObjectKey,
        *,
        delay: float,
        priority: Priority = Priority.RESYNC,
        only_if_unscheduled: bool = False,
    ) -> None:
        """A timer (S4.1.3). ``only_if_unscheduled``: a key with a due time, or in flight, keeps
        it (S4.1.2 ADDED for a CR that already has a due time)."""
        ...

    def take_due(self, limit: int = 100) -> list[Ticket]:
        """Leader only (S4.1.5): due keys in (priority, due time) order, marked dispatched."""
        ...

    def redispatch_stale(self, older_than: float) -> int:
        """Dispatched keys not finished after ``older_than`` s and not locked become due again."""
        ...

    def dispatched_runs(self) -> list[DispatchedRun]:
        """Every key handed out and not finished, with the owner of its lock if one holds it."""
        ...

    def redispatch(self, runs: Sequence[DispatchedRun]) -> int:
        """Make each of ``runs`` due again, releasing its lock, if it is still handed out and
        its lock still has the owner read (a run that moved on meanwhile is left alone)."""
        ...

    def begin(
        self,
        key: ObjectKey,
        owner: str,
        ttl: float = DEFAULT_LOCK_TTL,
        *,
        dispatched_only: bool = False,
        claim_waiting: bool = False,
    ) -> Lock | None:
        """Take the per-key lock (S4.1.4); None (and the key marked dirty) if another holds it.

        ``claim_waiting``: a run begun outside ``take_due`` (a status report a reconcile hands
        over with its reads, S7.1 rev 3) stands for the key's waiting entry, which it takes as
        ``take_due`` would, handed out: its finish then sets the next due time, where otherwise
        the earlier one that waited would win and run again (a heartbeat sent twice), and a run
        that dies leaves the key to the stale check (S8.4), not lost.

        ``dispatched_only`` (a broker message): None, and nothing marked, unless the key is
        handed out now and free. A message that waited in the broker past the stale check
        (S8.4) was sent again; whichever copy comes first runs, and the other finds its key
        running or settled. It carries no trigger of its own: each one reached the key through
        ``add``, which marks a running key dirty itself."""
        ...

    def renew(self, lock: Lock, ttl: float = DEFAULT_LOCK_TTL) -> bool:
        """Extend a lock we still hold; False once it expired or was taken over."""
        ...

    def holds(self, lock: Lock) -> bool:
        """The fencing check before every Kubernetes write (S4.1.4)."""
        ...

    def finish(
        self,
        lock: Lock,
        requeue: Requeue,
        *,
        delay: float | None = None,
        resync_seconds: float = 300.0,
        forced_full_next: bool = False,
        resync_at_least: float | None = None,
    ) -> float | None:
        """Release the lock and schedule the next run (S4.1.3, ``next_timer``); seconds until
        it, or None."""
        ...

    def forget(self, key: ObjectKey) -> None:
        """The CR is gone: drop its timers, failure count, marks and per-CR records."""
        ...

    def failures(self, key: ObjectKey) -> int: ...

    def due_in(self, key: ObjectKey) -> float | None:
        """Seconds until due (<= 0: due now); None when the key is not waiting."""
        ...

    def depth(self) -> int:
        """How many keys are waiting (reported on /readyz while the S8.7 check holds them)."""
        ...

    def due_count(self) -> int:
        """How many waiting keys are due now (client-go's depth: ready, not yet taken)."""
        ...

    def due_at_least(self, count: int) -> bool:
        """Whether at least ``count`` waiting keys are due now. The S7.4 report gate asks this
        after every finished run, so a backend may stop counting at ``count``."""
        ...

    def dispatched_count(self) -> int:
        """How many keys are handed out and not finished: waiting in a broker, or running."""
        ...

    def advertise_slots(self, worker: str, slots: int, ttl: float) -> None:
        """Scaled mode: ``worker`` runs up to ``slots`` tasks at once, for the next ``ttl`` s
        (it says so again before then while it lives)."""
        ...

    def withdraw_slots(self, worker: str) -> None:
        """``worker`` stopped (its runs have ended): its advertisement goes at once, and it
        never counts as gone."""
        ...

    def live_slots(self) -> tuple[int, int]:
        """(workers, slots) of the advertisements not expired."""
        ...

    def workers_gone(self) -> frozenset[str]:
        """Workers whose advertisement expired without being withdrawn: they died. Each is
        remembered for ``GONE_KEPT_SECONDS`` after it expired."""
        ...

    def mark_generation(self) -> bool:
        """S8.4: write the generation marker; False when it was missing (store new or lost)."""
        ...
