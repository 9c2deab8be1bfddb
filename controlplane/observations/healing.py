"""The observation store heals itself (issue 51): when the database was re-created empty (a
PostgreSQL volume lost and initialised again, a SQLite file removed) its tables are missing
until someone migrates. A write or a page that meets a missing table notes it; the recorder's
writer thread, outside any transaction, and the dashboard's middleware then migrate (at most
once per ``HEAL_EVERY_SECONDS`` per process, under migrate_at_start's lock) instead of failing
on every write until the process restarts."""

from __future__ import annotations

import logging
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from .migrate_at_start import MigrationFailed, migrate_observation_store

log = logging.getLogger(__name__)

HEAL_EVERY_SECONDS = 30.0
UNDEFINED_TABLE = "42P01"  # PostgreSQL's SQLSTATE for a missing table


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def missing_table(error: BaseException) -> bool:
    """Whether ``error`` says a table of the store does not exist."""
    for item in _chain(error):
        # psycopg 3 names the SQLSTATE ``sqlstate``; psycopg2 named it ``pgcode``.
        if UNDEFINED_TABLE in (getattr(item, "sqlstate", None), getattr(item, "pgcode", None)):
            return True
        if isinstance(item, sqlite3.OperationalError) and str(item).startswith("no such table"):
            return True
    return False


class Healer:
    """Migrates when a missing table was seen, at most once per ``HEAL_EVERY_SECONDS``."""

    def __init__(
        self,
        migrate: Callable[[], None] = migrate_observation_store,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._migrate, self._clock = migrate, clock
        self._lock = threading.Lock()
        self._wanted = False
        self._last: float | None = None

    def note(self, error: BaseException) -> bool:
        """Remembers that ``error`` met a missing table; says whether it did."""
        if missing_table(error):
            self._wanted = True
            return True
        return False

    def heal(self) -> bool:
        """Migrates if a missing table was noted (and not in the last window); True when the
        tables should be there now. Call it outside any transaction."""
        with self._lock:
            if not self._wanted:
                return True
            now = self._clock()
            if self._last is not None and now - self._last < HEAL_EVERY_SECONDS:
                return False
            self._last = now
            try:
                self._migrate()
            except MigrationFailed as error:
                log.warning("the observation store has missing tables and %s", error)
                return False
            self._wanted = False
            log.warning("the observation store had missing tables: migrated it again")
            return True


HEALER = Healer()


class HealStore:
    """Dashboard middleware, outside the session and auth layers: a request that failed on a
    missing table (any layer inside: Django turns the error into a 500 and sends
    ``got_request_exception``, see ``heal_after_request_error``) migrated the store; a GET is
    then asked again once, by a redirect to itself."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if getattr(request, HEALED, False) and request.method == "GET":
            return HttpResponseRedirect(request.get_full_path())
        return response


HEALED = "_hikyo_store_healed"


def heal_after_request_error(
    sender: object, request: HttpRequest | None = None, **kwargs: object
) -> None:
    """``got_request_exception``: a missing table migrates the store (outside the request's
    transaction, which the error already ended); the middleware then asks a GET again."""
    error = sys.exc_info()[1]
    if error is None or not HEALER.note(error):
        return
    if HEALER.heal() and request is not None:
        setattr(request, HEALED, True)
