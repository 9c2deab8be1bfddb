"""The engine's recorder: turns a RunResult into observation rows. Never raises.

Unchanged runs (no status write, no Secret write, no event) only bump the object's counters and
"last checked" time (design.md principle 3); everything else keeps a ReconcileRun row. Every
table is bounded: the latest few hundred rows of each kind per object (managers.py), and all
rows of an object not checked for a week (a deleted CR) are forgotten.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction

from workers.engine.conditions import READY, SYNCED, Condition
from workers.engine.decide_after_fetch import UNANSWERED_WAITS
from workers.engine.explain import blocking_condition
from workers.engine.outcome import Requeue
from workers.engine.reconcile import RunResult
from workers.reporting import ReportAttempt, attempt_fields

from .healing import HEALER
from .managers import FORGET_UNCHECKED_AFTER
from .models import (
    ConditionChange,
    EventRecord,
    ReconcileRun,
    ResyncRequest,
    StatusReport,
    TrackedObject,
)
from .why import warning_names

log = logging.getLogger(__name__)

_KEPT_CONDITION_FIELDS = (
    "type",
    "status",
    "reason",
    "message",
    "facts",  # the names the remediation needs (Condition.facts), never a value
    "observedGeneration",
    "lastTransitionTime",
)


def _by_type(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        c["type"]: {k: c.get(k) for k in _KEPT_CONDITION_FIELDS} for c in conditions if "type" in c
    }


Run = tuple[RunResult, datetime, float]  # a result, when its run started, how long it took


def record_run(result: RunResult, started: datetime, duration_seconds: float) -> None:
    """Records one reconcile; a recording failure is logged, never raised (it must not block)."""
    for attempt in (1, 2):
        try:
            if result.uid:
                _record_alone((result, started, duration_seconds))
            elif result.outcome.reason == "Gone":
                _mark_gone(result, started)
            break
        except Exception as error:
            if attempt == 1 and _healed(error):
                continue  # the store was re-created empty: migrated, so once more
            _log_failure(error, "recording the reconcile of %s/%s", result.namespace, result.name)
            break
    _sweep_now_and_then(started)


def _log_failure(error: BaseException, what: str, *args: object) -> None:
    """A store that refused or timed out (locked, unreachable, a statement timeout, a
    deadlock: OperationalError, InterfaceError) is an operating condition: one line. Anything
    else, a constraint or a too-long value included, is a defect and keeps its traceback. The
    store never holds a value, so its errors cannot quote one."""
    if isinstance(error, (OperationalError, InterfaceError)):
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        log.error(f"{what} failed: %s", *args, first_line)
    else:
        log.exception(f"{what} failed", *args)


def _healed(error: BaseException) -> bool:
    """A missing table noted and, outside a transaction, migrated: worth one more try."""
    return HEALER.note(error) and not connection.in_atomic_block and HEALER.heal()


def record_runs(runs: Sequence[Run]) -> None:
    """Records a backlog of reconciles with one SELECT and one INSERT per table for all of
    them (issue 13: per run, the ORM's statements were a third of the embedded operator's CPU).
    Never raises: when the batch fails as a whole (another writer added an object's row
    meanwhile, or one run cannot be stored), each run is recorded alone, so a broken one loses
    only itself. A gone run (R0) ends the batch before it, so the order of its mark holds."""
    for has_uid, group in itertools.groupby(runs, key=lambda run: bool(run[0].uid)):
        batch = list(group)
        if has_uid:
            try:
                with transaction.atomic():
                    _record(batch)
                continue
            except Exception:  # each run alone below, which logs what fails
                pass
        for run in batch:
            record_run(*run)
    if runs:
        _sweep_now_and_then(runs[-1][1])


# A changing run writes a few rows of each kind (one run, at most one per condition type, its
# events), so pruning every PRUNE_EVERY-th changing run keeps each table within its bound plus
# a few dozen rows, for a tenth of the DELETEs (issue 13: they were a fifth of the recorder).
PRUNE_EVERY = 10


def _record_alone(run: Run) -> None:
    """One run. When another writer (a scaled worker) added the object's row after this run
    found none, the insert fails; the second try finds that row and updates it."""
    for attempt in range(2):
        try:
            with transaction.atomic():
                _record([run])
            return
        except IntegrityError:
            if attempt:
                raise IntegrityError(
                    f"the observation row of {run[0].uid} could be neither read nor added"
                ) from None


# What _note_run sets on an object's row: all but its identity and when it was first seen.
_NOTED_FIELDS = [
    f.name
    for f in TrackedObject._meta.concrete_fields
    if not f.primary_key and f.name not in ("uid", "first_seen_at")
]


def tracked_rows(uids: list[str]) -> dict[str, TrackedObject]:
    """The objects' rows that exist, by UID: one SELECT."""
    return TrackedObject.objects.in_bulk(uids, field_name="uid")


def _record(runs: list[Run]) -> None:
    """Unchanged runs (no status write, no Secret write, no event) only note the object's
    counters and "last checked"; a changing one also keeps its run, its condition changes and
    its events. Objects seen the first time are INSERTed, the others UPDATEd."""
    found = tracked_rows(sorted({result.uid for result, _, _ in runs}))
    was = {uid: {f: getattr(row, f) for f in _NOTED_FIELDS} for uid, row in found.items()}
    added: dict[str, TrackedObject] = {}
    rows: dict[type, list[Any]] = {ReconcileRun: [], ConditionChange: [], EventRecord: []}
    pruned: set[str] = set()
    for result, started, duration_seconds in runs:
        tracked = found.get(result.uid) or added.get(result.uid)
        if tracked is None:
            tracked = added[result.uid] = TrackedObject(uid=result.uid)
        outcome, after = result.outcome, _by_type(result.conditions_after)
        # A failed run is kept as a row even when its status write and event failed too.
        failed = outcome.requeue is Requeue.BACKOFF
        changed = (
            result.status_written
            or outcome.wrote_secret
            or bool(result.events_emitted)
            or bool(result.rolled)
            or failed
        )
        _note_run(tracked, result, started, after, changed)
        if not changed:
            continue
        _changing_rows(rows, result, started, duration_seconds, after)
        if (tracked.runs_total - tracked.runs_unchanged) % PRUNE_EVERY == 0:
            pruned.add(result.uid)
    TrackedObject.objects.bulk_create(added.values())
    for uid in sorted(found):  # in one order, so two scaled writers' batches cannot deadlock
        tracked = found[uid]
        # Only the fields this batch changed: an unchanged run's UPDATE is then a few columns.
        tracked.save(update_fields=[f for f in _NOTED_FIELDS if getattr(tracked, f) != was[uid][f]])
    for model, new in rows.items():
        model.objects.bulk_create(new)
    for model in rows:
        model.objects.prune(*sorted(pruned))


def _changing_rows(
    rows: dict[type, list[Any]],
    result: RunResult,
    started: datetime,
    duration_seconds: float,
    after: dict[str, dict[str, Any]],
) -> None:
    """A changing run's row, its condition changes (status or reason; a message alone is no
    change) and its events, added to ``rows``."""
    outcome = result.outcome
    identity = {"uid": result.uid, "namespace": result.namespace, "name": result.name}
    rows[ReconcileRun].append(
        ReconcileRun(
            **identity,
            started_at=started,
            duration_ms=max(0, round(duration_seconds * 1000)),
            reason=outcome.reason,
            message=outcome.message,
            lifecycle=outcome.lifecycle or "",
            requeue=outcome.requeue.value,
            fetched=outcome.fetched,
            wrote_secret=outcome.wrote_secret,
            status_written=result.status_written,
            forced_sync=(outcome.forced_sync or "")[:253],
            rolled=", ".join(result.rolled),
            facts=_run_facts(outcome.conditions.values(), outcome.reason),
        )
    )
    before = _by_type(result.conditions_before)
    for type_ in sorted(set(before) | set(after)):
        old, new = before.get(type_) or {}, after.get(type_) or {}
        if (old.get("status"), old.get("reason")) == (new.get("status"), new.get("reason")):
            continue
        rows[ConditionChange].append(
            ConditionChange(
                **identity,
                at=started,
                type=type_,
                old_status=old.get("status") or "",
                old_reason=old.get("reason") or "",
                new_status=new.get("status") or "",
                new_reason=new.get("reason") or "",
                message=new.get("message") or "",
            )
        )
    rows[EventRecord].extend(
        EventRecord(
            **identity, at=started, type=event.type, reason=event.reason, message=event.message
        )
        for event in result.events_emitted
    )


def _run_facts(conditions: Iterable[Condition | None], reason: str) -> dict[str, str]:
    """The facts of the condition that gave the run its reason, if it set one."""
    for condition in conditions:
        if condition is not None and condition.reason == reason:
            return dict(condition.facts)
    return {}


def _note_run(
    tracked: TrackedObject,
    result: RunResult,
    started: datetime,
    after: dict[str, dict[str, Any]],
    changed: bool,
) -> None:
    outcome = result.outcome
    tracked.namespace, tracked.name = result.namespace, result.name
    tracked.generation = result.generation
    tracked.conditions = list(after.values())
    ready = after.get(READY)
    tracked.ready = None if ready is None else ready.get("status") == "True"
    tracked.synced_reason = (after.get(SYNCED) or {}).get("reason") or ""
    # A run that waited (a pause) keeps the lifecycle it read: never "Unreconciled" for a CR
    # whose only recorded runs waited (issue 49: scaled mode's paused Ready CRs).
    lifecycle = outcome.lifecycle or result.lifecycle
    if lifecycle:
        tracked.lifecycle = lifecycle[:32]
    tracked.last_checked_at = started
    tracked.deleted_at = None  # a run found it: live (again)
    stored = list(after.values())
    blocker = blocking_condition({"conditions": stored, "lifecycle": tracked.lifecycle or None})
    tracked.blocking = blocker.name if blocker else ""
    tracked.blocking_message = blocker.message if blocker else ""
    tracked.last_outcome = outcome.reason[:64]
    _note_dashboard_fields(tracked, result, started)
    tracked.warnings = warning_names(stored, blocker, tracked.last_fetch_ok_at)[:500]
    tracked.runs_total += 1
    if changed:
        tracked.last_changed_at = started
    else:
        tracked.runs_unchanged += 1


def _note_waiting(tracked: TrackedObject, result: RunResult, started: datetime) -> None:
    """S4.1.9: a run that waited on an unanswering instance starts (or continues) the wait; a
    probe that got no answer either (its own timeout) continues it; any other run ends it."""
    outcome = result.outcome
    if outcome.reason in UNANSWERED_WAITS:
        if tracked.waiting_reason != outcome.reason or tracked.waiting_since is None:
            tracked.waiting_reason, tracked.waiting_since = outcome.reason, started
    elif not (tracked.waiting_reason and outcome.fetched and result.fetch_status is None):
        tracked.waiting_reason, tracked.waiting_since = "", None


def _note_dashboard_fields(tracked: TrackedObject, result: RunResult, started: datetime) -> None:
    """The list's columns that a RunResult tells when it knows them; names and counts only
    (``outcome.status`` also holds the cursor and stamp: only keyCount/lastDelivery are read)."""
    outcome = result.outcome
    target = result.target
    if isinstance(target, str) and target:
        tracked.target = target[:253]
    if result.names:
        tracked.names = result.names
    # The instance the spec names, so a CR that stops before its fetch counts under it too.
    instance = result.names.get("instance") or result.instance
    if instance:
        tracked.instance = instance[:253]
    if outcome.reason == "InstancePaused" or result.fetch_status == 429:  # S4.1.6
        tracked.paused_until = started + timedelta(seconds=outcome.delay or 0.0)
    elif outcome.fetched:
        tracked.paused_until = None
    _note_waiting(tracked, result, started)
    if "keyCount" in outcome.status:
        count = outcome.status["keyCount"]
        tracked.key_count = count if isinstance(count, int) and count >= 0 else None
    if outcome.status.get("lastDelivery"):
        tracked.last_delivery_at = started
    if result.fetch_status is not None or result.fetch_seconds is not None:
        tracked.last_fetch_at = started
        tracked.last_fetch_status = result.fetch_status
        if result.fetch_status in (200, 304):
            tracked.last_fetch_ok_at = started
    if result.rolled:
        tracked.rolled, tracked.rolled_at = ", ".join(result.rolled)[:500], started
    if outcome.forced_sync and result.status_written:
        tracked.last_forced_sync = outcome.forced_sync[:253]
        tracked.last_forced_sync_at = started


def _mark_gone(result: RunResult, started: datetime) -> None:
    """R0 found the CR gone (deleted, or replaced by a new object with the same name): its row
    is shown as deleted until forget_unchecked removes it with its history.

    A gone run names the UID it was queued for (``gone_uid``); without one (``manage.py
    reconcile``), rows are matched by name, only rows
    last checked before this run started (a run that began later and found the name live is
    about the new object, and any later run of a live object clears ``deleted_at`` again)."""
    gone_uid = result.gone_uid
    rows = TrackedObject.objects.filter(deleted_at__isnull=True)
    if gone_uid:
        rows = rows.filter(uid=gone_uid)
    else:
        rows = rows.filter(
            namespace=result.namespace, name=result.name, last_checked_at__lt=started
        )
    rows.update(deleted_at=started)


def record_report(attempt: ReportAttempt) -> None:
    """One S7 attempt; like record_run it never raises."""
    try:
        with transaction.atomic():
            StatusReport.objects.create(**attempt_fields(attempt))
            StatusReport.objects.prune(attempt.key.uid)
    except Exception as error:
        HEALER.note(error)
        _log_failure(error, "recording the status report of %s", attempt.key)


SWEEP_EVERY_SECONDS = 3600.0  # forgetting is a few indexed deletes; hourly keeps it cheap
# Not at start: after a long outage, live CRs must first be checked again (a full resync round)
# before the ones still unchecked can be taken for deleted.
FIRST_SWEEP_AFTER_SECONDS = 24 * 3600.0
_next_sweep = [time.monotonic() + FIRST_SWEEP_AFTER_SECONDS]  # in this process


def _sweep_now_and_then(now: datetime) -> None:
    if time.monotonic() < _next_sweep[0]:
        return
    _next_sweep[0] = time.monotonic() + SWEEP_EVERY_SECONDS
    try:
        forgotten = forget_unchecked(now)
    except Exception:
        log.exception("forgetting deleted HikyoSecrets' observations failed")
        return
    if forgotten:
        log.info("forgot the observations of %d HikyoSecrets not seen for a week", forgotten)


def forget_unchecked(now: datetime) -> int:
    """Removes every row about objects not reconciled since ``now - FORGET_UNCHECKED_AFTER``
    (deleted CRs: a live one is checked every resyncInterval); returns how many objects."""
    cutoff = now - FORGET_UNCHECKED_AFTER
    stale = list(
        TrackedObject.objects.filter(last_checked_at__lt=cutoff).values_list("uid", flat=True)
    )
    forgotten = 0
    for start in range(0, len(stale), 500):  # bounded IN lists
        with transaction.atomic():
            # Again, in the transaction: one checked meanwhile is live after all.
            uids = list(
                TrackedObject.objects.filter(
                    uid__in=stale[start : start + 500], last_checked_at__lt=cutoff
                ).values_list("uid", flat=True)
            )
            for model in (ReconcileRun, ConditionChange, EventRecord, StatusReport, ResyncRequest):
                model.objects.filter(uid__in=uids).delete()
            TrackedObject.objects.filter(uid__in=uids).delete()
        forgotten += len(uids)
    return forgotten


RECORD_BATCH = 50  # writes per transaction at most, so the SQLite write lock is held briefly
# How long the writer waits for more writes to join the first of a batch: a batch costs a few
# statements however many runs it holds (record_runs), and history may lag by this much.
GATHER_SECONDS = 0.5

Write = Callable[[list[Any]], None]  # takes the arguments of consecutive writes of its kind


def record_reports(attempts: list[ReportAttempt]) -> None:
    """A backlog of attempts in one INSERT and one prune (issue 37: per attempt, three
    statements and a savepoint were most of a scaled worker's recorder). Never raises: when
    the batch fails, each attempt is recorded alone, so a broken one loses only itself."""
    try:
        with transaction.atomic():
            StatusReport.objects.bulk_create(
                StatusReport(**attempt_fields(attempt)) for attempt in attempts
            )
            StatusReport.objects.prune(*sorted({attempt.key.uid for attempt in attempts}))
    except Exception:  # each alone below, which logs what fails
        for attempt in attempts:
            record_report(attempt)


class BackgroundRecorder:
    """Hands runs to one writer thread, so reconciles never wait for the database (design.md
    principle 3) and an embedded process's threads never contend for SQLite's write lock.
    When the backlog is full a run is dropped and counted: history, never correctness."""

    def __init__(self, backlog: int = 10_000) -> None:
        self._queue: queue.Queue[tuple[Write, Any] | None] = queue.Queue(backlog)
        self.dropped = 0
        self._thread = threading.Thread(target=self._drain, name="recorder", daemon=True)
        self._thread.start()

    def __call__(self, result: RunResult, started: datetime, duration_seconds: float) -> None:
        self._put(record_runs, (result, started, duration_seconds))

    def report(self, attempt: ReportAttempt) -> None:
        self._put(record_reports, attempt)

    def _put(self, write: Write, arg: Any) -> None:
        try:
            self._queue.put_nowait((write, arg))
        except queue.Full:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("observation backlog full: %d runs not recorded", self.dropped)

    def _drain(self) -> None:
        stopping = False
        while not stopping:
            batch = [self._queue.get()]
            gathered_by = time.monotonic() + GATHER_SECONDS
            while len(batch) < RECORD_BATCH and batch[-1] is not None:
                try:
                    batch.append(self._queue.get(timeout=max(0.0, gathered_by - time.monotonic())))
                except queue.Empty:
                    break
            stopping = batch[-1] is None
            HEALER.heal()  # a table found missing last time: migrate first, outside the batch
            try:
                self._write([item for item in batch if item is not None])
            finally:
                for _ in batch:
                    self._queue.task_done()
        connection.close()

    @staticmethod
    def _write(items: list[tuple[Write, Any]]) -> None:
        """A backlog is written in one transaction (one commit, not one per run: issue 13);
        the writes of one kind go to their write function together, in queue order, each call
        in its own savepoint, so one that fails loses only its own. A lone call needs no batch.
        Kinds are gathered across the backlog, not only where consecutive: a worker's report
        follows each of its runs, so consecutive groups were mostly of one (issue 37). Each
        kind writes its own tables, so only the order within a kind matters."""
        by_kind: dict[Write, list[Any]] = {}
        for write, arg in items:
            by_kind.setdefault(write, []).append(arg)
        calls = list(by_kind.items())
        if len(calls) <= 1:
            for write, args in calls:
                write(args)
            return
        try:
            with transaction.atomic():
                for write, args in calls:
                    try:
                        with transaction.atomic():
                            write(args)
                    except Exception as error:  # the writes log their own; a last net
                        HEALER.note(error)
                        _log_failure(error, "recording an observation")
        except Exception as error:  # the commit itself failed: the batch is lost, the next tries
            HEALER.note(error)
            _log_failure(error, "recording a batch of observations")

    def flush(self, timeout: float = 10.0) -> None:
        """Waits until the backlog is written (shutdown, tests)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(timeout=5)
