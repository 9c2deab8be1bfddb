"""The recorder (controlplane/observations/recording.py): one RunResult becomes observation rows
(design.md principle 3). An unchanged run only bumps the object's counters and "last checked";
a run that wrote or emitted something keeps a ReconcileRun row, its condition changes and its
events; rows hold names, reasons, messages, generations and times only, never a value, cursor
or stamp (S0.4); recording never raises and never holds a reconcile up. Real database
(pytest-django); the row bounds are in test_observation_bounds.py."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import DataError, OperationalError
from django.forms.models import model_to_dict

from controlplane.observations import recording
from controlplane.observations.models import (
    ConditionChange,
    EventRecord,
    ReconcileRun,
    StatusReport,
    TrackedObject,
)
from controlplane.observations.recording import BackgroundRecorder, record_run, record_runs
from workers.engine.conditions import Condition, as_dict
from workers.engine.outcome import Outcome, Requeue
from workers.engine.ports import Event
from workers.engine.reconcile import RunResult

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UID = "uid-1"
CANARY = "canary-4b1d-value"  # stands for a value, a cursor or a stamp


def _condition(type_: str, status: str, reason: str, message: str = "", **extra: Any) -> dict:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": 3,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        **extra,
    }


SYNCED_READY = [
    _condition("Ready", "True", "Reconciled"),
    _condition("Synced", "True", "Current", "up to date"),
]


def _result(
    *,
    reason: str = "Current",
    requeue: Requeue = Requeue.RESYNC,
    before: list[dict] | None = None,
    after: list[dict] | None = None,
    status_written: bool = False,
    events: list[Event] | None = None,
    uid: str = UID,
    **outcome: Any,
) -> RunResult:
    before = SYNCED_READY if before is None else before
    return RunResult(
        outcome=Outcome(reason=reason, requeue=requeue, **outcome),
        namespace="ns",
        name="app",
        uid=uid,
        generation=3,
        conditions_before=before,
        conditions_after=before if after is None else after,
        status_written=status_written,
        events_emitted=events or [],
    )


def _rows(model: type) -> list[dict[str, Any]]:
    return [model_to_dict(row) for row in model.objects.all()]


@pytest.mark.django_db
def test_an_unchanged_run_only_bumps_the_counters_and_last_checked():
    """S4.17 steady state: no status write, no Secret write, no event => no history row."""
    record_run(_result(lifecycle="Synced"), T0, 0.01)
    record_run(_result(lifecycle="Synced"), T0 + timedelta(minutes=5), 0.01)

    tracked = TrackedObject.objects.get(uid=UID)
    assert (tracked.runs_total, tracked.runs_unchanged) == (2, 2)
    assert tracked.last_checked_at == T0 + timedelta(minutes=5)
    assert tracked.last_changed_at is None
    assert (tracked.namespace, tracked.name, tracked.generation) == ("ns", "app", 3)
    assert tracked.ready is True and tracked.synced_reason == "Current"
    assert tracked.lifecycle == "Synced"
    for model in (ReconcileRun, ConditionChange, EventRecord):
        assert not model.objects.exists(), model.__name__


@pytest.mark.parametrize(
    "change",
    [
        {"status_written": True},
        {"wrote_secret": True},
        {"events": [Event("Normal", "Delivered", "delivered 2 keys")]},
    ],
    ids=["status", "secret", "event"],
)
@pytest.mark.django_db
def test_any_write_or_event_makes_the_run_a_change_with_its_row(change):
    record_run(_result(), T0, 0.01)  # first an unchanged run
    record_run(_result(reason="Delivered", lifecycle="Synced", **change), T0 + timedelta(1), 0.5)

    tracked = TrackedObject.objects.get(uid=UID)
    assert (tracked.runs_total, tracked.runs_unchanged) == (2, 1)
    assert tracked.last_changed_at == T0 + timedelta(1)
    [run] = ReconcileRun.objects.all()
    assert (run.uid, run.namespace, run.name) == (UID, "ns", "app")
    assert run.started_at == T0 + timedelta(1) and run.duration_ms == 500
    assert (run.reason, run.lifecycle, run.requeue) == ("Delivered", "Synced", "resync")
    assert run.status_written is change.get("status_written", False)
    assert run.wrote_secret is change.get("wrote_secret", False)


@pytest.mark.django_db
def test_a_failed_run_keeps_its_row_with_reason_message_and_backoff():
    """S4.11: FetchFailed, Retained, a Warning event and backoff; the message is kept as the
    engine wrote it (value-free by construction)."""
    message = "fetch failed: HTTP 503 from the Hikyo server"
    after = [
        _condition("Ready", "False", "Blocked", "Synced is False"),
        _condition("Synced", "False", "FetchFailed", message),
    ]
    record_run(
        _result(
            reason="FetchFailed",
            message=message,
            requeue=Requeue.BACKOFF,
            lifecycle="Retained",
            fetched=True,
            after=after,
            status_written=True,
            events=[Event("Warning", "FetchFailed", message)],
        ),
        T0,
        2.0,
    )
    [run] = ReconcileRun.objects.all()
    assert (run.reason, run.message, run.requeue) == ("FetchFailed", message, "backoff")
    assert (run.lifecycle, run.fetched, run.wrote_secret) == ("Retained", True, False)
    tracked = TrackedObject.objects.get(uid=UID)
    assert tracked.ready is False and tracked.synced_reason == "FetchFailed"
    assert tracked.lifecycle == "Retained"
    assert [(c["type"], c["reason"]) for c in tracked.conditions] == [
        ("Ready", "Blocked"),
        ("Synced", "FetchFailed"),
    ]


@pytest.mark.django_db
def test_a_failed_run_whose_status_write_and_event_failed_too_keeps_its_row():
    """A backoff run that wrote nothing (its status write and its event failed as well) is
    still a change: the failure is kept as a ReconcileRun row, not counted as unchanged."""
    message = "status write failed: HTTP 503 from the apiserver"
    record_run(_result(reason="FetchFailed", message=message, requeue=Requeue.BACKOFF), T0, 0.3)
    [run] = ReconcileRun.objects.all()
    assert (run.reason, run.message, run.requeue) == ("FetchFailed", message, "backoff")
    assert (run.status_written, run.wrote_secret) == (False, False)
    assert not EventRecord.objects.exists()
    tracked = TrackedObject.objects.get(uid=UID)
    assert (tracked.runs_total, tracked.runs_unchanged) == (1, 0)
    assert tracked.last_changed_at == T0


@pytest.mark.django_db
def test_condition_changes_become_rows_and_message_only_changes_do_not():
    """A condition that appears, changes status or reason, or disappears is one row; one whose
    status and reason stay (its message may move) is none."""
    before = [
        _condition("Ready", "True", "Reconciled"),
        _condition("Synced", "True", "Current", "up to date"),
        _condition("Scrubbed", "True", "AuthorizationWithdrawn", "scrubbed"),
        _condition("CredentialExpiry", "True", "ExpiresSoon", "expires in 3 days"),
    ]
    after = [
        _condition("Ready", "False", "Blocked", "Delivery is False"),
        _condition("Synced", "True", "Delivered", "delivered"),
        _condition("Delivery", "False", "KeysMissing", "keys missing: db-password"),
        _condition("CredentialExpiry", "True", "ExpiresSoon", "expires in 2 days"),
    ]
    record_run(_result(before=before, after=after, status_written=True), T0, 0.1)

    changes = {
        row.type: (row.old_status, row.old_reason, row.new_status, row.new_reason, row.message)
        for row in ConditionChange.objects.all()
    }
    assert changes == {
        "Ready": ("True", "Reconciled", "False", "Blocked", "Delivery is False"),
        "Synced": ("True", "Current", "True", "Delivered", "delivered"),
        "Delivery": ("", "", "False", "KeysMissing", "keys missing: db-password"),
        "Scrubbed": ("True", "AuthorizationWithdrawn", "", "", ""),
    }
    assert all(row.at == T0 and row.uid == UID for row in ConditionChange.objects.all())


@pytest.mark.django_db
def test_emitted_events_become_rows_as_given():
    events = [
        Event("Normal", "Delivered", "delivered 2 keys into Secret app"),
        Event("Warning", "Stalled", "Deployment/web did not roll out"),
    ]
    record_run(_result(events=events), T0, 0.1)
    rows = EventRecord.objects.order_by("id")
    assert [(r.type, r.reason, r.message, r.at, r.uid) for r in rows] == [
        (e.type, e.reason, e.message, T0, UID) for e in events
    ]


@pytest.mark.django_db
def test_no_value_cursor_or_stamp_reaches_any_row():
    """S0.4: the outcome's status fields (cursor, binding, stamps) and any condition field
    beyond type/status/reason/message/facts/observedGeneration/lastTransitionTime stay out of
    the database; only what the rows are for is stored."""
    leaky = [
        _condition("Ready", "True", "Reconciled", cursor=CANARY, data={"password": CANARY}),
        _condition("Synced", "True", "Delivered", "delivered", lastStamp=CANARY),
    ]
    record_run(
        _result(
            reason="Delivered",
            after=leaky,
            status_written=True,
            wrote_secret=True,
            status={"cursor": CANARY, "cursorBinding": CANARY, "stamp": CANARY},
            events=[Event("Normal", "Delivered", "delivered 1 key")],
        ),
        T0,
        0.1,
    )
    stored = {
        model.__name__: _rows(model)
        for model in (TrackedObject, ReconcileRun, ConditionChange, EventRecord, StatusReport)
    }
    assert stored["ReconcileRun"] and stored["EventRecord"]  # the sweep below is not vacuous
    assert CANARY not in json.dumps(stored, default=str)
    [condition, _] = TrackedObject.objects.get(uid=UID).conditions
    assert set(condition) == {
        "type",
        "status",
        "reason",
        "message",
        "facts",
        "observedGeneration",
        "lastTransitionTime",
    }


@pytest.mark.django_db
def test_a_run_s_record_keeps_the_facts_of_the_condition_its_reason_set():
    missing = Condition(
        "Delivery", "False", "KeysMissing", "keys missing: db-password", {"keys": "db-password"}
    )
    result = _result(
        reason="KeysMissing",
        conditions={"Delivery": missing},
        after=[*SYNCED_READY, as_dict(missing)],
        status_written=True,
    )
    record_run(result, T0, 0.1)
    assert ReconcileRun.objects.get(uid=UID).facts == {"keys": "db-password"}


@pytest.mark.django_db
def test_a_run_without_a_uid_records_nothing():
    """R0: the CR is gone; there is no object to attach the run to."""
    record_run(_result(uid="", status_written=True), T0, 0.1)
    assert not TrackedObject.objects.exists() and not ReconcileRun.objects.exists()


@pytest.mark.django_db
def test_a_failing_recording_is_logged_never_raised_and_leaves_no_half_rows(caplog):
    """Recording must not break a reconcile; its transaction leaves nothing half-written."""
    record_run(_result(), T0, 0.01)
    broken = _result(
        reason="Delivered",
        status_written=True,
        after=[_condition("Ready", "True", "Reconciled", message=object())],  # not JSON
        events=[Event("Normal", "Delivered", "delivered")],
    )
    record_run(broken, T0 + timedelta(1), 0.1)  # does not raise
    assert "recording the reconcile of ns/app failed" in caplog.text
    tracked = TrackedObject.objects.get(uid=UID)
    assert tracked.runs_total == 1 and tracked.last_checked_at == T0  # rolled back
    for model in (ReconcileRun, ConditionChange, EventRecord):
        assert not model.objects.exists(), model.__name__


@pytest.mark.django_db
def test_a_store_that_refuses_is_one_line_and_a_defect_keeps_its_traceback(caplog, monkeypatch):
    """A locked or unreachable store is an operating condition (one line, no traceback); a
    bug in the recorder is not, and keeps its traceback to be found."""

    def locked(run: object) -> None:
        raise OperationalError("database is locked\nsecond line")

    monkeypatch.setattr(recording, "_record_alone", locked)
    record_run(_result(), T0, 0.1)
    (record,) = [r for r in caplog.records if "recording the reconcile" in r.getMessage()]
    assert record.getMessage() == "recording the reconcile of ns/app failed: database is locked"
    assert record.exc_info is None

    for defect in (KeyError("a defect"), DataError("value too long for type varchar(253)")):

        def broken(run: object, defect: Exception = defect) -> None:
            raise defect

        caplog.clear()
        monkeypatch.setattr(recording, "_record_alone", broken)
        record_run(_result(), T0, 0.1)
        (record,) = [r for r in caplog.records if "recording the reconcile" in r.getMessage()]
        assert record.getMessage() == "recording the reconcile of ns/app failed"
        assert record.exc_info is not None and record.exc_info[0] is type(defect)


def test_the_background_recorder_never_blocks_the_caller_and_drops_when_full(monkeypatch):
    """design.md principle 3: a reconcile hands its result over and goes on; with the writer
    stuck and the backlog full a run is dropped and counted, never waited for."""
    written: list[RunResult] = []
    writing = threading.Event()
    release = threading.Event()

    def slow_record_runs(runs: list[tuple[RunResult, datetime, float]]) -> None:
        writing.set()
        assert release.wait(10)
        written.extend(result for result, _, _ in runs)

    monkeypatch.setattr(recording, "record_runs", slow_record_runs)
    recorder = BackgroundRecorder(backlog=1)
    first, second, third = (_result(reason=f"run {n}") for n in range(3))
    try:
        recorder(first, T0, 0.1)
        assert writing.wait(10)  # the writer holds the first run
        recorder(second, T0, 0.1)  # fills the backlog
        recorder(third, T0, 0.1)  # returns at once: dropped
        assert recorder.dropped == 1
        release.set()
        recorder.flush(timeout=10)
        assert written == [first, second]
    finally:
        release.set()
        recorder.close()


@pytest.mark.django_db
def test_a_backlog_is_written_in_one_batch_where_a_failing_write_loses_only_itself(caplog):
    """Issue 13: the writer takes what is queued in one transaction (one commit, not one per
    run); a broken run, in a batch of runs or alone, neither raises nor takes the others with
    it, nor does a write function that raises."""
    first = _result(reason="Delivered", status_written=True, uid="uid-a")
    broken = _result(
        reason="Delivered",
        status_written=True,
        after=[_condition("Ready", "True", "Reconciled", message=object())],  # not JSON
        uid="uid-b",
    )

    def raising(_: list[Any]) -> None:
        raise RuntimeError("a write that does not catch its own failure")

    last = _result(reason="Delivered", status_written=True, uid="uid-c")
    BackgroundRecorder._write(
        [
            (record_runs, (first, T0, 0.1)),
            (record_runs, (broken, T0, 0.1)),
            (raising, ()),
            (record_runs, (last, T0, 0.1)),
        ]
    )
    assert set(TrackedObject.objects.values_list("uid", flat=True)) == {"uid-a", "uid-c"}
    assert set(ReconcileRun.objects.values_list("uid", flat=True)) == {"uid-a", "uid-c"}
    assert "recording the reconcile of ns/app failed" in caplog.text
    assert "recording an observation failed" in caplog.text


@pytest.mark.django_db
def test_interleaved_runs_and_reports_are_one_call_per_kind_in_queue_order():
    """Issue 37: a worker's report follows each of its runs, so its backlog alternates; each
    kind's writes still go together (a call costs a savepoint and its statements however
    many writes it holds), each in the order queued."""
    calls: list[tuple[str, list[int]]] = []

    def runs(args: list[int]) -> None:
        calls.append(("runs", args))

    def reports(args: list[int]) -> None:
        calls.append(("reports", args))

    BackgroundRecorder._write([(runs, 1), (reports, 2), (runs, 3), (reports, 4), (runs, 5)])
    assert calls == [("runs", [1, 3, 5]), ("reports", [2, 4])]


@pytest.mark.django_db(transaction=True)
def test_the_writer_drains_a_backlog_in_order_after_a_slow_write(monkeypatch):
    """Runs queued while the writer was busy are all written, in order, as one batch."""
    batches: list[list[str]] = []
    writing, release = threading.Event(), threading.Event()
    real_record_runs = recording.record_runs

    def recording_runs(runs: list[tuple[RunResult, datetime, float]]) -> None:
        if not batches:
            writing.set()
            assert release.wait(10)
        batches.append([result.uid for result, _, _ in runs])
        real_record_runs(runs)

    monkeypatch.setattr(recording, "record_runs", recording_runs)
    recorder = BackgroundRecorder(backlog=10)
    uids = [f"uid-{n}" for n in range(6)]
    try:
        recorder(_result(uid=uids[0]), T0, 0.1)
        assert writing.wait(10)
        for uid in uids[1:]:
            recorder(_result(uid=uid), T0, 0.1)
        release.set()
        recorder.flush(timeout=10)
        assert batches == [uids[:1], uids[1:]]
        assert recorder.dropped == 0
        assert sorted(TrackedObject.objects.values_list("uid", flat=True)) == uids
    finally:
        release.set()
        recorder.close()


def _first_sync(uid: str) -> RunResult:
    return _result(
        reason="Delivered",
        before=[],
        after=SYNCED_READY,
        status_written=True,
        wrote_secret=True,
        events=[Event("Normal", "Delivered", "3 keys")],
        uid=uid,
        status={"keyCount": 3},
    )


def _no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if the batch gave up and recorded its runs one by one."""

    def fell_back(*_: Any) -> None:
        pytest.fail("the batch was recorded run by run")

    monkeypatch.setattr(recording, "record_run", fell_back)


@pytest.mark.django_db
def test_a_batch_of_first_syncs_costs_the_same_few_statements_however_many_runs_it_holds(
    monkeypatch,
):
    """Issue 13: one SELECT for the batch's rows and one INSERT per table, not five
    statements per run."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for size in (3, 30):
        runs = [(_first_sync(f"uid-{size}-{n}"), T0, 0.1) for n in range(size)]
        _no_fallback(monkeypatch)
        with CaptureQueriesContext(connection) as queries:
            record_runs(runs)
        counts.append(len(queries))
        assert ReconcileRun.objects.filter(uid__startswith=f"uid-{size}-").count() == size
        assert EventRecord.objects.filter(uid__startswith=f"uid-{size}-").count() == size
        assert ConditionChange.objects.filter(uid__startswith=f"uid-{size}-").count() == 2 * size
    assert counts[0] == counts[1]


@pytest.mark.django_db
def test_runs_of_one_object_in_one_batch_add_up_on_its_row(monkeypatch):
    _no_fallback(monkeypatch)
    record_runs([(_first_sync(UID), T0, 0.1), (_result(), T0 + timedelta(seconds=30), 0.1)])
    tracked = TrackedObject.objects.get(uid=UID)
    assert (tracked.runs_total, tracked.runs_unchanged) == (2, 1)
    assert (tracked.last_changed_at, tracked.last_checked_at) == (T0, T0 + timedelta(seconds=30))
    assert ReconcileRun.objects.filter(uid=UID).count() == 1


@pytest.mark.django_db
def test_an_unchanged_run_in_a_batch_updates_what_it_changed_and_keeps_the_rest(monkeypatch):
    record_runs([(_first_sync(UID), T0, 0.1)])
    first_seen = TrackedObject.objects.get(uid=UID).first_seen_at
    _no_fallback(monkeypatch)
    record_runs([(_result(), T0 + timedelta(seconds=30), 0.1)])
    tracked = TrackedObject.objects.get(uid=UID)
    assert (tracked.runs_total, tracked.runs_unchanged) == (2, 1)
    assert tracked.last_checked_at == T0 + timedelta(seconds=30)
    assert (tracked.key_count, tracked.ready, tracked.last_changed_at) == (3, True, T0)
    assert tracked.first_seen_at == first_seen


@pytest.mark.django_db
def test_a_batch_that_races_another_writer_is_recorded_run_by_run_and_loses_nothing(monkeypatch):
    """A scaled worker added one object's row after this batch read none: the batch's insert
    fails as a whole, then each run is recorded alone and that row is updated."""
    record_runs([(_first_sync("b"), T0, 0.1)])  # the other writer's row
    missed: list[bool] = []
    real_rows = recording.tracked_rows

    def rows_missed_once(uids: list[str]) -> dict[str, TrackedObject]:
        if not missed:
            missed.append(True)
            return {}
        return real_rows(uids)

    monkeypatch.setattr(recording, "tracked_rows", rows_missed_once)
    record_runs([(_first_sync(uid), T0 + timedelta(seconds=1), 0.1) for uid in ("a", "b", "c")])
    assert missed
    assert TrackedObject.objects.get(uid="b").runs_total == 2
    assert sorted(ReconcileRun.objects.values_list("uid", flat=True)) == ["a", "b", "b", "c"]
    assert set(TrackedObject.objects.values_list("uid", flat=True)) == {"a", "b", "c"}


@pytest.mark.django_db
@pytest.mark.parametrize("gone_last", [True, False])
def test_a_gone_run_in_a_batch_keeps_its_place_in_the_order(gone_last):
    """R0 found the CR gone: marked deleted when that came last, live again when a later run
    of that UID found it after all."""
    live = (_result(), T0, 0.1)
    gone = (RunResult(Outcome("Gone", Requeue.NONE), "ns", "app", gone_uid=UID), T0, 0.1)
    record_runs([live, gone] if gone_last else [gone, live])
    deleted = TrackedObject.objects.get(uid=UID).deleted_at
    assert (deleted is not None) is gone_last


# -- what the dashboard's "why" needs (issue 35) ----------------------------------------------


@pytest.mark.django_db
def test_a_run_that_stops_before_the_fetch_keeps_the_spec_names_and_the_blocker_message():
    names = {"instance": "old", "credential": "ledger-token", "org": "org_a", "namespace": "ns"}
    after = [
        _condition("Ready", "False", "Blocked", "not ready: Synced/FetchFailed"),
        _condition("Synced", "False", "FetchFailed", "HikyoInstance old not found"),
        _condition("Rollout", "False", "Stalled", "not progressed: Deployment/web"),
    ]
    result = _result(reason="FetchFailed", requeue=Requeue.BACKOFF, after=after)
    result.names = names
    record_run(result, T0, 0.01)
    row = TrackedObject.objects.get(uid=UID)
    assert row.instance == "old"  # from spec.instanceRef.name: no fetch was made
    assert row.names == names
    assert row.blocking == "Synced/FetchFailed"
    assert row.blocking_message == "HikyoInstance old not found"
    assert row.warnings == "Rollout/Stalled"
    assert row.paused_until is None


@pytest.mark.django_db
def test_a_429_pause_is_kept_until_the_run_that_fetches_again():
    waiting = _result(reason="InstancePaused", requeue=Requeue.AFTER, delay=42.0)
    waiting.names = {"instance": "eu", "org": "org_a"}
    record_run(waiting, T0, 0.01)
    assert TrackedObject.objects.get(uid=UID).paused_until == T0 + timedelta(seconds=42)
    fetched = _result(reason="Current", fetched=True)
    fetched.fetch_status = 304
    record_run(fetched, T0 + timedelta(seconds=43), 0.01)
    assert TrackedObject.objects.get(uid=UID).paused_until is None


@pytest.mark.django_db
def test_the_workloads_a_run_restamped_are_kept_with_the_run_and_the_object():
    result = _result(reason="Delivered", wrote_secret=True)
    result.rolled = ["Deployment/web", "StatefulSet/db"]
    record_run(result, T0, 0.01)
    (run,) = ReconcileRun.objects.all()
    assert run.rolled == "Deployment/web, StatefulSet/db"
    row = TrackedObject.objects.get(uid=UID)
    assert (row.rolled, row.rolled_at) == ("Deployment/web, StatefulSet/db", T0)
    record_run(_result(), T0 + timedelta(minutes=5), 0.01)  # a later run restamps nothing
    assert TrackedObject.objects.get(uid=UID).rolled == "Deployment/web, StatefulSet/db"


@pytest.mark.django_db
def test_a_cr_whose_only_recorded_runs_waited_shows_the_state_they_read():
    """Issue 49: in scaled mode a Ready CR whose runs only met a 429 pause (nothing written)
    showed as Unreconciled; the run read its lifecycle and Ready condition, and says so."""
    waited = _result(reason="InstancePaused", requeue=Requeue.AFTER, delay=3.0)
    waited.lifecycle = "Synced"
    record_run(waited, T0, 0.01)
    tracked = TrackedObject.objects.get(uid=UID)
    assert tracked.lifecycle == "Synced" and tracked.ready is True


@pytest.mark.django_db
def test_an_s4_1_9_wait_is_kept_from_its_first_run_until_a_run_that_did_not_wait():
    later = T0 + timedelta(seconds=30)
    record_run(_result(reason="InstanceUnresponsive", requeue=Requeue.AFTER), T0, 0.01)
    record_run(_result(reason="InstanceUnresponsive", requeue=Requeue.AFTER), later, 0.01)
    tracked = TrackedObject.objects.get(uid=UID)
    assert (tracked.waiting_reason, tracked.waiting_since) == ("InstanceUnresponsive", T0)
    assert tracked.last_checked_at == later  # the last try
    record_run(_result(reason="CredentialUnanswered", requeue=Requeue.AFTER), later, 0.01)
    tracked.refresh_from_db()
    assert (tracked.waiting_reason, tracked.waiting_since) == ("CredentialUnanswered", later)
    # Its probe got no answer either (its own timeout): the wait goes on, since when it began.
    probe = _result(reason="FetchFailed", requeue=Requeue.BACKOFF, fetched=True)
    record_run(probe, later + timedelta(seconds=3), 0.01)
    tracked.refresh_from_db()
    assert (tracked.waiting_reason, tracked.waiting_since) == ("CredentialUnanswered", later)
    answered = replace(_result(reason="Current", fetched=True), fetch_status=304)
    record_run(answered, later + timedelta(seconds=5), 0.01)
    tracked.refresh_from_db()
    assert (tracked.waiting_reason, tracked.waiting_since) == ("", None)
