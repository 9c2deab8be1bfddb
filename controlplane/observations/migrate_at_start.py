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
from collections.abc import Iterator
from pathlib import Path

from django.core.management import call_command
from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

# Any fixed 64-bit key; every hikyo-operator process uses the same one.
ADVISORY_LOCK_KEY = 0x68696B796F6D6967  # "hikyomig"
_CREDENTIALS = re.compile(r"(\w+://)[^/\s@]*@")


class MigrationFailed(RuntimeError):
    """The observation database could not be migrated; the message is one line."""


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
            cursor.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_LOCK_KEY])
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_LOCK_KEY])
        return
    name = str(connection.settings_dict.get("NAME") or "")
    if connection.vendor != "sqlite" or not name or name == ":memory:":
        yield
        return
    with Path(f"{name}.migrate-lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes or the process dies
        yield


def _one_line(error: BaseException) -> str:
    """The error's first line, with any user:password@ of a URL cut out (S0.4: no secrets)."""
    lines = str(error).strip().splitlines()
    text = _CREDENTIALS.sub(r"\1***@", lines[0] if lines else "")
    return f"{type(error).__name__}: {text[:300]}"
