"""Issue 7 item 5: run_operator and Celery workers migrate the observation database at start,
so a fresh data dir never meets "no such table". The harness's own `manage.py migrate` is
skipped here, so only the product's migrate can have made the tables."""

from __future__ import annotations

import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

from controlplane.settings import SQLITE_FILE
from tests.support import operator_harness
from tests.support.kube import unreached_kubeconfig
from tests.support.operator_harness import Operator, populate, ready_count
from tests.support.waiting import wait_for

MIGRATIONS = Path(__file__).resolve().parents[2] / "controlplane" / "observations" / "migrations"


def _unmigrated_operator(
    tmp_path: Path, kubeconfig: Path, monkeypatch, database_url: str | None = None
) -> Operator:
    """The harness's Operator (embedded mode; SQLite in tmp_path/data unless a DSN is given)
    minus its own migrate."""
    skipped: list[list[str]] = []

    def skip_migrate(argv, *args, **kwargs):
        assert "migrate" in argv, argv  # the only subprocess Operator() runs
        skipped.append(argv)
        return subprocess.CompletedProcess(argv, 0, b"", b"")

    with monkeypatch.context() as patched:
        patched.setattr(operator_harness.subprocess, "run", skip_migrate)
        operator = Operator(tmp_path, kubeconfig, None, database_url=database_url)
    assert not (tmp_path / "data" / SQLITE_FILE).exists()  # fresh: nothing made it yet
    return operator


def _query(database: Path, sql: str, *params: str) -> list[tuple]:
    if not database.exists():
        return []
    with sqlite3.connect(database) as connection:
        try:
            return connection.execute(sql, params).fetchall()
        except sqlite3.OperationalError:  # not migrated yet
            return []


def _applied(database: Path) -> set[str]:
    rows = _query(database, "SELECT name FROM django_migrations WHERE app = 'observations'")
    return {name for (name,) in rows}


def _tracked(database: Path, namespace: str) -> list[tuple]:
    sql = "SELECT uid FROM observations_trackedobject WHERE namespace = ?"
    return _query(database, sql, namespace)


EXPECTED = {p.stem for p in MIGRATIONS.glob("0*.py")}


@pytest.mark.timeout(300)
def test_run_operator_on_a_fresh_data_dir_migrates_and_records(
    world, kubeconfig, tmp_path, monkeypatch
):
    operator = _unmigrated_operator(tmp_path, kubeconfig, monkeypatch)
    database = tmp_path / "data" / SQLITE_FILE
    try:
        populate(world, 2)
        operator.start_leader()
        wait_for(lambda: ready_count(world) == 2, timeout=120, what="both HikyoSecrets Ready")
        # The observations of those runs landed in the store run_operator made for itself.
        wait_for(
            lambda: len(_tracked(database, world.namespace)) == 2,
            timeout=60,
            what="both HikyoSecrets recorded in the fresh observation database",
        )
    finally:
        operator.stop()
    assert _applied(database) == EXPECTED
    log = operator.logs()
    assert "no such table" not in log
    assert "OperationalError" not in log


@pytest.mark.timeout(120)
def test_a_celery_worker_migrates_a_fresh_data_dir_before_it_works(tmp_path, monkeypatch):
    """No Redis (the in-memory broker) and no cluster: only the worker_init migrate runs."""
    operator = _unmigrated_operator(tmp_path, unreached_kubeconfig(tmp_path), monkeypatch)
    database = tmp_path / "data" / SQLITE_FILE
    try:
        worker = operator.start_worker("w1")
        wait_for(
            lambda: _applied(database) == EXPECTED or not worker.alive(),
            timeout=90,
            what="the worker to migrate the fresh observation database",
        )
        assert worker.alive(), worker.log()[-3000:]
        wait_for(lambda: "ready." in worker.log(), timeout=60, what="the worker to be ready")
    finally:
        operator.stop()
    assert _applied(database) == EXPECTED
    assert "no such table" not in operator.logs()


@pytest.mark.timeout(180)
def test_workers_starting_together_on_postgresql_take_turns_to_migrate(
    postgres_server, tmp_path, monkeypatch
):
    """Scaled mode starts several processes at once on one PostgreSQL database (S8.4): the
    advisory lock lets exactly one migrate while the others wait, and none fails."""
    name = f"fresh_{uuid.uuid4().hex[:12]}"
    with postgres_server.connect("postgres") as connection:
        connection.execute(f"CREATE DATABASE {name} OWNER {postgres_server.ROLE}")
    dsn = postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
    operator = _unmigrated_operator(
        tmp_path, unreached_kubeconfig(tmp_path), monkeypatch, database_url=dsn
    )
    try:
        workers = [operator.start_worker(f"w{i}") for i in range(3)]
        for worker in workers:
            wait_for(
                lambda w=worker: "ready." in w.log() or not w.alive(),
                timeout=120,
                what=f"{worker.name} to be ready",
            )
        assert all(w.alive() for w in workers), operator.logs()[-3000:]
    finally:
        operator.stop()
    with postgres_server.connect(name) as connection:
        rows = connection.execute(
            "SELECT name FROM django_migrations WHERE app = 'observations'"
        ).fetchall()
    assert {row[0] for row in rows} == EXPECTED
    log = operator.logs()
    for trouble in ("already exists", "IntegrityError", "cannot migrate", "Traceback"):
        assert trouble not in log, trouble
