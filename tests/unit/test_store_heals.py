"""The observation store heals itself (issue 51): a store re-created empty is migrated again by
the first write or page that meets a missing table, instead of failing until a restart."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.db import ProgrammingError

from controlplane.observations import healing
from controlplane.observations.healing import HEAL_EVERY_SECONDS, Healer, missing_table
from controlplane.observations.migrate_at_start import MigrationFailed
from controlplane.observations.models import TrackedObject
from controlplane.observations.recording import record_run
from workers.engine.outcome import Outcome, Requeue
from workers.engine.reconcile import RunResult

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


class _UndefinedTable(Exception):
    sqlstate = "42P01"  # as psycopg 3 names it


def _wrapped(cause: BaseException) -> ProgrammingError:
    try:
        raise ProgrammingError("relation does not exist") from cause
    except ProgrammingError as error:
        return error


def test_a_missing_table_is_told_by_postgresql_s_code_or_sqlite_s_words():
    assert missing_table(_wrapped(_UndefinedTable()))
    assert missing_table(sqlite3.OperationalError("no such table: observations_trackedobject"))
    assert not missing_table(sqlite3.OperationalError("database is locked"))
    assert not missing_table(ProgrammingError("syntax error"))


def test_the_healer_migrates_once_per_window_and_only_when_a_table_was_missing():
    now, migrations = [100.0], []
    healer = Healer(migrate=lambda: migrations.append(now[0]), clock=lambda: now[0])
    assert healer.heal() and migrations == []  # nothing noted: nothing to do
    assert not healer.note(ValueError("other"))
    assert healer.note(sqlite3.OperationalError("no such table: x"))
    assert healer.heal() and migrations == [100.0]
    assert healer.heal() and migrations == [100.0]  # healed: not again
    healer.note(sqlite3.OperationalError("no such table: x"))
    now[0] += HEAL_EVERY_SECONDS - 1
    assert not healer.heal() and migrations == [100.0]  # within the window: no storm
    now[0] += 1
    assert healer.heal() and migrations == [100.0, 100.0 + HEAL_EVERY_SECONDS]


def test_a_failed_migration_is_one_warning_and_tried_again_after_the_window(caplog):
    now = [0.0]

    def failing() -> None:
        raise MigrationFailed("cannot migrate the observation database: OperationalError: down")

    healer = Healer(migrate=failing, clock=lambda: now[0])
    healer.note(sqlite3.OperationalError("no such table: x"))
    assert not healer.heal()
    assert "cannot migrate the observation database" in caplog.text
    assert "Traceback" not in caplog.text


def _result() -> RunResult:
    return RunResult(
        outcome=Outcome(reason="Current", requeue=Requeue.RESYNC, lifecycle="Synced"),
        namespace="ns",
        name="app",
        uid="uid-heal",
        generation=1,
        conditions_before=[],
        conditions_after=[],
        status_written=False,
        events_emitted=[],
    )


@pytest.fixture
def fresh_healer(monkeypatch):
    healer = Healer()
    monkeypatch.setattr(healing, "HEALER", healer)
    monkeypatch.setattr("controlplane.observations.recording.HEALER", healer)
    return healer


@pytest.mark.django_db(transaction=True)
def test_a_run_recorded_into_a_store_re_created_empty_migrates_it_and_is_kept(fresh_healer):
    call_command("migrate", "observations", "zero", verbosity=0)  # the tables are gone
    record_run(_result(), T0, 0.01)
    assert TrackedObject.objects.filter(uid="uid-heal").exists()


@pytest.mark.django_db(transaction=True)
def test_a_page_of_a_store_re_created_empty_migrates_it_and_is_asked_again(
    fresh_healer, admin_client
):
    url = "/admin/observations/trackedobject/"
    admin_client.raise_request_exception = False  # as a browser sees it: a response
    assert admin_client.get(url).status_code == 200
    call_command("migrate", "observations", "zero", verbosity=0)
    first = admin_client.get(url)
    assert first.status_code == 302 and first["Location"] == url
    assert admin_client.get(url).status_code == 200
