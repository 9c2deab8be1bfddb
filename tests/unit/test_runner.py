"""The runner (workers/runner.py): one queued reconcile under its per-key lock (S4.1.4), its
writes fenced on lock, deadline and (embedded mode) the Lease, settled exactly once with the
outcome's requeue (S4.1.3). A real in-memory queue, a recording cluster and a fake reconcile;
the guard's own timing is covered by test_run_guard.py."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from redis.exceptions import RedisError
from urllib3.exceptions import HTTPError

from k8s.errors import FenceLost, KubeError
from tests.support.clocks import FakeClock
from tests.support.jitter import FixedJitter
from tests.support.waiting import wait_for
from workers import runner
from workers.engine.outcome import Outcome, Requeue
from workers.engine.ports import SecretObject
from workers.engine.reconcile import RunResult
from workers.engine.reports import RIDE_MARGIN_SECONDS, heartbeat_slack
from workers.engine.settings import OperatorSettings
from workers.keys import ObjectKey
from workers.queue.base import Lock, Priority
from workers.queue.memory import MemoryQueue
from workers.runtime import Runtime

KEY = ObjectKey("ns", "app", "uid-1")
CANARY = "canary-7f3e-not-for-logs"
# Assertions failing inside a fake reconcile: run_locked would swallow them (it backs off on
# any exception), so they are kept here and fail the test at teardown.
BODY_FAILURES: list[AssertionError] = []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CountingQueue(MemoryQueue):
    """A real MemoryQueue that counts ``finish`` and ``renew`` calls."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.clock = clock or time.monotonic
        super().__init__(clock=self.clock)
        self.finished: list[Requeue] = []
        self.renewed_at: list[float] = []
        self.renewed = threading.Event()

    def finish(self, lock: Lock, requeue: Requeue, **timer: Any) -> float | None:
        self.finished.append(requeue)
        return super().finish(lock, requeue, **timer)

    def renew(self, lock: Lock, ttl: float = 120.0) -> bool:
        held = super().renew(lock, ttl)
        self.renewed_at.append(self.clock())
        self.renewed.set()
        return held


class RecordingCluster:
    """Only what the fake reconciles call: one read and one write."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def get_secret(self, namespace: str, name: str) -> None:
        return None

    def create_secret(self, secret: SecretObject) -> SecretObject:
        self.writes.append(secret.name)
        return secret

    def patch_hikyosecret_status(
        self, namespace: str, name: str, patch: dict[str, Any], resource_version: str
    ) -> None:
        self.writes.append(f"status {namespace}/{name}")


class SlowFinishQueue(CountingQueue):
    """A CountingQueue whose ``finish`` from the lock renewer (the guard abandoning the run)
    signals ``finishing`` and then blocks until ``release``: the guard is caught mid-release."""

    def __init__(self) -> None:
        super().__init__()
        self.finishing = threading.Event()
        self.release = threading.Event()

    def finish(self, lock: Lock, requeue: Requeue, **timer: Any) -> float | None:
        if threading.current_thread().name == "lock-renewer":
            self.finishing.set()
            self.release.wait(5)
        return super().finish(lock, requeue, **timer)


def _raising(error: BaseException) -> Callable[[Any], RunResult]:
    def body(engine: Any) -> RunResult:
        raise error

    return body


def _secret(name: str = "app") -> SecretObject:
    return SecretObject(namespace=KEY.namespace, name=name)


def _result(requeue: Requeue = Requeue.RESYNC, *, uid: str = KEY.uid, **outcome: Any) -> RunResult:
    named = ("status_written", "resync_seconds", "reads_kept")
    fields = {k: outcome.pop(k) for k in named if k in outcome}
    return RunResult(
        outcome=Outcome(reason="Test", requeue=requeue, **outcome),
        namespace=KEY.namespace,
        name=KEY.name,
        uid=uid,
        **fields,
    )


class Harness:
    """A Runtime over a real MemoryQueue and a recording cluster; ``reconcile`` is faked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, clock: Clock | None = None) -> None:
        self.queue = CountingQueue(clock)
        self.reports = MemoryQueue()
        self.cluster = RecordingCluster()
        self.recorded: list[RunResult] = []
        self.leader = True
        self.runtime = Runtime(
            settings=OperatorSettings(operator_namespace="hikyo-system"),
            cluster=self.cluster,  # type: ignore[arg-type]
            queue=self.queue,
            reports=self.reports,
            record=lambda result, started, seconds: self.recorded.append(result),
            identity="worker-a",
            leader_ok=lambda: self.leader,
        )
        self.calls: list[dict[str, Any]] = []
        self._monkeypatch = monkeypatch

    def fake(self, body: Callable[[Any], RunResult]) -> None:
        def reconcile(engine, namespace, name, uid, *, forced_full=False):
            self.calls.append({"key": (namespace, name, uid), "forced_full": forced_full})
            try:
                return body(engine)
            except AssertionError as failed:
                BODY_FAILURES.append(failed)
                raise

        self._monkeypatch.setattr(runner, "reconcile", reconcile)

    def take(self) -> Lock:
        self.queue.add(KEY)
        assert self.queue.take_due()
        lock = self.queue.begin(KEY, "worker-a", ttl=runner.LOCK_TTL_SECONDS)
        assert lock is not None
        return lock

    def run(self, forced_full: bool = False) -> tuple[Lock, RunResult | None]:
        lock = self.take()
        return lock, runner.run_locked(self.runtime, lock, forced_full)


def _no_guard_left() -> None:
    """The run's renewer thread ends with the run: none is left behind."""
    wait_for(
        lambda: not [t for t in threading.enumerate() if t.name == "lock-renewer"],
        timeout=5,
        interval=0.005,
        what="the lock renewer to end",
    )


@pytest.fixture(autouse=True)
def _guards_end():
    BODY_FAILURES.clear()
    yield
    _no_guard_left()
    if BODY_FAILURES:
        raise BODY_FAILURES[0]


# -- holding and settling ---------------------------------------------------------------------


def test_a_run_holds_its_lock_and_settles_once_with_its_outcomes_resync(monkeypatch):
    """S4.1.4: the reconcile runs under the lock, its writes pass the fence; S4.1.3: the
    outcome's RESYNC sets the next due time from the CR's resyncInterval and resets the
    failure count."""
    h = Harness(monkeypatch)
    h.fake(_raising(RuntimeError("a first run fails")))
    h.run()
    assert h.queue.failures(KEY) == 1
    h.queue.finished.clear()
    h.calls.clear()

    seen: dict[str, Any] = {}

    def body(engine):
        seen["held"] = h.queue.holds(lock_box[0])
        engine.cluster.create_secret(_secret())
        return _result(Requeue.RESYNC, resync_seconds=600.0)

    lock_box: list[Lock] = []
    h.fake(body)
    lock_box.append(h.take())
    result = runner.run_locked(h.runtime, lock_box[0])

    assert seen["held"] is True
    assert h.cluster.writes == ["app"]
    assert result is not None and h.recorded == [result]
    assert h.queue.finished == [Requeue.RESYNC]
    assert not h.queue.holds(lock_box[0])
    assert h.queue.failures(KEY) == 0
    assert 600 * 0.9 - 1 <= h.queue.due_in(KEY) <= 600 * 1.1  # resyncInterval x [0.9, 1.1]
    assert h.calls == [{"key": KEY.as_args(), "forced_full": False}]


def test_an_after_outcome_keeps_its_delay_the_failure_count_and_a_forced_full_next(monkeypatch):
    """S4.10.0: a first 404 asks for a confirming run after a delay, withholding the cursor;
    it is no backoff step."""
    clock = Clock()
    h = Harness(monkeypatch, clock=clock)
    h.fake(_raising(KubeError("get hikyosecrets ns/app", 503)))
    h.run()
    clock.now += 1000  # the backoff is over
    h.fake(lambda engine: _result(Requeue.AFTER, delay=30.0, forced_full_next=True))
    _, result = h.run(forced_full=True)

    assert result is not None
    assert h.calls[-1]["forced_full"] is True  # the ticket's forced_full reaches reconcile
    assert h.queue.failures(KEY) == 1  # kept, not reset, not stepped
    assert h.queue.due_in(KEY) == pytest.approx(30.0)
    assert h.queue.take_due() == []  # not yet due
    clock.now += 30  # the confirming run is due, its cursor withheld
    [ticket] = h.queue.take_due()
    assert ticket.key == KEY and ticket.forced_full is True


def test_a_gone_cr_is_settled_without_a_timer_and_forgotten(monkeypatch):
    """R0: gone (no uid in the result) => nothing scheduled; its failure count goes too."""
    h = Harness(monkeypatch)
    h.fake(_raising(RuntimeError("fails once")))
    h.run()
    assert h.queue.failures(KEY) == 1
    h.queue.finished.clear()
    h.fake(lambda engine: _result(Requeue.RESYNC, uid=""))
    _, result = h.run()
    assert result is not None and result.uid == ""
    assert h.queue.finished == [Requeue.NONE]  # not the outcome's RESYNC
    assert h.queue.due_in(KEY) is None and h.queue.failures(KEY) == 0
    assert h.queue.depth() == 0


@pytest.mark.parametrize(
    ("status_written", "reporting", "queued"),
    [(True, True, True), (False, True, False), (True, False, False)],
)
def test_a_status_write_queues_a_report_first(monkeypatch, status_written, reporting, queued):
    """S7.4: a report follows every status write, when reporting is on."""
    h = Harness(monkeypatch)
    h.runtime.settings = OperatorSettings(
        operator_namespace="hikyo-system", status_reporting=reporting
    )
    h.fake(lambda engine: _result(Requeue.RESYNC, status_written=status_written))
    h.run()
    tickets = h.reports.take_due()
    if queued:
        assert [(t.key, t.priority) for t in tickets] == [(KEY, Priority.FIRST)]
    else:
        assert tickets == []


@pytest.mark.parametrize(
    ("heartbeat_in", "reads_kept", "rides"),
    [(100.0, True, True), (330.0, True, True), (331.0, True, False), (100.0, False, False)],
)
def test_a_due_heartbeat_rides_on_the_run_s_reads_and_never_an_early_one(
    monkeypatch, heartbeat_in, reads_kept, rides
):
    """S7.4 rev 4 with S7.1 rev 3: after a 204 the report queue holds the next heartbeat P
    plus one resync at the jitter's high end (330 s at a 5-minute resync); a run that wrote
    nothing but kept its reads carries it once P has passed (at most 330 s are left) and never
    before, so it goes with those reads instead of alone later, reading the CR and credential
    again."""
    h = Harness(monkeypatch)
    h.reports = h.runtime.reports = MemoryQueue(FakeClock())  # no time passes in the run
    h.reports.schedule(KEY, delay=heartbeat_in, priority=Priority.NORMAL)
    h.fake(lambda engine: _result(Requeue.RESYNC, resync_seconds=300.0, reads_kept=reads_kept))
    h.run()
    _assert_rode(h, rides, heartbeat_in)


def _assert_rode(h: Harness, rides: bool, heartbeat_in: float) -> None:
    """The heartbeat rode (its report queued first), or it stays due when it was."""
    tickets = h.reports.take_due()
    if rides:
        assert [(t.key, t.priority) for t in tickets] == [(KEY, Priority.FIRST)]
    else:
        assert tickets == [] and h.reports.due_in(KEY) == heartbeat_in


@pytest.mark.parametrize(
    ("heartbeat_in", "next_run_in"),
    [(100.0, 300.0 + RIDE_MARGIN_SECONDS), (331.0, 270.0)],
)
def test_a_run_whose_report_goes_comes_again_no_earlier_than_the_heartbeat_it_sets(
    monkeypatch, heartbeat_in, next_run_in
):
    """S7.4 rev 4 with S4.1.3 (a 5-minute resync, so P = the resync): the report sent with
    this run makes the next heartbeat due P later, so the next run is drawn no earlier than
    that (a draw of 0.9 x resync would come too early to carry it, and it would go alone with
    its own reads). A run that sent no report keeps its draw."""
    h = Harness(monkeypatch)
    lowest = FixedJitter(0.9, (0.9, 1.1))  # a 300 s resync comes 270 s later unless raised
    h.queue = h.runtime.queue = MemoryQueue(rng=lowest)  # type: ignore[assignment]
    h.reports = h.runtime.reports = MemoryQueue(FakeClock())
    h.reports.schedule(KEY, delay=heartbeat_in, priority=Priority.NORMAL)
    h.fake(lambda engine: _result(Requeue.RESYNC, resync_seconds=300.0, reads_kept=True))
    h.run()
    assert h.queue.due_in(KEY) == pytest.approx(next_run_in, abs=0.5)


@pytest.mark.parametrize("lag", [0.0, 150.0, 170.0])
def test_keys_running_late_never_bring_a_heartbeat_forward(monkeypatch, lag):
    """S7.4 rev 4: a heartbeat is never sent before it is due, however late the next run may
    come: one due in 200 s with a 30 s resync stays due then (a run at or after it carries
    it, or it goes alone)."""
    h = Harness(monkeypatch)
    h.reports = h.runtime.reports = MemoryQueue(FakeClock())
    h.reports.schedule(KEY, delay=200.0 + heartbeat_slack(30.0), priority=Priority.NORMAL)
    h.runtime.schedule_lag.note(lag)
    h.fake(lambda engine: _result(Requeue.RESYNC, resync_seconds=30.0, reads_kept=True))
    h.run()
    _assert_rode(h, False, 200.0 + heartbeat_slack(30.0))


@pytest.mark.parametrize("threads_free", [True, False])
@pytest.mark.parametrize("status_written", [True, False])
def test_embedded_hands_a_run_s_report_straight_to_the_report_threads(
    monkeypatch, threads_free, status_written
):
    """Embedded (Runtime.hand_report): the report goes at once, while the run's reads are
    fresh. With every report thread busy, a status write's report is queued first, and a
    heartbeat that would have ridden stays due when it was: the next run may carry it."""
    h = Harness(monkeypatch)
    h.reports = h.runtime.reports = MemoryQueue(FakeClock())
    h.reports.schedule(KEY, delay=100.0, priority=Priority.NORMAL)
    handed: list[ObjectKey] = []
    h.runtime.hand_report = lambda runtime, key: threads_free and not handed.append(key)
    h.fake(
        lambda engine: _result(
            Requeue.RESYNC, resync_seconds=300.0, reads_kept=True, status_written=status_written
        )
    )
    h.run()
    assert handed == ([KEY] if threads_free else [])
    tickets = h.reports.take_due()
    if status_written and not threads_free:
        assert [(t.key, t.priority) for t in tickets] == [(KEY, Priority.FIRST)]
    else:
        assert tickets == [] and h.reports.due_in(KEY) == 100.0


def test_run_reconcile_takes_the_lock_itself(monkeypatch):
    h = Harness(monkeypatch)
    held: list[bool] = []

    def body(engine):
        held.append(h.queue.begin(KEY, "worker-b") is None)  # someone holds it: us
        return _result(Requeue.RESYNC)

    h.fake(body)
    h.queue.add(KEY)
    assert h.queue.take_due()
    assert runner.run_reconcile(h.runtime, KEY) is not None
    assert held == [True]
    assert h.queue.begin(KEY, "worker-b") is not None  # released after the run


def test_run_reconcile_with_the_key_held_elsewhere_runs_nothing_and_marks_it_dirty(monkeypatch):
    """S4.1.4: a trigger during another process's run makes it run once more after."""
    h = Harness(monkeypatch)
    h.fake(lambda engine: pytest.fail("reconciled without the lock"))
    h.queue.add(KEY)
    assert h.queue.take_due()
    other = h.queue.begin(KEY, "worker-b")
    assert other is not None
    assert runner.run_reconcile(h.runtime, KEY) is None
    assert h.calls == [] and h.queue.finished == []
    h.queue.finish(other, Requeue.RESYNC, resync_seconds=600)
    assert h.queue.due_in(KEY) <= 0  # dirty: due again at once, not at the resync
    [ticket] = h.queue.take_due()
    assert ticket.priority is Priority.FIRST


def test_a_second_copy_of_a_broker_message_runs_nothing(monkeypatch):
    """S8.4: the stale check sent a message again while the first still waited in the broker;
    the copy that comes after the first ran finds its key settled: no run, no mark."""
    h = Harness(monkeypatch)
    h.fake(lambda engine: _result(Requeue.RESYNC))
    h.queue.add(KEY)
    assert h.queue.take_due()
    assert runner.run_reconcile(h.runtime, KEY, dispatched_only=True) is not None
    assert runner.run_reconcile(h.runtime, KEY, dispatched_only=True) is None
    assert len(h.calls) == 1 and len(h.queue.finished) == 1
    assert h.queue.take_due() == []  # nothing marked: the next run is the resync
    assert runner.run_reconcile(h.runtime, KEY) is not None  # manage.py reconcile still runs


@pytest.mark.parametrize(
    ("task", "runs", "expected"),
    [
        ("reconcile", "run_reconcile", {"dispatched_only": True}),
        ("reconcile_full", "run_reconcile", {"forced_full": True, "dispatched_only": True}),
        ("report_status", "run_report", {"dispatched_only": True}),
    ],
)
def test_every_task_the_dispatcher_sends_begins_only_a_dispatched_key(
    monkeypatch, task, runs, expected
):
    from workers import tasks

    seen: list[tuple[Any, Any, dict[str, Any]]] = []

    class WorkerRuntime:
        def in_shard(self, tag: str) -> str:
            return f"runtime of {tag!r}"

    monkeypatch.setattr(tasks, "worker_runtime", WorkerRuntime)
    monkeypatch.setattr(
        tasks, runs, lambda runtime, key, **options: seen.append((runtime, key, options))
    )
    getattr(tasks, task).run(*KEY.as_args())
    getattr(tasks, task).run(*KEY.as_args(), shard="s1of3")  # a shard leader's (S4.1.8)
    assert seen == [
        ("runtime of ''", KEY, expected),
        ("runtime of 's1of3'", KEY, expected),
    ]


def test_a_worker_hands_its_runs_reports_to_its_own_report_threads(monkeypatch):
    """Scaled: a worker's run sends its report from that worker, on the reads it kept (S7.1
    rev 3), with the runtime the run was given; queued instead, the broker could give it to
    another worker, which would read the CR and its credential again."""
    from workers import report_threads, tasks

    h = Harness(monkeypatch)
    monkeypatch.setattr(tasks, "build_runtime", lambda *args, **kwargs: h.runtime)
    monkeypatch.setattr(tasks, "_runtime", None)
    monkeypatch.setattr(tasks, "_report_threads", None)
    sent: list[tuple[Any, ObjectKey, bool]] = []
    monkeypatch.setattr(
        report_threads,
        "run_report",
        lambda runtime, key, handed=False: sent.append((runtime, key, handed)),
    )
    try:
        runtime = tasks.worker_runtime()
        assert runtime.hand_report is not None
        assert runtime.hand_report(runtime, KEY)
        wait_for(lambda: bool(sent), 5, 0.01, "the handed report")
        assert sent == [(runtime, KEY, True)]
    finally:
        tasks._stop_report_threads()


# -- the fence --------------------------------------------------------------------------------


def test_renewals_keep_the_lock_past_its_first_ttl(monkeypatch):
    """S4.1.4: TTL 120 s, renewed while the run lasts; the queue's clock moves, not time."""
    monkeypatch.setattr(runner, "RENEW_EVERY_SECONDS", 0.01)
    clock = Clock()
    h = Harness(monkeypatch, clock=clock)

    def body(engine):
        clock.now = 100.0
        h.queue.renewed.clear()
        assert h.queue.renewed.wait(5), "no renewal"
        wait_for(lambda: any(at >= 100.0 for at in h.queue.renewed_at), 5, 0.005, "renewal")
        clock.now = 200.0  # past the first TTL (120 s), within the renewed one
        engine.cluster.create_secret(_secret())
        return _result(Requeue.RESYNC)

    h.fake(body)
    _, result = h.run()
    assert h.cluster.writes == ["app"]
    assert result is not None and h.recorded == [result]
    assert h.queue.finished == [Requeue.RESYNC] and h.queue.failures(KEY) == 0


def test_a_lock_lost_to_another_worker_fences_the_writes_and_the_stale_run_settles_nothing(
    monkeypatch,
):
    """S4.1.4: the lock expired and another worker took it: the write is refused unwritten, and
    the late outcome neither releases nor reschedules the other worker's key."""
    clock = Clock()
    h = Harness(monkeypatch, clock=clock)
    taken: list[Lock] = []

    def body(engine):
        clock.now = runner.LOCK_TTL_SECONDS + 1
        other = h.queue.begin(KEY, "worker-b")
        assert other is not None
        taken.append(other)
        with pytest.raises(FenceLost) as raised:
            engine.cluster.create_secret(_secret())
        assert raised.value.reason == "per-key lock no longer held"
        return _result(Requeue.RESYNC)  # the engine turns a failed write into an outcome

    h.fake(body)
    _, result = h.run()
    assert h.cluster.writes == []
    assert result is not None
    assert h.queue.holds(taken[0])  # worker-b's lock untouched
    assert h.queue.due_in(KEY) is None and h.queue.failures(KEY) == 0  # nothing scheduled


def test_a_fence_lost_that_escapes_the_engine_backs_off_without_touching_the_new_owner(
    monkeypatch,
):
    clock = Clock()
    h = Harness(monkeypatch, clock=clock)
    taken: list[Lock] = []

    def body(engine):
        clock.now = runner.LOCK_TTL_SECONDS + 1
        taken.append(h.queue.begin(KEY, "worker-b"))
        engine.cluster.create_secret(_secret())  # raises FenceLost out of the run
        return _result(Requeue.RESYNC)

    h.fake(body)
    _, result = h.run()
    assert result is None and h.recorded == []
    assert h.cluster.writes == []
    assert h.queue.finished == [Requeue.BACKOFF]
    assert h.queue.holds(taken[0]) and h.queue.failures(KEY) == 0


def test_a_run_that_lost_its_lock_records_no_404_for_the_run_that_took_it_over(monkeypatch):
    """S4.10.0 with S4.1.4: a newer run of the key may have read no 404 record and delivered;
    a record the stale run wrote after that would let a later 404 skip its confirmation. Its
    other notes, and the 404 record of a run that still holds its lock, are written."""
    clock = Clock()
    h = Harness(monkeypatch, clock=clock)
    seen: list[object] = []

    def body(engine):
        engine.store.record_not_found(KEY.uid, "binding-a", 10.0)
        seen.append(h.queue.not_found_seen(KEY.uid))
        clock.now = runner.LOCK_TTL_SECONDS + 1
        assert h.queue.begin(KEY, "worker-b") is not None
        engine.store.clear_not_found(KEY.uid)  # unfenced: deleting never outlives a 200
        engine.store.record_not_found(KEY.uid, "binding-b", clock.now)
        seen.append(h.queue.not_found_seen(KEY.uid))
        engine.store.put_note("capabilities:inst", "status-report", 60.0)
        return _result(Requeue.RESYNC)

    h.fake(body)
    h.run()
    assert seen == [("binding-a", 10.0), None]
    assert h.queue.get_note("capabilities:inst") == "status-report"


def test_in_embedded_mode_a_lost_lease_fences_the_writes(monkeypatch):
    """S4.1.4 "embedded mode: and the Lease": the lock is still held, the Lease is not; the
    reason names the Lease, not the lock."""
    h = Harness(monkeypatch)
    reasons: list[str] = []

    def body(engine):
        engine.cluster.create_secret(_secret("before"))
        h.leader = False
        with pytest.raises(FenceLost) as raised:
            engine.cluster.create_secret(_secret("after"))
        reasons.append(raised.value.reason)
        assert engine.cluster.get_secret("ns", "app") is None  # reads still pass
        return _result(Requeue.RESYNC)

    h.fake(body)
    h.run()
    assert h.cluster.writes == ["before"]
    assert reasons == ["this process no longer holds the leader Lease"]


def test_past_the_deadline_the_run_is_fenced_and_its_late_result_neither_recorded_nor_settled(
    monkeypatch, caplog
):
    """S4.1.4: at the 90 s deadline (shortened here) no further write; the guard releases the
    key with backoff once a write under way has had its grace; the run's own late outcome
    (RESYNC) must not override that."""
    monkeypatch.setattr(runner, "DEADLINE_SECONDS", 0.05)
    monkeypatch.setattr(runner, "WRITE_GRACE_SECONDS", 0.02)
    monkeypatch.setattr(runner, "RENEW_EVERY_SECONDS", 0.01)
    h = Harness(monkeypatch)
    reasons: list[str] = []

    def body(engine):
        def refused() -> str | None:
            try:
                engine.cluster.create_secret(_secret())
            except FenceLost as lost:
                return lost.reason
            return None

        reasons.append(wait_for(refused, 5, 0.005, "the deadline to fence the run"))
        # The guard logs once it has released the key and marked the run abandoned.
        wait_for(lambda: "abandoned at its" in caplog.text, 5, 0.005, "the guard to abandon")
        return _result(Requeue.RESYNC, resync_seconds=600.0)

    h.fake(body)
    with caplog.at_level(logging.WARNING, logger="workers.runner"):
        lock, result = h.run()

    assert reasons == ["reconcile deadline of 0.05 s passed"]
    assert result is None and h.recorded == []
    assert h.queue.finished == [Requeue.BACKOFF]  # by the guard, once
    assert h.queue.failures(KEY) == 1
    assert h.queue.due_in(KEY) <= 5 * 1.2  # backoff, not the 600 s resync
    assert not h.queue.holds(lock) and h.queue.begin(KEY, "worker-b") is not None


def test_a_run_ending_within_the_grace_settles_once_itself(monkeypatch):
    """The deadline fenced the run but it ended before the grace: the run settles (with the
    outcome its refused write led to) and the guard settles nothing more."""
    monkeypatch.setattr(runner, "DEADLINE_SECONDS", 0.05)
    monkeypatch.setattr(runner, "WRITE_GRACE_SECONDS", 30.0)
    h = Harness(monkeypatch)

    def body(engine):
        def refused() -> bool:
            try:
                engine.cluster.create_secret(_secret())
            except FenceLost:
                return True
            return False

        wait_for(refused, 5, 0.005, "the deadline to fence the run")
        return _result(Requeue.BACKOFF)

    h.fake(body)
    lock, result = h.run()
    _no_guard_left()  # the guard has ended: anything it would settle is settled
    assert result is not None and h.recorded == [result]
    assert h.queue.finished == [Requeue.BACKOFF]
    assert h.queue.failures(KEY) == 1 and not h.queue.holds(lock)


def test_a_run_returning_while_the_guard_abandons_it_is_not_recorded_reported_or_logged(
    monkeypatch, caplog
):
    """The guard claims the settlement (marking the run abandoned) before its slow ``finish``:
    a run returning meanwhile must not record, queue a report or log its "run ..." line."""
    monkeypatch.setattr(runner, "DEADLINE_SECONDS", 0.0)  # past at once
    monkeypatch.setattr(runner, "WRITE_GRACE_SECONDS", 0.0)  # abandoned at once
    h = Harness(monkeypatch)
    queue = SlowFinishQueue()
    h.queue = h.runtime.queue = queue

    def body(engine):
        assert queue.finishing.wait(5), "the guard never began releasing the key"
        return _result(Requeue.RESYNC, status_written=True, resync_seconds=600.0)

    h.fake(body)
    with caplog.at_level(logging.INFO, logger="workers.runner"):
        try:
            lock, result = h.run()
        finally:
            queue.release.set()
        _no_guard_left()

    assert result is None and h.recorded == []
    assert h.reports.take_due() == []
    assert "outcome=" not in caplog.text
    assert "abandoned at its" in caplog.text
    assert queue.finished == [Requeue.BACKOFF]  # by the guard, once
    assert queue.failures(KEY) == 1 and not queue.holds(lock)


@pytest.mark.parametrize(
    ("requeue", "extra", "settled"),
    [
        (Requeue.RESYNC, {"resync_seconds": 600.0}, Requeue.BACKOFF),
        (Requeue.AFTER, {"delay": 600.0}, Requeue.BACKOFF),
        (Requeue.NONE, {}, Requeue.NONE),
    ],
    ids=["resync", "after", "none"],
)
def test_a_run_returning_past_its_deadline_within_the_grace_backs_off(
    monkeypatch, requeue, extra, settled
):
    """S4.1.4: past its deadline (the guard not yet abandoning it, within the grace) the run
    settles itself, with backoff whatever its outcome asked for, unless that is NONE."""
    monkeypatch.setattr(runner, "DEADLINE_SECONDS", 0.0)  # past at once
    monkeypatch.setattr(runner, "WRITE_GRACE_SECONDS", 30.0)  # the guard does not abandon
    h = Harness(monkeypatch)
    h.fake(lambda engine: _result(requeue, **extra))
    lock, result = h.run()
    _no_guard_left()

    assert result is not None and h.recorded == [result]
    assert h.queue.finished == [settled]
    assert not h.queue.holds(lock)
    if settled is Requeue.BACKOFF:
        assert h.queue.failures(KEY) == 1
        assert h.queue.due_in(KEY) <= 5 * 1.2  # the first backoff step, not the 600 s
    else:
        assert h.queue.failures(KEY) == 0 and h.queue.due_in(KEY) is None


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        KubeError("get hikyosecrets ns/app", 503),
        OSError(CANARY),
        RedisError(CANARY),
        HTTPError(CANARY),
    ],
    ids=["KubeError", "OSError", "RedisError", "HTTPError"],
)
def test_an_unreachable_apiserver_or_store_backs_off_in_one_value_free_line(
    monkeypatch, caplog, error
):
    """S4.1.3 backoff; S0.4: one line naming the key and the error's kind, no traceback and no
    exception text beyond our own value-free KubeError."""
    h = Harness(monkeypatch)
    h.fake(_raising(error))
    with caplog.at_level(logging.INFO, logger="workers.runner"):
        lock, result = h.run()
    assert result is None and h.recorded == []
    assert h.queue.finished == [Requeue.BACKOFF]
    assert h.queue.failures(KEY) == 1 and h.queue.due_in(KEY) is not None
    assert not h.queue.holds(lock)
    [line] = [r for r in caplog.records if r.name == "workers.runner"]
    assert line.levelno == logging.WARNING and line.exc_info is None
    assert "ns/app" in line.getMessage()
    assert CANARY not in caplog.text


def test_a_bug_in_the_reconcile_backs_off_logs_the_traceback_and_does_not_escape(
    monkeypatch, caplog
):
    h = Harness(monkeypatch)
    h.fake(_raising(ZeroDivisionError("our own bug")))
    with caplog.at_level(logging.ERROR, logger="workers.runner"):
        _, result = h.run()  # does not raise
    assert result is None and h.recorded == []
    assert h.queue.finished == [Requeue.BACKOFF]
    assert h.queue.failures(KEY) == 1
    assert h.queue.begin(KEY, "worker-b") is not None  # released, not left to expire
    [line] = [r for r in caplog.records if r.name == "workers.runner"]
    assert line.exc_info is not None and "ns/app" in line.getMessage()


@pytest.mark.parametrize("failing", ["record", "report"])
def test_a_failing_record_or_report_still_settles_the_key(monkeypatch, failing):
    """Whatever recording (or queueing the S7.4 report) does, the key is released and its next
    run scheduled; it is never left locked until the TTL. The error itself may propagate."""
    h = Harness(monkeypatch)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("recording failed")

    if failing == "record":
        h.runtime.record = broken
    else:
        monkeypatch.setattr(h.reports, "add", broken)
    h.fake(lambda engine: _result(Requeue.RESYNC, status_written=True, resync_seconds=600.0))
    lock = h.take()
    with contextlib.suppress(RuntimeError):
        runner.run_locked(h.runtime, lock)

    assert h.queue.finished == [Requeue.RESYNC]
    assert not h.queue.holds(lock)
    assert h.queue.begin(KEY, "worker-b") is not None  # released, not left to expire
    assert h.queue.failures(KEY) == 0


def test_repeated_failures_step_the_backoff(monkeypatch):
    """S4.1.3: each failed run adds one to the per-CR count."""
    clock = Clock()
    h = Harness(monkeypatch, clock=clock)
    h.fake(_raising(RuntimeError("again")))
    for expected in (1, 2, 3):
        h.run()
        clock.now += 1000  # the retry is due
        assert h.queue.failures(KEY) == expected
    assert h.queue.finished == [Requeue.BACKOFF] * 3


# -- rollout-only evaluations (S4.1.1) --------------------------------------------------------


def test_a_failing_rollout_evaluation_is_one_value_free_line(monkeypatch, caplog):
    h = Harness(monkeypatch)

    def evaluate(engine, namespace, name, uid):
        raise ValueError(CANARY)

    monkeypatch.setattr(runner, "evaluate_rollout", evaluate)
    with caplog.at_level(logging.INFO, logger="workers.runner"):
        runner.run_rollout_evaluation(h.runtime, KEY)  # does not raise
    assert "rollout evaluation of ns/app failed: ValueError" in caplog.text
    assert CANARY not in caplog.text
    assert h.queue.finished == []  # no lock, no queue state


@pytest.mark.parametrize("leader", [True, False])
def test_in_embedded_mode_the_rollout_evaluations_status_write_is_fenced_on_the_lease(
    monkeypatch, leader
):
    """S4.1.4: the rollout-only evaluation takes no lock, but in embedded mode its status
    write still needs the leader Lease: without it the write is refused unwritten."""
    h = Harness(monkeypatch)
    h.leader = leader
    refused: list[str] = []

    def evaluate(engine, namespace, name, uid):
        try:
            engine.cluster.patch_hikyosecret_status(namespace, name, {"conditions": []}, "7")
        except FenceLost as lost:  # the engine turns it into an unwritten status
            refused.append(lost.reason)
            return _result(Requeue.NONE)
        return _result(Requeue.NONE, status_written=True)

    monkeypatch.setattr(runner, "evaluate_rollout", evaluate)
    runner.run_rollout_evaluation(h.runtime, KEY)
    if leader:
        assert refused == [] and h.cluster.writes == ["status ns/app"]
    else:
        assert refused == ["this process no longer holds the leader Lease"]
        assert h.cluster.writes == []
    assert h.queue.finished == []  # still no lock, no queue state


def test_rollout_evaluations_are_coalesced_per_cr():
    """S4.1.1: at most one rollout-only evaluation per CR per interval; requests while one is
    pending join it; distinct CRs are not held back by each other."""
    clock = Clock()
    submitted: list[ObjectKey] = []
    arrived = threading.Semaphore(0)

    def submit(key: ObjectKey) -> None:
        submitted.append(key)
        arrived.release()

    evaluations = runner.RolloutEvaluations(submit, clock=clock)
    evaluations.INTERVAL_SECONDS = 0.2  # real seconds the pending timer waits
    other = ObjectKey("ns", "other", "uid-2")

    evaluations.request(KEY)  # never evaluated: at once
    assert arrived.acquire(timeout=5)
    evaluations.request(KEY)  # just evaluated (clock unchanged): waits out the interval
    evaluations.request(KEY)  # joins the pending one
    evaluations.request(other)  # another CR: at once
    assert arrived.acquire(timeout=5) and arrived.acquire(timeout=5)
    assert sorted(submitted) == sorted([KEY, KEY, other])
    assert submitted[:2] == [KEY, other]  # the other CR did not wait behind KEY's interval


@pytest.mark.parametrize(
    ("status_written", "reporting", "kept"),
    [(False, True, False), (True, True, True), (False, False, False)],
)
def test_a_run_s_reads_stay_in_memory_only_when_a_report_follows(
    monkeypatch, status_written, reporting, kept
):
    """Issue 52: a resync that sends no report drops its reads at once instead of holding the
    CR, its token and instance for 30 s (a wave of 1,000 unchanged resyncs held ~18 MiB)."""
    h = Harness(monkeypatch)
    h.runtime.settings = OperatorSettings(
        operator_namespace="hikyo-system", status_reporting=reporting
    )
    h.reports = h.runtime.reports = MemoryQueue(FakeClock())  # no heartbeat due
    h.reports.schedule(KEY, delay=3600.0, priority=Priority.NORMAL)
    h.runtime.recent_reads.keep(KEY.uid, {"metadata": {"uid": KEY.uid}}, "token")
    h.fake(
        lambda engine: _result(
            Requeue.RESYNC, resync_seconds=300.0, reads_kept=True, status_written=status_written
        )
    )
    h.run()
    assert (h.runtime.recent_reads.take(KEY.uid) is not None) is kept
