"""The observation store heals itself on PostgreSQL (issue 51): the database is emptied under a
running process (its schema dropped and created again, as a PostgreSQL volume lost and
initialised anew), and the next recorded run migrates it and is kept, instead of every write
failing with UndefinedTable until the process restarts."""

from __future__ import annotations

import json

import pytest

from tests.support.django_scripts import run_on_a_fresh_database

# A child process, so Django binds to this database alone.
SCRIPT = """
import json
from datetime import UTC, datetime

import django
django.setup()
from django.db import connection
from controlplane.observations.migrate_at_start import migrate_observation_store
from controlplane.observations.models import TrackedObject
from controlplane.observations.recording import record_run
from workers.engine.outcome import Outcome, Requeue
from workers.engine.reconcile import RunResult

def result(uid):
    return RunResult(
        outcome=Outcome(reason="Current", requeue=Requeue.RESYNC, lifecycle="Synced"),
        namespace="ns", name=uid, uid=uid, generation=1, conditions_before=[],
        conditions_after=[], status_written=False, events_emitted=[],
    )

T0 = datetime(2026, 12, 7, tzinfo=UTC)
migrate_observation_store()  # as the process does at start
record_run(result("before"), T0, 0.01)
with connection.cursor() as cursor:  # the store re-created empty under the process
    cursor.execute("DROP SCHEMA public CASCADE")
    cursor.execute("CREATE SCHEMA public")
record_run(result("after"), T0, 0.01)
print(json.dumps(sorted(TrackedObject.objects.values_list("uid", flat=True))))
"""


@pytest.mark.timeout(120)
def test_a_store_emptied_under_a_running_process_is_migrated_by_its_next_write(
    postgres_server, tmp_path
):
    done = run_on_a_fresh_database(postgres_server, tmp_path, SCRIPT, "heal")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["after"]  # "before" went
    assert "migrated it again" in done.stderr
    assert "UndefinedTable" not in done.stderr.split("migrated it again", 1)[1]
