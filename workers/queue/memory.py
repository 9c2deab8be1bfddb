"""The embedded mode's keyed queue: one process, threads, state in memory (S8.4).

A restart loses everything, which S8.4 allows: the first ``mark_generation`` of a fresh queue
returns False and the leader re-enqueues every CR in reach. Locks expire on the injected clock,
so tests move time instead of sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from workers.keys import ObjectKey

from .base import (
    DEFAULT_LOCK_TTL,
    GONE_KEPT_SECONDS,
    NOT_FOUND_TTL_SECONDS,
    Clock,
    DispatchedRun,
    KeyedQueue,
    Lock,
    Priority,
    QueueObserver,
    Requeue,
    Ticket,
    Timer,
    Unobserved,
    check_requeue,
    next_timer,
)


@dataclass(slots=True)
class _Waiting:
    due: float
    priority: Priority
    forced: bool
    seq: int  # matches the live heap entry; older entries for the key are skipped (lazy delete)


@dataclass(frozen=True, slots=True)
class _Dispatched:
    at: float
    priority: Priority
    forced: bool


@dataclass(slots=True)
class _Held:
    owner: str
    token: str
    expires: float


@dataclass(slots=True)
class _Marks:
    """Triggers that arrived while the key was in flight, applied when its run finishes."""

    dirty: bool = False  # S4.1.4: run once more, at once
    dirty_forced: bool = False
    pending_due: float | None = None  # a timer set during the run (earlier one wins)
    pending_priority: Priority = Priority.RESYNC
    pending_forced: bool = False


class MemoryQueue(KeyedQueue):
    """``KeyedQueue`` in memory, safe across threads (one mutex; every operation is short)."""

    NOT_FOUND_TTL_SECONDS = NOT_FOUND_TTL_SECONDS
    observer: QueueObserver = Unobserved()  # metrics (workers/metrics.py) set their own

    def __init__(self, clock: Clock = time.monotonic, rng: random.Random | None = None) -> None:
        self._clock = clock
        self._rng = rng or random.Random()
        self._mutex = threading.Lock()
        self._waiting: dict[ObjectKey, _Waiting] = {}
        # One heap per priority, as the Redis backend has one sorted set per priority:
        # take_due drains FIRST before NORMAL before RESYNC among the due keys.
        self._heaps: dict[Priority, list[tuple[float, int, ObjectKey]]] = {p: [] for p in Priority}
        self._dispatched: dict[ObjectKey, _Dispatched] = {}
        self._locks: dict[ObjectKey, _Held] = {}
        self._marks: dict[ObjectKey, _Marks] = {}
        self._failure_counts: dict[ObjectKey, int] = {}
        self._not_found: dict[str, tuple[str, float, float]] = {}  # uid -> (binding, at, seen)
        self._stalls: dict[str, dict[str, float]] = {}  # uid -> {"Kind/name": first seen}
        self._generation = False
        self._notes: dict[str, tuple[str, float]] = {}  # name -> (value, expires)
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, refilled at)
        self._slots: dict[str, tuple[int, float]] = {}  # worker -> (slots, expires)
        self._seq = itertools.count()
        self._tokens = itertools.count(1)

    # -- queueing ------------------------------------------------------------------------

    def add(
        self,
        key: ObjectKey,
        *,
        priority: Priority = Priority.NORMAL,
        delay: float = 0.0,
        forced_full: bool = False,
    ) -> None:
        """Pattern 1: dedupe while waiting; a key in flight is marked dirty (S4.1.4)."""
        priority = Priority(priority)
        with self._mutex:
            now = self._clock()
            if self._in_flight(key, now):
                marks = self._marks.setdefault(key, _Marks())
                if delay <= 0:
                    marks.dirty = True
                    marks.dirty_forced |= forced_full
                else:  # a delayed add is a timer for after the run, not a re-run now
                    self._pend(marks, now + delay, priority, forced_full)
                return
            self._enqueue(key, now + max(delay, 0.0), priority, forced_full)

    def schedule(
        self,
        key: ObjectKey,
        *,
        delay: float,
        priority: Priority = Priority.RESYNC,
        only_if_unscheduled: bool = False,
    ) -> None:
        """S4.1.3 timers; S4.1.2: with ``only_if_unscheduled`` an existing due time stays."""
        priority = Priority(priority)
        with self._mutex:
            now = self._clock()
            if self._in_flight(key, now):
                # The run's finish sets the next due time; an explicit timer is kept for then.
                if not only_if_unscheduled:
                    self._pend(self._marks.setdefault(key, _Marks()), now + delay, priority, False)
                return
            if only_if_unscheduled and key in self._waiting:
                return
            self._enqueue(key, now + max(delay, 0.0), priority, False)

    def take_due(self, limit: int = 100) -> list[Ticket]:
        """S4.1.5/S4.1.6: due keys, FIRST before NORMAL before RESYNC, earliest first."""
        tickets: list[Ticket] = []
        with self._mutex:
            now = self._clock()
            for priority in Priority:
                heap = self._heaps[priority]
                while heap and len(tickets) < limit and heap[0][0] <= now:
                    due, seq, key = heapq.heappop(heap)
                    waiting = self._live(seq, key)
                    if waiting is None:
                        continue
                    del self._waiting[key]
                    self._dispatched[key] = _Dispatched(now, priority, waiting.forced)
                    tickets.append(Ticket(key, waiting.forced, priority))
                    self.observer.taken(now - due)
        return tickets

    def redispatch_stale(self, older_than: float) -> int:
        """A lost message or a killed worker must not lose the key: due again, unless locked."""
        count = 0
        with self._mutex:
            now = self._clock()
            for key, dispatched in list(self._dispatched.items()):
                if now - dispatched.at < older_than or self._holder(key, now) is not None:
                    continue
                self._hand_out_again(key, now)
                count += 1
        return count

    def dispatched_runs(self) -> list[DispatchedRun]:
        with self._mutex:
            now = self._clock()
            runs = []
            for key in self._dispatched:
                held = self._holder(key, now)
                runs.append(DispatchedRun(key, None if held is None else held.owner))
            return runs

    def redispatch(self, runs: Sequence[DispatchedRun]) -> int:
        count = 0
        with self._mutex:
            now = self._clock()
            for run in runs:
                held = self._holder(run.key, now)
                owner = None if held is None else held.owner
                if run.key not in self._dispatched or owner != run.owner:
                    continue  # finished, or begun, since it was read
                self._locks.pop(run.key, None)
                self._hand_out_again(run.key, now)
                count += 1
        return count

    # -- per-key lock (S4.1.4) -----------------------------------------------------------

    def begin(
        self,
        key: ObjectKey,
        owner: str,
        ttl: float = DEFAULT_LOCK_TTL,
        *,
        dispatched_only: bool = False,
        claim_waiting: bool = False,
    ) -> Lock | None:
        """Take the key's lock; if another run holds it, mark the key dirty and return None."""
        if ttl <= 0:
            raise ValueError("lock ttl must be positive")
        with self._mutex:
            now = self._clock()
            held = self._holder(key, now) is not None
            if dispatched_only and (held or key not in self._dispatched):
                return None
            if held:
                marks = self._marks.setdefault(key, _Marks())
                marks.dirty = True
                dispatched = self._dispatched.get(key)
                marks.dirty_forced |= dispatched is not None and dispatched.forced
                return None
            token = str(next(self._tokens))
            self._locks[key] = _Held(owner, token, now + ttl)
            waiting = self._waiting.pop(key, None) if claim_waiting else None
            if waiting is not None:  # taken as take_due takes it; its heap entry is now stale
                self._dispatched[key] = _Dispatched(now, waiting.priority, waiting.forced)
            return Lock(key, owner, token)

    def renew(self, lock: Lock, ttl: float = DEFAULT_LOCK_TTL) -> bool:
        with self._mutex:
            now = self._clock()
            held = self._holder(lock.key, now)
            if held is None or (held.owner, held.token) != (lock.owner, lock.token):
                return False
            held.expires = now + ttl
            return True

    def holds(self, lock: Lock) -> bool:
        """S4.1.4 fencing: True only while this very acquisition is unexpired."""
        with self._mutex:
            held = self._holder(lock.key, self._clock())
            return held is not None and (held.owner, held.token) == (lock.owner, lock.token)

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
        """S4.1.3: release the lock and set the next due time (see ``base.next_timer``).

        Fencing: when another owner holds the key now, this stale run changes nothing. When
        the lock merely expired and nobody took over, the outcome still counts.
        """
        check_requeue(requeue, delay)
        key = lock.key
        with self._mutex:
            now = self._clock()
            held = self._holder(key, now)
            if held is not None:
                if (held.owner, held.token) != (lock.owner, lock.token):
                    return None
                del self._locks[key]
            timer = next_timer(
                requeue,
                self._failure_counts.get(key, 0),
                delay=delay,
                resync_seconds=resync_seconds,
                rng=self._rng,
                resync_at_least=resync_at_least,
            )
            if requeue is Requeue.BACKOFF:
                self.observer.retried()
            self._settle(key, now, timer, forced_full_next)
            waiting = self._waiting.get(key)
            return None if waiting is None else waiting.due - now

    def forget(self, key: ObjectKey) -> None:
        """The CR was deleted: timers, failure count, marks and its per-CR records go; a held
        lock stays its run's."""
        with self._mutex:
            self._waiting.pop(key, None)  # its heap entry is skipped later (seq mismatch)
            self._dispatched.pop(key, None)
            self._marks.pop(key, None)
            self._failure_counts.pop(key, None)
            self._not_found.pop(key.uid, None)
            self._stalls.pop(key.uid, None)

    # -- reading -------------------------------------------------------------------------

    def failures(self, key: ObjectKey) -> int:
        with self._mutex:
            return self._failure_counts.get(key, 0)

    def due_in(self, key: ObjectKey) -> float | None:
        with self._mutex:
            waiting = self._waiting.get(key)
            return None if waiting is None else waiting.due - self._clock()

    def depth(self) -> int:
        with self._mutex:
            return len(self._waiting)

    def due_count(self) -> int:
        with self._mutex:
            now = self._clock()
            return sum(1 for waiting in self._waiting.values() if waiting.due <= now)

    def due_at_least(self, count: int) -> bool:
        """Visits only heap entries due now, and stops at ``count`` live ones: a heap entry
        due later has no descendant due sooner. Counting every waiting key instead cost the
        embedded leader 13 % of its GIL time at 5,000 CRs, once per finished run."""
        if count <= 0:
            return True
        with self._mutex:
            now = self._clock()
            found = 0
            for heap in self._heaps.values():
                unseen = [0] if heap and heap[0][0] <= now else []
                while unseen:
                    index = unseen.pop()
                    _, seq, key = heap[index]
                    if self._live(seq, key) is not None:
                        found += 1
                        if found >= count:
                            return True
                    for child in (2 * index + 1, 2 * index + 2):
                        if child < len(heap) and heap[child][0] <= now:
                            unseen.append(child)
            return False

    def dispatched_count(self) -> int:
        with self._mutex:
            return len(self._dispatched)

    def advertise_slots(self, worker: str, slots: int, ttl: float) -> None:
        with self._mutex:
            self._slots[worker] = (slots, self._clock() + ttl)

    def withdraw_slots(self, worker: str) -> None:
        with self._mutex:
            self._slots.pop(worker, None)

    def live_slots(self) -> tuple[int, int]:
        with self._mutex:
            live = [slots for slots, expires in self._kept_slots() if expires > self._clock()]
            return len(live), sum(live)

    def workers_gone(self) -> frozenset[str]:
        with self._mutex:
            self._kept_slots()
            now = self._clock()
            return frozenset(w for w, (_, expires) in self._slots.items() if expires <= now)

    def _kept_slots(self) -> list[tuple[int, float]]:
        """Forgets the workers gone for longer than GONE_KEPT_SECONDS; the rest, live or not."""
        cutoff = self._clock() - GONE_KEPT_SECONDS
        self._slots = {w: entry for w, entry in self._slots.items() if entry[1] > cutoff}
        return list(self._slots.values())

    def mark_generation(self) -> bool:
        """S8.4: a fresh process's store is empty, so the first call says "lost" (False)."""
        with self._mutex:
            existed, self._generation = self._generation, True
            return existed

    # -- CoordinationStore (S4.10.0) -----------------------------------------------------

    def not_found_seen(self, cr_uid: str) -> tuple[str, float] | None:
        with self._mutex:
            record = self._not_found.get(cr_uid)
            if record is None:
                return None
            binding, at, seen = record
            if self._clock() - seen >= self.NOT_FOUND_TTL_SECONDS:
                del self._not_found[cr_uid]
                return None
            return binding, at

    def record_not_found(self, cr_uid: str, binding: str, at: float) -> None:
        """Keeps (binding digest, time) for 1 h on this queue's clock; ``at`` is the caller's."""
        with self._mutex:
            now = self._clock()
            # Records are rare (first 404s): sweeping here keeps the dict bounded by the TTL.
            for uid, (_, _, seen) in list(self._not_found.items()):
                if now - seen >= self.NOT_FOUND_TTL_SECONDS:
                    del self._not_found[uid]
            self._not_found[cr_uid] = (binding, at, now)

    def clear_not_found(self, cr_uid: str) -> None:
        with self._mutex:
            self._not_found.pop(cr_uid, None)

    def stall_first_seen(self, cr_uid: str) -> dict[str, float]:
        """S6.5: when each held stall test ("Kind/name") was first seen for this CR."""
        with self._mutex:
            return dict(self._stalls.get(cr_uid, {}))

    def set_stall_first_seen(self, cr_uid: str, first_seen: Mapping[str, float]) -> None:
        """Replaces the CR's whole map; an empty map removes it."""
        with self._mutex:
            if first_seen:
                self._stalls[cr_uid] = {ref: float(at) for ref, at in first_seen.items()}
            else:
                self._stalls.pop(cr_uid, None)

    def take_token(self, bucket: str, rate: float, burst: int) -> float:
        """S4.1.6: 0 when a token was taken, else seconds until one is there (none taken)."""
        with self._mutex:
            now = self._clock()
            tokens, at = self._buckets.get(bucket, (float(burst), now))
            tokens = min(float(burst), tokens + max(0.0, now - at) * rate)
            wait = 0.0
            if tokens >= 1 - 1e-6:  # float refill arithmetic must not cost a token
                tokens = max(0.0, tokens - 1)
            else:
                wait = (1 - tokens) / rate
            self._buckets[bucket] = (tokens, now)
            return wait

    def put_note(self, name: str, value: str, ttl: float) -> None:
        with self._mutex:
            self._notes[name] = (value, self._clock() + ttl)

    def get_note(self, name: str) -> str | None:
        with self._mutex:
            note = self._notes.get(name)
            if note is None:
                return None
            if note[1] <= self._clock():
                del self._notes[name]
                return None
            return note[0]

    def get_notes(self, *names: str) -> list[str | None]:
        return [self.get_note(name) for name in names]

    # -- internals (call with the mutex held) --------------------------------------------

    def _holder(self, key: ObjectKey, now: float) -> _Held | None:
        held = self._locks.get(key)
        if held is not None and held.expires <= now:
            del self._locks[key]  # expired: as if Redis had dropped the PX key
            return None
        return held

    def _hand_out_again(self, key: ObjectKey, now: float) -> None:
        """A handed-out key whose run will not finish becomes due now, with every trigger that
        arrived meanwhile (the re-run covers them)."""
        dispatched = self._dispatched.pop(key)
        priority, forced = dispatched.priority, dispatched.forced
        marks = self._marks.pop(key, None)
        if marks is not None:
            forced |= marks.dirty_forced or marks.pending_forced
            if marks.dirty:
                priority = Priority.FIRST
        self._enqueue(key, now, priority, forced)

    def _in_flight(self, key: ObjectKey, now: float) -> bool:
        return key in self._dispatched or self._holder(key, now) is not None

    def _enqueue(self, key: ObjectKey, due: float, priority: Priority, forced: bool) -> None:
        """Dedupe (patterns 1, 5): the higher priority and the earlier due time win."""
        current = self._waiting.get(key)
        if current is not None:
            forced |= current.forced
            if current.due <= due and current.priority <= priority:
                current.forced = forced  # no move in the heap needed
                return
            due, priority = min(due, current.due), min(priority, current.priority)
        else:
            self.observer.added()
        seq = next(self._seq)
        self._waiting[key] = _Waiting(due, priority, forced, seq)
        heapq.heappush(self._heaps[priority], (due, seq, key))
        self._compact()

    @staticmethod
    def _pend(marks: _Marks, due: float, priority: Priority, forced: bool) -> None:
        if marks.pending_due is None:
            marks.pending_due, marks.pending_priority = due, priority
        else:
            marks.pending_due = min(marks.pending_due, due)
            marks.pending_priority = min(marks.pending_priority, priority)
        marks.pending_forced |= forced

    def _settle(self, key: ObjectKey, now: float, timer: Timer | None, forced: bool) -> None:
        """Clear the run's state and merge its timer with what arrived during the run."""
        self._dispatched.pop(key, None)
        if timer is None or timer.failures == 0:
            self._failure_counts.pop(key, None)
        else:
            self._failure_counts[key] = timer.failures
        wanted: list[tuple[float, Priority]] = []
        if timer is not None:
            wanted.append((now + timer.delay, timer.priority))
        marks = self._marks.pop(key, None)
        if marks is not None:
            forced |= marks.dirty_forced or marks.pending_forced
            if marks.pending_due is not None:
                wanted.append((marks.pending_due, marks.pending_priority))
            if marks.dirty:  # S4.1.4: a trigger during the run => once more, at once
                wanted.append((now, Priority.FIRST))
        if wanted:
            self._enqueue(key, min(due for due, _ in wanted), min(p for _, p in wanted), forced)
        elif forced and key in self._waiting:
            self._waiting[key].forced = True

    def _live(self, seq: int, key: ObjectKey) -> _Waiting | None:
        """The key's waiting entry if the heap entry ``seq`` is its live one; None when a later
        add/schedule superseded it or the key was taken or forgotten (lazy delete)."""
        waiting = self._waiting.get(key)
        return waiting if waiting is not None and waiting.seq == seq else None

    def _compact(self) -> None:
        """Drop superseded heap entries once they outnumber the live ones."""
        stale = sum(len(heap) for heap in self._heaps.values()) - len(self._waiting)
        if stale <= max(len(self._waiting), 1024):
            return
        self._heaps = {p: [] for p in Priority}
        for key, waiting in self._waiting.items():
            self._heaps[waiting.priority].append((waiting.due, waiting.seq, key))
        for heap in self._heaps.values():
            heapq.heapify(heap)
