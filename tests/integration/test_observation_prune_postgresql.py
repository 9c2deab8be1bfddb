"""The per-object bound of the observation tables (one DELETE per prune, issues 13 and 37) holds on
PostgreSQL, the scaled mode's store (S8.1), as tests/unit/test_observation_bounds.py shows it
on SQLite: the newest rows stay, by the manager's order, ties broken by id."""

from __future__ import annotations

import json

import pytest

from tests.support.django_scripts import run_on_a_fresh_database

# Runs in a child so Django binds to this database alone (the test session's Django is bound
# to its own test database).
SCRIPT = """
import json
from datetime import UTC, datetime, timedelta

import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from controlplane.observations.models import ConditionChange

T0 = datetime(2026, 1, 1, tzinfo=UTC)
for n in range(12):
    for uid in ("flappy", "calm", "busy"):
        ConditionChange.objects.create(
            uid=uid, namespace="ns", name=uid, at=T0 + timedelta(seconds=n // 2),
            type="Ready", new_status="True", message=f"{uid} {n}",
        )
deleted = ConditionChange.objects.prune("flappy", "busy", keep=5)
kept = {
    uid: list(
        ConditionChange.objects.filter(uid=uid).order_by("id").values_list("message", flat=True)
    )
    for uid in ("flappy", "busy")
}
print(json.dumps({
    "deleted": deleted,
    "kept": kept,
    "calm": ConditionChange.objects.filter(uid="calm").count(),
    "again": ConditionChange.objects.prune("flappy", "busy", keep=5),
}))
"""


@pytest.mark.timeout(120)
def test_pruning_keeps_the_newest_rows_of_one_object_on_postgresql(postgres_server, tmp_path):
    done = run_on_a_fresh_database(postgres_server, tmp_path, SCRIPT, "prune")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["deleted"] == 14  # two objects pruned by one statement
    # The newest five of each: the latest times, and within the tie at the boundary (runs 6 and
    # 7 share a second) the higher id.
    assert result["kept"] == {
        uid: [f"{uid} {n}" for n in (7, 8, 9, 10, 11)] for uid in ("flappy", "busy")
    }
    assert result["calm"] == 12  # another object's rows are untouched
    assert result["again"] == 0
