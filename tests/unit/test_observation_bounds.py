"""Every observation table is bounded (issue 7 item 5, design.md principle 3): per HikyoSecret
the latest N rows of each kind stay, and everything about a CR no longer reconciled (deleted)
is forgotten after a week. Real database (pytest-django), the recorder's own write paths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane.observations import recording
from controlplane.observations.managers import (
    FORGET_UNCHECKED_AFTER,
    KEEP_CONDITION_CHANGES_PER_OBJECT,
    KEEP_EVENTS_PER_OBJECT,
    KEEP_REPORTS_PER_OBJECT,
    KEEP_RUNS_PER_OBJECT,
)
from controlplane.observations.models import (
    ConditionChange,
    EventRecord,
    ReconcileRun,
    ResyncRequest,
    StatusReport,
    TrackedObject,
)
from controlplane.observations.recording import (
    PRUNE_EVERY,
    forget_unchecked,
    record_report,
    record_reports,
    record_run,
)
from workers.engine.outcome import Outcome, Requeue
from workers.engine.ports import Event
from workers.engine.reconcile import RunResult
from workers.keys import ObjectKey
from workers.reporting import ReportAttempt

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MOST_KEPT = max(KEEP_RUNS_PER_OBJECT, KEEP_CONDITION_CHANGES_PER_OBJECT, KEEP_EVENTS_PER_OBJECT)


def _ready(status: str) -> list[dict[str, str]]:
    reason = "Delivered" if status == "True" else "FetchFailed"
    return [{"type": "Ready", "status": status, "reason": reason, "message": ""}]


def _record_flap(uid: str, n: int, at: datetime) -> None:
    """Run ``n`` of a CR that flaps: Ready flips, one event, a status write (so every kind of
    row is written, each naming ``n``)."""
    before, after = ("False", "True") if n % 2 else ("True", "False")
    result = RunResult(
        outcome=Outcome(reason="Delivered", requeue=Requeue.RESYNC, message=f"run {n}"),
        namespace="ns",
        name=f"app-{uid}",
        uid=uid,
        generation=1,
        conditions_before=_ready(before),
        conditions_after=_ready(after),
        status_written=True,
        events_emitted=[Event("Normal", "Delivered", f"run {n}")],
    )
    record_run(result, at, 0.01)


def test_a_flapping_hikyosecret_keeps_only_its_latest_rows_of_each_kind():
    total = MOST_KEPT + 3 * PRUNE_EVERY  # the last run is one that prunes
    for n in range(total):
        _record_flap("flappy", n, T0 + timedelta(seconds=n))
    for n in range(3):
        _record_flap("calm", n, T0 + timedelta(seconds=n))

    for model, keep in (
        (ReconcileRun, KEEP_RUNS_PER_OBJECT),
        (ConditionChange, KEEP_CONDITION_CHANGES_PER_OBJECT),
        (EventRecord, KEEP_EVENTS_PER_OBJECT),
    ):
        kept = model.objects.filter(uid="flappy")
        assert kept.count() == keep, model.__name__
        # the newest are the ones kept: exactly the last ``keep`` runs' rows
        messages = set(kept.values_list("message", flat=True))
        if model is ConditionChange:
            assert len(messages) == 1  # condition messages are the condition's, not the run's
        else:
            assert messages == {f"run {n}" for n in range(total - keep, total)}, model.__name__
        time_field = "started_at" if model is ReconcileRun else "at"
        oldest = kept.order_by(time_field).values_list(time_field, flat=True).first()
        assert oldest == T0 + timedelta(seconds=total - keep), model.__name__
        assert model.objects.filter(uid="calm").count() == 3  # the bound is per object
    assert TrackedObject.objects.get(uid="flappy").runs_total == total  # counters keep counting


def test_rows_are_pruned_every_few_changing_runs_so_a_table_overshoots_by_at_most_that():
    total = KEEP_RUNS_PER_OBJECT + PRUNE_EVERY
    for n in range(total):
        _record_flap("flappy", n, T0 + timedelta(seconds=n))
    assert ReconcileRun.objects.filter(uid="flappy").count() == KEEP_RUNS_PER_OBJECT

    for n in range(total, total + PRUNE_EVERY - 1):  # no prune in between
        _record_flap("flappy", n, T0 + timedelta(seconds=n))
        kept = ReconcileRun.objects.filter(uid="flappy").count()
        assert kept == KEEP_RUNS_PER_OBJECT + n - total + 1
    assert (
        EventRecord.objects.filter(uid="flappy").count() == KEEP_EVENTS_PER_OBJECT + PRUNE_EVERY - 1
    )

    _record_flap("flappy", total + PRUNE_EVERY - 1, T0 + timedelta(seconds=total + PRUNE_EVERY))
    for model, keep in (
        (ReconcileRun, KEEP_RUNS_PER_OBJECT),
        (EventRecord, KEEP_EVENTS_PER_OBJECT),
    ):
        assert model.objects.filter(uid="flappy").count() == keep, model.__name__
    newest = ReconcileRun.objects.filter(uid="flappy").order_by("-started_at").first()
    assert newest is not None and newest.message == f"run {total + PRUNE_EVERY - 1}"


def test_the_first_run_of_an_object_adds_its_row_with_that_runs_fields_and_later_runs_update_it():
    _record_flap("fresh", 1, T0)
    tracked = TrackedObject.objects.get(uid="fresh")
    assert (tracked.runs_total, tracked.runs_unchanged, tracked.ready) == (1, 0, True)
    assert (tracked.last_checked_at, tracked.last_changed_at) == (T0, T0)
    assert tracked.first_seen_at is not None
    _record_flap("fresh", 2, T0 + timedelta(seconds=1))
    tracked = TrackedObject.objects.get(uid="fresh")
    assert (tracked.runs_total, tracked.ready) == (2, False)


def test_a_row_added_by_another_writer_between_read_and_insert_is_updated_not_lost(monkeypatch):
    """Scaled workers share one database: when another writer adds the object's row after
    this run found none, the insert fails and this run's counts go onto that row."""
    _record_flap("raced", 1, T0)  # the other writer's row
    missed = []
    real_rows = recording.tracked_rows

    def rows_missed_once(uids: list[str]) -> dict[str, TrackedObject]:
        if not missed:
            missed.append(True)
            return {}  # as if read before the other writer committed
        return real_rows(uids)

    monkeypatch.setattr(recording, "tracked_rows", rows_missed_once)
    _record_flap("raced", 2, T0 + timedelta(seconds=1))

    assert missed
    tracked = TrackedObject.objects.get(uid="raced")
    assert (tracked.runs_total, tracked.ready) == (2, False)
    assert ReconcileRun.objects.filter(uid="raced").count() == 2


def test_status_reports_keep_only_the_latest_per_object():
    total = KEEP_REPORTS_PER_OBJECT + 10
    key, other = ObjectKey("ns", "app", "reported"), ObjectKey("ns", "other", "quiet")
    for n in range(total):
        record_report(ReportAttempt(key, T0 + timedelta(seconds=n), 200, f"accepted {n}"))
    record_report(ReportAttempt(other, T0, 200, "accepted"))

    kept = StatusReport.objects.filter(uid=key.uid)
    assert kept.count() == KEEP_REPORTS_PER_OBJECT
    assert set(kept.values_list("outcome", flat=True)) == {
        f"accepted {n}" for n in range(total - KEEP_REPORTS_PER_OBJECT, total)
    }
    assert StatusReport.objects.filter(uid=other.uid).count() == 1


def test_a_backlog_of_status_reports_is_one_insert_and_one_prune_for_all_its_objects():
    keys = [ObjectKey("ns", f"app-{n}", f"reported-{n}") for n in range(3)]
    for start in range(0, KEEP_REPORTS_PER_OBJECT, 50):  # each object at its bound
        record_reports(
            [
                ReportAttempt(key, T0 + timedelta(seconds=n), 204, f"accepted {n}")
                for n in range(start, start + 50)
                for key in keys
            ]
        )
    newest = KEEP_REPORTS_PER_OBJECT
    backlog = [
        ReportAttempt(key, T0 + timedelta(seconds=n), 204, f"accepted {n}")
        for n in (newest, newest + 1)
        for key in keys
    ]

    with CaptureQueriesContext(connection) as queries:
        record_reports(backlog)

    statements = [q["sql"].split(" ", 1)[0] for q in queries.captured_queries]
    assert statements.count("INSERT") == 1 and statements.count("DELETE") == 1
    for key in keys:
        kept = StatusReport.objects.filter(uid=key.uid)
        assert kept.count() == KEEP_REPORTS_PER_OBJECT
        assert set(kept.values_list("outcome", flat=True)) == {
            f"accepted {n}" for n in range(2, newest + 2)
        }


def test_a_status_report_that_cannot_be_stored_loses_only_itself_from_its_backlog():
    good, bad = ObjectKey("ns", "good", "good"), ObjectKey("ns", "bad", "bad")
    unstorable = [{"type": "Ready", "status": object()}]  # not JSON: the batch INSERT fails
    record_reports(
        [
            ReportAttempt(good, T0, 204, "accepted"),
            ReportAttempt(bad, T0, 204, "accepted", unstorable),  # type: ignore[list-item]
            ReportAttempt(good, T0 + timedelta(seconds=1), 204, "accepted again"),
        ]
    )

    assert sorted(StatusReport.objects.filter(uid="good").values_list("outcome", flat=True)) == [
        "accepted",
        "accepted again",
    ]
    assert not StatusReport.objects.filter(uid="bad").exists()


def test_a_deleted_hikyosecrets_rows_are_forgotten_once_unchecked_for_a_week():
    _record_flap("deleted", 0, T0)  # its last run: then the CR went away
    record_report(ReportAttempt(ObjectKey("ns", "app-deleted", "deleted"), T0, 200, "accepted"))
    ResyncRequest.objects.create(
        uid="deleted", namespace="ns", name="app-deleted", at=T0, value="r1", requested_by="ops"
    )
    _record_flap("live", 0, T0)
    just_before = T0 + FORGET_UNCHECKED_AFTER - timedelta(minutes=1)
    _record_flap("live", 1, just_before)  # a live CR is checked every resyncInterval

    assert forget_unchecked(just_before) == 0  # not a week yet: nothing goes
    assert TrackedObject.objects.filter(uid="deleted").exists()

    assert forget_unchecked(T0 + FORGET_UNCHECKED_AFTER + timedelta(minutes=1)) == 1
    assert not TrackedObject.objects.filter(uid="deleted").exists()
    for model in (ReconcileRun, ConditionChange, EventRecord, StatusReport, ResyncRequest):
        assert not model.objects.filter(uid="deleted").exists(), model.__name__
    assert TrackedObject.objects.filter(uid="live").exists()
    assert ReconcileRun.objects.filter(uid="live").count() == 2
