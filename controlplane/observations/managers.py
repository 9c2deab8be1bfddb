"""Write paths for the observation models; recording.py calls these.

Every observation table is bounded (design.md principle 3, issue 7 item 5): per HikyoSecret only
the latest rows of each kind are kept, and everything about an object that is no longer
reconciled (a deleted CR) goes after ``FORGET_UNCHECKED_AFTER``.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models

# Per object, the latest rows kept. Unchanged runs only bump counters (no row), so 300 changing
# runs are weeks of normal history, while a CR that flaps every few seconds stays at a few
# hundred KB instead of growing without end.
KEEP_RUNS_PER_OBJECT = 300
# A changing run moves one to three conditions: the same depth of history as the runs.
KEEP_CONDITION_CHANGES_PER_OBJECT = 300
# One or two events per changing run (Delivered, FetchFailed, ...): as deep as the runs.
KEEP_EVENTS_PER_OBJECT = 300
# S7.4: an attempt after every status write plus a heartbeat per resync period; 300 is a day at
# the default 5 min, enough to see when and how reporting broke.
KEEP_REPORTS_PER_OBJECT = 300
# Every live CR is reconciled at least once per resyncInterval (jittered, default 5 min), so
# one not checked for a week is deleted or out of reach: its TrackedObject and rows go.
FORGET_UNCHECKED_AFTER = timedelta(days=7)


class PerObjectManager(models.Manager):
    """Rows about one HikyoSecret (by uid), pruned to the newest ``keep``."""

    keep = 300
    newest_first: tuple[str, ...] = ("-at", "-id")

    def prune(self, uid: str, keep: int | None = None) -> int:
        """Keeps the latest ``keep`` rows of one object; returns how many were deleted."""
        keep = self.keep if keep is None else keep
        stale = self.filter(uid=uid).order_by(*self.newest_first).values_list("id", flat=True)
        ids = list(stale[keep:])
        deleted = 0
        for start in range(0, len(ids), 500):  # bounded IN lists (a long backlog after upgrade)
            count, _ = self.filter(id__in=ids[start : start + 500]).delete()
            deleted += count
        return deleted


class ReconcileRunManager(PerObjectManager):
    keep = KEEP_RUNS_PER_OBJECT
    newest_first = ("-started_at", "-id")


class ConditionChangeManager(PerObjectManager):
    keep = KEEP_CONDITION_CHANGES_PER_OBJECT


class EventRecordManager(PerObjectManager):
    keep = KEEP_EVENTS_PER_OBJECT


class StatusReportManager(PerObjectManager):
    keep = KEEP_REPORTS_PER_OBJECT
