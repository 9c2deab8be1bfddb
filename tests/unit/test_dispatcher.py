"""The leader's dispatcher (workers/dispatcher.py, S4.1.5): due keys go to workers up to the
free slots, the store's generation marker is written before anything is taken (S8.4), a store
outage is reported once and loses nothing, dispatched keys that never finish come back, and
it stops cleanly. A real MemoryQueue on a moved clock; the S8.4 loss detection itself is in
tests/queue/test_dispatcher_store_marker.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.clocks import FakeClock
from tests.support.waiting import wait_for
from workers import report_threads
from workers.broker_window import window
from workers.engine.outcome import Requeue
from workers.engine.recent_reads import RecentReads
from workers.engine.settings import OperatorSettings
from workers.keys import ObjectKey
from workers.leader import executors
from workers.leader import process as operator_process
from workers.leader.dispatcher import Dispatcher
from workers.queue.base import Priority, Ticket
from workers.queue.lag import ScheduleLag
from workers.queue.memory import MemoryQueue
from workers.shards import layout_of

KEYS = [ObjectKey("ns", f"app-{n}", f"uid-{n}") for n in range(5)]


def _wait(probe: Any, what: str) -> Any:
    return wait_for(probe, timeout=10, interval=0.002, what=what)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class QuickStop(threading.Event):
    """The stop event, with every pause cut short: the 1 s retry after a store error, too."""

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(None if timeout is None else min(timeout, 0.002))


class CallLog(MemoryQueue):
    """A MemoryQueue that logs the dispatcher's calls and can be made unreachable."""

    def __init__(self, clock: Clock | None = None) -> None:
        super().__init__(clock=clock or Clock())
        self.calls: list[str] = []
        self.down = False
        self.failed = 0
        self._calls_lock = threading.Lock()

    def _call(self, name: str) -> None:
        with self._calls_lock:
            self.calls.append(name)
            if self.down:
                self.failed += 1
                raise ConnectionError("Error 111 connecting to redis:6379")

    def mark_generation(self) -> bool:
        self._call("mark_generation")
        return super().mark_generation()

    def take_due(self, limit: int = 100) -> list[Ticket]:
        self._call("take_due")
        return super().take_due(limit)

    def redispatch_stale(self, older_than: float) -> int:
        self._call("redispatch_stale")
        return super().redispatch_stale(older_than)

    def count(self, name: str) -> int:
        with self._calls_lock:
            return self.calls.count(name)


class Workers:
    """The fake run function: keeps submitted tickets "running" until told to finish them."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.running: list[ObjectKey] = []
        self.submitted: list[ObjectKey] = []
        self.capacity_asked = 0
        self._lock = threading.Lock()

    def submit(self, ticket: Ticket) -> None:
        with self._lock:
            self.running.append(ticket.key)
            self.submitted.append(ticket.key)

    def capacity(self) -> int:
        with self._lock:
            self.capacity_asked += 1
            return self.slots - len(self.running)

    def finish_one(self) -> None:
        with self._lock:
            self.running.pop(0)

    def asked(self) -> int:
        with self._lock:
            return self.capacity_asked


@pytest.fixture
def started() -> Iterator[Any]:
    """Starts dispatchers; each is stopped and must end at teardown."""
    running: list[tuple[Dispatcher, threading.Event]] = []

    def start(queue: MemoryQueue, submit: Any, **options: Any) -> Dispatcher:
        stop = QuickStop()
        options.setdefault("tick", 0.002)
        options.setdefault("housekeeping_every", 3600.0)
        dispatcher = Dispatcher(queue, submit, stop, **options)
        dispatcher.start()
        running.append((dispatcher, stop))
        return dispatcher

    yield start
    for dispatcher, stop in running:
        stop.set()
        dispatcher.wake()  # as OperatorProcess does when leadership ends
        dispatcher.join(timeout=10)
        assert not dispatcher.is_alive()


def test_due_keys_are_dispatched_up_to_the_free_slots_and_each_once(started):
    """S4.1.4 "distinct CRs run concurrently (reference: 4)": never more in flight than the
    workers have room for; the rest stay waiting in the queue, none is lost or doubled."""
    queue = CallLog()
    for key in KEYS:
        queue.add(key)
    workers = Workers(slots=2)
    dispatcher = started(queue, workers.submit, capacity=workers.capacity)

    _wait(lambda: len(workers.submitted) == 2, "two dispatched")
    asked = workers.asked()
    _wait(lambda: workers.asked() >= asked + 5, "more dispatch rounds")  # full: rounds go by
    assert len(workers.submitted) == 2 and queue.depth() == 3

    workers.finish_one()
    _wait(lambda: len(workers.submitted) == 3, "a third once a slot is free")
    asked = workers.asked()
    _wait(lambda: workers.asked() >= asked + 5, "more dispatch rounds")
    assert len(workers.submitted) == 3 and queue.depth() == 2

    workers.slots = 10
    _wait(lambda: len(workers.submitted) == 5, "the rest")
    assert sorted(workers.submitted) == sorted(KEYS)  # each key once
    assert dispatcher.dispatched == 5 and queue.depth() == 0


def test_a_finished_run_frees_its_slot_at_once_not_at_the_next_tick(started):
    """Issue 13: with every slot busy the loop waits, and a run's end (``wake``) ends the wait.
    The tick here is an hour: the next key can only be taken because of the wake."""
    queue = CallLog()
    for key in KEYS[:3]:
        queue.add(key)
    workers = Workers(slots=1)
    dispatcher = started(queue, workers.submit, capacity=workers.capacity, tick=3600.0)
    _wait(lambda: workers.submitted == [KEYS[0]], "the first key in the only slot")
    for count in (2, 3):
        workers.finish_one()
        dispatcher.wake()
        _wait(lambda c=count: len(workers.submitted) == c, "the next key once the slot is free")
    assert workers.submitted == KEYS[:3] and queue.depth() == 0


def test_a_round_that_fills_every_free_slot_takes_again_without_waiting(started):
    """Issue 13: more keys due than one round took (its limit) and slots still free: the next
    round starts at once, not a tick later (the tick is an hour here)."""
    queue = CallLog()
    for key in KEYS:
        queue.add(key)
    workers = Workers(slots=5)

    def capacity() -> int:
        return min(workers.capacity(), 2)  # two at most per round

    started(queue, workers.submit, capacity=capacity, tick=3600.0)
    _wait(lambda: len(workers.submitted) == 5, "all five over three rounds")
    assert sorted(workers.submitted) == sorted(KEYS)


def test_keys_not_yet_due_are_not_dispatched(started):
    clock = Clock()
    queue = CallLog(clock)
    queue.add(KEYS[0], delay=30)
    workers = Workers(slots=4)
    started(queue, workers.submit, capacity=workers.capacity)
    asked = workers.asked()
    _wait(lambda: workers.asked() >= asked + 5, "dispatch rounds")
    assert workers.submitted == []
    clock.now = 30.0
    _wait(lambda: workers.submitted == [KEYS[0]], "the key once due")


def test_the_generation_marker_is_written_once_before_anything_is_taken(started):
    """S8.4: this term's marker comes first, so a loss noticed later is a real one."""
    queue = CallLog()
    queue.add(KEYS[0])
    workers = Workers(slots=4)
    started(queue, workers.submit, capacity=workers.capacity)
    _wait(lambda: queue.count("take_due") >= 3, "dispatch rounds")
    assert queue.calls[0] == "mark_generation"
    assert queue.count("mark_generation") == 1  # no housekeeping round yet: once
    assert workers.submitted == [KEYS[0]]


def test_a_store_outage_is_reported_once_loses_nothing_and_dispatching_resumes(started, caplog):
    """The store (Redis) is down from the start: the marker cannot be written and nothing is
    taken; one error line, ``store_error`` for /readyz; once it is back the marker is written
    first, the waiting key is dispatched and the error clears."""
    queue = CallLog()
    queue.add(KEYS[0])
    queue.down = True
    workers = Workers(slots=4)
    with caplog.at_level(logging.INFO, logger="workers.leader.dispatcher"):
        dispatcher = started(queue, workers.submit, capacity=workers.capacity)
        _wait(lambda: queue.failed >= 5, "several failed rounds")
        assert dispatcher.store_error == "ConnectionError: Error 111 connecting to redis:6379"
        assert workers.submitted == []
        assert set(queue.calls) == {"mark_generation"}  # nothing taken before the marker

        queue.down = False
        _wait(lambda: workers.submitted == [KEYS[0]], "the key after the store came back")
        _wait(lambda: dispatcher.store_error is None, "the error to clear")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "retrying" in errors[0].getMessage()
    assert caplog.text.count("dispatching resumed") == 1
    assert queue.calls.index("take_due") > queue.calls.index("mark_generation", queue.failed)


def test_a_dispatched_key_that_never_finishes_is_dispatched_again_after_stale_after(
    started, caplog
):
    """A lost message or a killed worker: housekeeping makes the key due again once
    ``stale_after`` has passed on the queue's clock, not before."""
    clock = Clock()
    queue = CallLog(clock)
    queue.add(KEYS[0])
    submitted: list[ObjectKey] = []
    with caplog.at_level(logging.WARNING, logger="workers.leader.dispatcher"):
        started(
            queue,
            lambda ticket: submitted.append(ticket.key),  # and then lost
            stale_after=150.0,
            housekeeping_every=0.0,
        )
        _wait(lambda: submitted == [KEYS[0]], "the first dispatch")
        rounds = queue.count("redispatch_stale")
        _wait(lambda: queue.count("redispatch_stale") >= rounds + 5, "housekeeping rounds")
        assert submitted == [KEYS[0]]  # not stale yet
        clock.now = 151.0
        _wait(lambda: submitted == [KEYS[0], KEYS[0]], "the key dispatched again")
    assert "1 dispatched keys never finished; due again" in caplog.text


def test_a_failing_submit_loses_nothing(started):
    """A ticket whose hand-off failed (the broker refused the task) stays dispatched and is
    taken again once stale: no key is dropped."""
    clock = Clock()
    queue = CallLog(clock)
    queue.add(KEYS[0])
    attempts: list[ObjectKey] = []

    def submit(ticket: Ticket) -> None:
        attempts.append(ticket.key)
        if len(attempts) == 1:
            raise ConnectionError("broker unreachable")

    dispatcher = started(queue, submit, stale_after=150.0, housekeeping_every=0.0)
    _wait(lambda: attempts == [KEYS[0]], "the failed hand-off")
    clock.now = 151.0
    _wait(lambda: attempts == [KEYS[0], KEYS[0]], "the key handed off again")
    _wait(lambda: dispatcher.store_error is None, "the error to clear")


def test_stopped_before_it_starts_it_touches_nothing():
    queue = CallLog()
    queue.add(KEYS[0])
    stop = QuickStop()
    stop.set()
    dispatcher = Dispatcher(queue, lambda ticket: pytest.fail("dispatched"), stop)
    dispatcher.start()
    dispatcher.join(timeout=10)
    assert not dispatcher.is_alive()
    assert queue.calls == [] and queue.depth() == 1


def test_it_stops_promptly_when_idle_and_dispatches_nothing_after():
    """A plain threading.Event and the default 0.2 s tick: ``stop`` ends the loop within a tick
    (OperatorProcess also wakes it when leadership ends)."""
    queue = CallLog()
    stop = threading.Event()
    submitted: list[Ticket] = []
    dispatcher = Dispatcher(queue, submitted.append, stop, housekeeping_every=3600.0)
    dispatcher.start()
    _wait(lambda: queue.count("take_due") >= 1, "a first round")
    stop.set()
    dispatcher.join(timeout=10)
    assert not dispatcher.is_alive()
    queue.add(KEYS[0])
    assert submitted == [] and queue.depth() == 1


def _process_runtime() -> SimpleNamespace:
    """What OperatorProcess reads of a Runtime, over in-memory queues."""
    return SimpleNamespace(
        queue=MemoryQueue(),
        reports=MemoryQueue(),
        cluster=SimpleNamespace(api_client=None),
        settings=OperatorSettings(operator_namespace="hikyo-system"),
        recent_reads=RecentReads(FakeClock()),
        schedule_lag=ScheduleLag(FakeClock()),
    )


def test_embedded_reports_leave_the_queue_only_for_a_free_reporter(monkeypatch):
    """Issue 13: the embedded report pool takes only as many keys as it runs at once; the
    others stay waiting in the report queue (not as Futures in the executor's queue)."""
    release = threading.Event()
    started: list[ObjectKey] = []

    def blocking_report(runtime: Any, key: ObjectKey, handed: bool = False) -> None:
        assert not handed  # taken from the queue: nothing else waits for the key
        started.append(key)
        release.wait(10)

    monkeypatch.setattr(report_threads, "run_report", blocking_report)
    runtime = _process_runtime()
    process = operator_process.OperatorProcess(runtime, leader_election=False)
    try:
        assert process._report_capacity() == report_threads.REPORT_THREADS == 2
        for key in KEYS[:2]:
            process._submit_report(Ticket(key, False, Priority.RESYNC))
        _wait(lambda: len(started) == 2, "both reports running")
        assert process._report_capacity() == 0
        release.set()
        _wait(lambda: process._report_capacity() == 2, "both slots free again")
    finally:
        release.set()
        process.stop()


def test_embedded_runs_hand_reports_to_the_report_threads_a_few_deep(monkeypatch):
    """Runtime.hand_report: a run's report goes onto the report threads at once, up to the
    threads plus HANDED_REPORTS_WAITING waiting for one; beyond that the run is told no. Each
    goes as a handed report, which stands for the CR's waiting heartbeat (run_report)."""
    release = threading.Event()
    handed_flags: list[bool] = []

    def blocking_report(runtime: Any, key: ObjectKey, handed: bool = False) -> None:
        handed_flags.append(handed)
        release.wait(10)

    monkeypatch.setattr(report_threads, "run_report", blocking_report)
    runtime = _process_runtime()
    process = operator_process.OperatorProcess(runtime, leader_election=False)
    depth = report_threads.REPORT_THREADS + report_threads.HANDED_REPORTS_WAITING
    try:
        keys = [ObjectKey("ns", f"cr-{i}", f"uid-{i}") for i in range(depth + 1)]
        assert [runtime.hand_report(runtime, key) for key in keys] == [True] * depth + [False]
        assert process._report_capacity() == 0  # the queue's reports wait for those
        release.set()
        _wait(lambda: runtime.hand_report(runtime, keys[-1]), "a thread free again")
        _wait(lambda: len(handed_flags) == depth + 1, "every handed report run")
        assert all(handed_flags)
    finally:
        release.set()
        process.stop()


def test_the_leader_notes_how_late_its_queue_hands_out_keys():
    """workers/queue/lag.py: the reconcile queue's takes feed the runtime's schedule lag,
    which an embedded run reads to decide whether a heartbeat rides on it."""
    runtime = _process_runtime()
    clock = FakeClock()
    runtime.queue = MemoryQueue(clock)
    process = operator_process.OperatorProcess(runtime, leader_election=False)
    try:
        runtime.queue.schedule(KEYS[0], delay=10.0, priority=Priority.RESYNC)
        clock.advance(10 + 95)
        assert [t.key for t in runtime.queue.take_due()] == [KEYS[0]]
        assert runtime.schedule_lag.seconds() == 95.0
    finally:
        process.stop()


def test_embedded_reports_wait_while_a_reconcile_is_due():
    """S7.4: a report never takes the CPU a backlog of reconciles needs. While as many keys
    of the reconcile queue are due as there are reconcile slots, no report leaves its queue;
    with fewer (a steady resync load's odd key), both report slots take again."""
    runtime = _process_runtime()
    process = operator_process.OperatorProcess(runtime, leader_election=False)
    slots = executors.EMBEDDED_WORKERS
    keys = [ObjectKey("ns", f"cr-{i}", f"uid-{i}") for i in range(slots + 1)]
    try:
        for key in keys[:slots]:
            runtime.queue.add(key)
        assert process._report_capacity() == 0
        assert len(runtime.queue.take_due(limit=1)) == 1
        assert runtime.queue.due_count() == slots - 1
        assert process._report_capacity() == 2
        runtime.queue.add(keys[slots], delay=3600.0)  # waiting, but not due: holds nothing
        assert process._report_capacity() == 2
    finally:
        process.stop()


def test_scaled_mode_hands_out_the_live_worker_slots_plus_a_spare_round():
    """S4.1.6 in scaled mode (workers/broker_window.py): keys beyond the window stay in the
    keyed queue, where a first sync due later still goes before them; reports have a window of
    their own and, as in embedded mode, yield to a backlog of reconciles (S7.4)."""
    sent: list[Ticket] = []
    runtime = _process_runtime()
    scaled = executors.CeleryExecutor(
        runtime, layout_of(runtime.settings), send_task=sent.append, send_report=sent.append
    )
    process = operator_process.OperatorProcess(runtime, scaled, leader_election=False)
    process.crd_check = SimpleNamespace(problem=None)
    try:
        runtime.queue.advertise_slots("celery@a", 2, ttl=30)
        runtime.queue.advertise_slots("celery@b", 2, ttl=30)
        assert process._capacity() == window(4)
        keys = [ObjectKey("ns", f"cr-{n}", f"uid-{n}") for n in range(window(4) + 10)]
        for key in keys:
            runtime.queue.add(key, priority=Priority.RESYNC)
        handed_out = runtime.queue.take_due(limit=process._capacity())
        assert process._capacity() == 0 and runtime.queue.due_count() == 10
        assert process._report_capacity() == 0  # 10 reconciles due, more than the 4 slots
        runtime.queue.add(KEYS[0], priority=Priority.FIRST)  # a spec edit, due last

        def finish(count: int) -> None:
            for _ in range(count):
                ticket = handed_out.pop()
                lock = runtime.queue.begin(ticket.key, "celery@a", dispatched_only=True)
                assert lock is not None
                runtime.queue.finish(lock, Requeue.RESYNC)

        finish(1)
        assert process._capacity() == 1
        assert runtime.queue.take_due(limit=1) == [Ticket(KEYS[0], False, Priority.FIRST)]
        finish(8)
        assert len(runtime.queue.take_due(limit=process._capacity())) == 8
        assert runtime.queue.due_count() == 2
        assert process._report_capacity() == window(4)  # too few due to hold the reports
        process._submit_report(Ticket(KEYS[1], False, Priority.RESYNC))
        assert sent == [Ticket(KEYS[1], False, Priority.RESYNC)]
    finally:
        process.stop()


def test_work_handed_to_a_stopped_embedded_executor_is_dropped_without_a_traceback(caplog):
    """A rollout timer or the dispatcher may fire as the process stops: the pool is shut down
    by then, and the work is dropped (the next leader's lists schedule it again), never
    raised on the timer's or the dispatcher's thread."""
    runtime = _process_runtime()
    process = operator_process.OperatorProcess(runtime, leader_election=False)
    executor = process.executor
    process.stop()
    with caplog.at_level(logging.DEBUG, logger="workers.leader.executors"):
        executor.evaluate_rollout(KEYS[0])
        executor.reconcile(Ticket(KEYS[1], False, Priority.NORMAL))
    assert executor.capacity() == executors.EMBEDDED_WORKERS  # nothing counted as running
    assert [r.getMessage() for r in caplog.records] == [
        f"rollout evaluation of {KEYS[0]} dropped: the process is stopping",
        f"reconcile of {KEYS[1]} dropped: the process is stopping",
    ]
