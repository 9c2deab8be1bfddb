"""Bring the observation database up to date when a process starts (issue 7 item 5).

``run_operator`` and every Celery worker call :func:`migrate_observation_store` before they
record anything, so a fresh data dir or a fresh PostgreSQL database never meets "no such
table". Several processes start together in scaled mode (S8.4), so the migration runs under
a lock: a PostgreSQL session advisory lock, or an exclusive file lock beside a SQLite file.
"""

from __future__ import annotations

import contextlib
import fcntl
import re
import time
from collections.abc import Iterator
from pathlib import Path

from django.core.management import call_command
from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

# Any fixed 64-bit key; every hikyo-operator process uses the same one.
ADVISORY_LOCK_KEY = 0x68696B796F6D6967  # "hikyomig"
_CREDENTIALS = re.compile(r"(\w+://)[^/\s@]*@")


MIGRATE_LOCK_WAIT_SECONDS = 600.0


class MigrationFailed(RuntimeError):
    """The observation database could not be migrated; the message is one line."""


def _advisory_lock(cursor: CursorWrapper) -> None:
    """pg_advisory_lock does not heed lock_timeout: poll the non-blocking form instead."""
    deadline = time.monotonic() + MIGRATE_LOCK_WAIT_SECONDS
    while True:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
        if cursor.fetchone()[0]:
            return
        if time.monotonic() > deadline:
            raise MigrationFailed(
                f"another process has been migrating the observation database for over "
                f"{MIGRATE_LOCK_WAIT_SECONDS:g} s; is one stuck?"
            )
        time.sleep(0.2)


def migrate_observation_store(alias: str = "default") -> None:
    """Applies every pending migration, one process at a time; raises MigrationFailed."""
    connection = connections[alias]
    try:
        with _exclusive(connection):
            call_command("migrate", database=alias, interactive=False, verbosity=0)
    except (DatabaseError, OSError) as error:
        raise MigrationFailed(
            f"cannot migrate the observation database: {_one_line(error)}"
        ) from None


@contextlib.contextmanager
def _exclusive(connection: BaseDatabaseWrapper) -> Iterator[None]:
    if connection.vendor == "postgresql":
        # Session-level: held across migrate's own transactions, released on unlock or when
        # the connection drops (a killed process never leaves it held).
        with connection.cursor() as cursor:
            # A migration may outlast the 30 s statement timeout (an index on a long table):
            # lift it for the migration alone; lock_timeout bounds its waits on tables.
            cursor.execute("SET statement_timeout = 0")
            cursor.execute(f"SET lock_timeout = '{int(MIGRATE_LOCK_WAIT_SECONDS)}s'")
            _advisory_lock(cursor)
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])
                # Back to the connection's own timeouts (settings.py) for what follows.
                cursor.execute("RESET statement_timeout")
                cursor.execute("RESET lock_timeout")
        return
    name = str(connection.settings_dict.get("NAME") or "")
    in_memory = name == ":memory:" or "mode=memory" in name  # the test runner's shared cache
    if connection.vendor != "sqlite" or not name or in_memory:
        yield
        return
    with Path(f"{name}.migrate-lock").open("a") as lock:
        # Released when the file closes or the process dies; a holder that hangs must not
        # hold every later start for ever.
        deadline = time.monotonic() + MIGRATE_LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise MigrationFailed(
                        f"another process has been migrating {Path(name).name} for over "
                        f"{MIGRATE_LOCK_WAIT_SECONDS:g} s; is one stuck?"
                    ) from None
                time.sleep(0.2)
        yield


def _one_line(error: BaseException) -> str:
    """The error's first line, with any user:password@ of a URL cut out (S0.4: no secrets)."""
    lines = str(error).strip().splitlines()
    text = _CREDENTIALS.sub(r"\1***@", lines[0] if lines else "")
    return f"{type(error).__name__}: {text[:300]}"
