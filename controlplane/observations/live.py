"""Live pages (issue 35 item 3): each dashboard page polls a small JSON view for a stamp of
what it shows and, when the stamp moves, fetches itself and swaps its marked regions
(``static/observations/live.js``): no framework, no full reload. A stamp is times and counts
only (S0.4)."""

from __future__ import annotations

from django.db.models import Count, Max

from .models import TrackedObject

POLL_MILLISECONDS = 2000


def overall_stamp() -> str:
    """Moves when any object is recorded, added or marked deleted: one indexed aggregate."""
    found = TrackedObject.objects.aggregate(
        checked=Max("last_checked_at"), deleted=Max("deleted_at"), objects=Count("id")
    )
    return f"{found['checked']}|{found['deleted']}|{found['objects']}"


def object_stamp(tracked: TrackedObject) -> str:
    """Moves with every run of one object (an unchanged run too: it bumps the counters)."""
    return f"{tracked.last_checked_at}|{tracked.runs_total}|{tracked.deleted_at}"
