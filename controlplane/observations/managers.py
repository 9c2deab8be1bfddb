"""Write paths for the observation models; recording.py calls these.

Every observation table is bounded (design.md principle 3, issue 7 item 5): per HikyoSecret only
the latest rows of each kind are kept, and everything about an object that is no longer
reconciled (a deleted CR) goes after ``FORGET_UNCHECKED_AFTER``.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import connections, models

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
# Objects one prune statement covers at most: a bounded IN list.
PRUNE_UIDS_AT_ONCE = 500


class PerObjectManager(models.Manager):
    """Rows about one HikyoSecret (by uid), pruned to the newest ``keep``."""

    keep = 300
    newest_first: tuple[str, ...] = ("-at", "-id")

    def prune(self, *uids: str, keep: int | None = None) -> int:
        """Keeps the latest ``keep`` rows of each object; returns how many were deleted.

        One DELETE for all of them (SQLite and PostgreSQL alike): the ORM's select-then-delete
        cost the embedded operator ~10 % of its CPU at 1,000 CRs, and a statement per object
        cost a scaled worker's recorder one round trip per status report (issue 37)."""
        keep = self.keep if keep is None else keep
        meta = self.model._meta
        quote = connections[self.db].ops.quote_name
        table, id_column = quote(meta.db_table), quote(meta.pk.column)
        order = ", ".join(
            f"{quote(meta.get_field(name.lstrip('-')).column)}"
            f" {'DESC' if name.startswith('-') else 'ASC'}"
            for name in self.newest_first
        )
        uid_column = quote(meta.get_field("uid").column)
        deleted = 0
        for start in range(0, len(uids), PRUNE_UIDS_AT_ONCE):
            chosen = uids[start : start + PRUNE_UIDS_AT_ONCE]
            sql = (
                f"DELETE FROM {table} WHERE {id_column} IN (SELECT {id_column} FROM "
                f"(SELECT {id_column}, ROW_NUMBER() OVER (PARTITION BY {uid_column} "
                f"ORDER BY {order}) AS newer FROM {table} "
                f"WHERE {uid_column} IN ({', '.join(['%s'] * len(chosen))})) ranked "
                "WHERE newer > %s)"
            )
            with connections[self.db].cursor() as cursor:
                cursor.execute(sql, [*chosen, keep])
                deleted += max(cursor.rowcount, 0)
        return deleted


class ReconcileRunManager(PerObjectManager):
    keep = KEEP_RUNS_PER_OBJECT
    newest_first = ("-started_at", "-id")


class ConditionChangeManager(PerObjectManager):
    keep = KEEP_CONDITION_CHANGES_PER_OBJECT


class EventRecordManager(PerObjectManager):
    keep = KEEP_EVENTS_PER_OBJECT


class ResyncRequestManager(PerObjectManager):
    keep = KEEP_EVENTS_PER_OBJECT


class StatusReportManager(PerObjectManager):
    keep = KEEP_REPORTS_PER_OBJECT
