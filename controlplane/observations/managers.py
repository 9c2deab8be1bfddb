"""Write paths for the observation models; recording.py calls these."""

from __future__ import annotations

from django.db import models

KEEP_RUNS_PER_OBJECT = 300


class ReconcileRunManager(models.Manager):
    def prune(self, uid: str, keep: int = KEEP_RUNS_PER_OBJECT) -> int:
        """Keeps the latest ``keep`` runs of one object; returns how many were deleted."""
        stale = (
            self.filter(uid=uid).order_by("-started_at", "-id").values_list("id", flat=True)[keep:]
        )
        ids = list(stale)
        if not ids:
            return 0
        deleted, _ = self.filter(id__in=ids).delete()
        return deleted
