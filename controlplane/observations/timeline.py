"""The detail page's timeline: runs, condition transitions and forced-resync requests, newest
first (``entries``), with identical consecutive entries folded into one (``collapse``, issue 35
item 3): one refusal repeated by eight runs reads "x8, 21:30:05-21:37:12" (with the
multiplication sign and an en dash). Pure over the rows read."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from workers.engine.force_sync import FORCE_SYNC_ANNOTATION

from .times import clock

TIMES, TO = "\u00d7", "\u2013"  # the multiplication sign and the en dash
# What must be equal for two entries to be "the same": all but when, and how long it took.
SAME = ("kind", "what", "lifecycle", "fetched", "wrote", "message")


def collapse(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries newest first → runs of equal entries, each the newest of its run with ``count``,
    ``first_at`` (the oldest's time) and ``span`` (``xN, first-last``, empty for one)."""
    folded: list[dict[str, Any]] = []
    for entry in entries:
        last = folded[-1] if folded else None
        if last is not None and all(last.get(k) == entry.get(k) for k in SAME):
            last["count"] += 1
            last["first_at"] = entry["at"]
            last["span"] = f"{TIMES}{last['count']}, {clock(entry['at'])}{TO}{clock(last['at'])}"
            continue
        folded.append({**entry, "count": 1, "first_at": entry["at"], "span": ""})
    return folded


def entries(
    runs: Sequence[Any], changes: Sequence[Any], requests: Sequence[Any], last_forced_sync: str
) -> list[dict[str, Any]]:
    """ReconcileRuns, ConditionChanges and ResyncRequests as one list, newest first. A request
    shows whether a run handled its value (or the object's last handled one is it)."""
    handled = {run.forced_sync for run in runs if run.forced_sync}
    if last_forced_sync:
        handled.add(last_forced_sync)
    found: list[dict[str, Any]] = []
    for run in runs:
        what = f"run: {run.reason}"
        if run.forced_sync:
            what += f" (handled {FORCE_SYNC_ANNOTATION}={run.forced_sync})"
        if run.rolled:
            what += f"; restarted {run.rolled}"
        found.append(
            {
                "at": run.started_at,
                "kind": "run",
                "what": what,
                "lifecycle": run.lifecycle or "-",
                "duration": f"{run.duration_ms} ms",
                "fetched": "yes" if run.fetched else "no",
                "wrote": "yes" if run.wrote_secret else "no",
                "message": run.message,
            }
        )
    for change in changes:
        old = f"{change.old_status or '-'}/{change.old_reason or '-'}"
        new = f"{change.new_status or '-'}/{change.new_reason or '-'}"
        found.append(
            {
                "at": change.at,
                "kind": "condition",
                "what": f"{change.type}: {old} → {new}",
                "message": change.message,
            }
        )
    for request in requests:
        found.append(
            {
                "at": request.at,
                "kind": "force resync",
                "what": f"requested by {request.requested_by}: "
                f"{FORCE_SYNC_ANNOTATION}={request.value}",
                "message": "handled" if request.value in handled else "not handled yet",
            }
        )
    found.sort(key=lambda e: e["at"], reverse=True)
    return found
