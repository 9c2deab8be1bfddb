"""Live pages (issue 35 item 3): each dashboard page polls a small JSON view for a stamp of
what it shows and, when the stamp moves, fetches itself and swaps its marked regions
(``static/observations/live.js``): no framework, no full reload. A stamp is a digest of times
and counts only (S0.4); the view answers 304 when the page's stamp (If-None-Match) still holds.

The poll must stay cheap at 20,000 HikyoSecrets with a few tabs open (issue 51 item 3,
bench/dashboard_poll.py): the store's stamp is a few indexed lookups, and it moves at the
next poll when something a page shows changed (a changing run, a deletion, an object added or
forgotten, a shard's leader), but with the unchanged runs of a steady state (each bumps its
"last checked" time) at most once per ``CHECKED_REFRESH_SECONDS``: before, every tab fetched
its page again at every poll of a busy store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils.dateparse import parse_datetime

from . import leases
from .models import LeaseRecord, TrackedObject

POLL_MILLISECONDS = 2000
# How stale a page's "last checked" times may get while nothing else changes; the relative
# times ("12 s ago") are kept current by the page's script in between.
CHECKED_REFRESH_SECONDS = 30.0


def digest(parts: Iterable[Any]) -> str:
    """A short opaque stamp (an ETag's characters: no space or quote)."""
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:20]


_STAMPED = ("last_changed_at", "deleted_at", "last_checked_at")


def _store_facts() -> tuple[Any, Any, Any, int]:
    """MAX(last_changed_at), MAX(deleted_at), MAX(last_checked_at) and COUNT(*) in one query
    of scalar subqueries: each MAX is one index lookup and the COUNT scans the smallest index,
    where one aggregate of all four read every row (SQLite optimises a lone MIN/MAX only)."""
    quote = connection.ops.quote_name
    table = quote(TrackedObject._meta.db_table)
    column = {name: quote(TrackedObject._meta.get_field(name).column) for name in _STAMPED}
    # deleted_at's index holds the deleted rows only (models.py): the WHERE lets it serve.
    maxes = ", ".join(
        f"(SELECT MAX({column[name]}) FROM {table} WHERE {column[name]} IS NOT NULL)"
        for name in _STAMPED
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {maxes}, (SELECT COUNT(*) FROM {table})")
        changed, deleted, checked, count = cursor.fetchone()
    return changed, deleted, checked, count


def checked_window(checked: Any) -> int | None:
    """The CHECKED_REFRESH_SECONDS window the latest "last checked" time falls in. A raw
    column value: a datetime (PostgreSQL) or its text (SQLite, UTC)."""
    if isinstance(checked, str):
        checked = parse_datetime(checked)
    if not isinstance(checked, datetime):
        return None
    if checked.tzinfo is None:
        checked = checked.replace(tzinfo=UTC)
    return int(checked.timestamp() // CHECKED_REFRESH_SECONDS)


def _leaders(now: datetime) -> list[tuple[str, str, int, bool]]:
    """Who holds each shard and whether the record still vouches for a live leader: a leader
    that dies changes no row, so the verdict at ``now`` is part of the stamp. Renewals are
    not (they move every few seconds); the overview's relative times age in the page."""
    return [
        (record.lease, record.holder, record.transitions, leases.state_of(record, now).live)
        for record in LeaseRecord.objects.order_by("lease")
    ]


def overall_stamp(now: datetime | None = None) -> str:
    """Moves when a page over the whole store (overview, list, instance) shows something new;
    see the module's docstring. One query, two with shards."""
    changed, deleted, checked, count = _store_facts()
    parts: list[Any] = [changed, deleted, count, checked_window(checked)]
    if settings.HIKYO_OPERATOR.shards > 1:
        parts.append(_leaders(now or datetime.now(UTC)))
    return digest(parts)


def object_stamp(tracked: TrackedObject) -> str:
    """Moves with every run of one object (an unchanged run too: it bumps the counters)."""
    return digest((tracked.last_checked_at, tracked.runs_total, tracked.deleted_at))
