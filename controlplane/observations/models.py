"""Observation records: what the operator saw and did, for the dashboard.

Names, reasons, generations and times only: never values, tokens, cursors or stamps (S0.4).
Rows are snapshots keyed by (namespace, name, uid) rather than foreign keys to Kubernetes
objects, like django.contrib.admin's LogEntry: Kubernetes is the source of truth.
"""

from __future__ import annotations

from django.db import models

from .managers import (
    ConditionChangeManager,
    EventRecordManager,
    ReconcileRunManager,
    ResyncRequestManager,
    StatusReportManager,
)


class AboutHikyoSecret(models.Model):
    """The snapshot of which HikyoSecret a row is about (by UID, with its name at the time)."""

    uid = models.CharField(max_length=64, db_index=True)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)

    class Meta:
        abstract = True


class TrackedObject(models.Model):
    """The latest known state of one HikyoSecret (by UID); shown as "HikyoSecrets" in the admin.

    ``blocking`` is the Ready rule's first blocker (``Type/Reason``, empty when Ready), kept at
    record time so the list can filter and sort on it. ``deleted_at`` is set by a run that found
    the CR gone; the row is forgotten with its history once unchecked for a week.
    """

    uid = models.CharField(max_length=64, unique=True)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    generation = models.BigIntegerField(default=0)
    lifecycle = models.CharField(max_length=32, blank=True)
    ready = models.BooleanField(null=True)
    synced_reason = models.CharField(max_length=64, blank=True)
    conditions = models.JSONField(default=list)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_checked_at = models.DateTimeField(null=True)
    last_changed_at = models.DateTimeField(null=True)
    runs_total = models.PositiveBigIntegerField(default=0)
    runs_unchanged = models.PositiveBigIntegerField(default=0)
    blocking = models.CharField(max_length=130, blank=True)  # first_blocker: "Type/Reason"
    blocking_message = models.TextField(blank=True)  # that condition's message, for search
    warnings = models.CharField(max_length=500, blank=True)  # why.warning_names: "Type/Reason, ..."
    last_outcome = models.CharField(max_length=64, blank=True)  # the latest run's reason
    target = models.CharField(max_length=253, blank=True)  # spec.target.name, when known
    instance = models.CharField(max_length=253, blank=True)  # spec.instanceRef.name
    # remediation.spec_context of the CR: the names the remediation texts need (credential,
    # instance, scope, target, acknowledged key names); never a value.
    names = models.JSONField(default=dict)
    # A 429 pause of (instance, org) holds this CR back: when it runs again (S4.1.6).
    paused_until = models.DateTimeField(null=True)
    # Its requests wait on an instance that does not answer (S4.1.9): the wait's reason
    # (InstanceUnresponsive or CredentialUnanswered) and since when; the last try is
    # last_checked_at.
    waiting_reason = models.CharField(max_length=32, blank=True)
    waiting_since = models.DateTimeField(null=True)
    # The workloads (``Kind/name``) the latest restamping run asked to restart (S6.4), and when.
    rolled = models.CharField(max_length=500, blank=True)
    rolled_at = models.DateTimeField(null=True)
    key_count = models.PositiveIntegerField(null=True)  # status.keyCount
    last_delivery_at = models.DateTimeField(null=True)  # the run that wrote the Secret
    last_fetch_at = models.DateTimeField(null=True)
    last_fetch_status = models.PositiveSmallIntegerField(null=True)  # HTTP status, no answer: None
    last_fetch_ok_at = models.DateTimeField(null=True)  # the latest 200/304
    last_forced_sync = models.CharField(max_length=253, blank=True)  # a request id, not a secret
    last_forced_sync_at = models.DateTimeField(null=True)
    deleted_at = models.DateTimeField(null=True)

    class Meta:
        verbose_name = "HikyoSecret"
        verbose_name_plural = "HikyoSecrets"
        ordering = ["namespace", "name"]
        indexes = [
            models.Index(fields=["namespace", "name"]),
            models.Index(fields=["last_checked_at"]),  # forgetting deleted CRs
            # The live poll's stamp (live.py) reads MAX of each: an index answers it in a
            # lookup, not a scan of every row (issue 51: 20,000 rows, 5 tabs every 2 s).
            models.Index(fields=["last_changed_at"]),
            # Partial: the deleted rows only, so the pages' "deleted_at IS NULL" (every live
            # row) keeps its plans instead of walking an index of nearly every row.
            models.Index(
                fields=["deleted_at"],
                condition=models.Q(deleted_at__isnull=False),
                name="observation_deleted_only_idx",
            ),
        ]
        permissions = [("force_resync", "Can force a resync of HikyoSecrets")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class ReconcileRun(AboutHikyoSecret):
    """One reconcile that changed or failed something (unchanged runs only bump counters)."""

    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    lifecycle = models.CharField(max_length=32, blank=True)
    requeue = models.CharField(max_length=16)
    fetched = models.BooleanField()
    wrote_secret = models.BooleanField()
    status_written = models.BooleanField()
    forced_sync = models.CharField(max_length=253, blank=True)  # the force-sync value handled
    rolled = models.TextField(blank=True)  # the workloads restamped, "Kind/name, ..." (S6.4)
    # The facts of the condition the run's reason set (Condition.facts): names, never a value.
    facts = models.JSONField(default=dict, blank=True)

    objects = ReconcileRunManager()

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [
            models.Index(fields=["uid", "-started_at"]),
            models.Index(fields=["-started_at", "-id"]),  # the admin's newest-first list
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} {self.reason} at {self.started_at:%Y-%m-%d %H:%M:%S}"


class ConditionChange(AboutHikyoSecret):
    """A condition that appeared, changed status or reason, or disappeared."""

    at = models.DateTimeField()
    type = models.CharField(max_length=64)
    old_status = models.CharField(max_length=16, blank=True)
    old_reason = models.CharField(max_length=64, blank=True)
    new_status = models.CharField(max_length=16, blank=True)
    new_reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)

    objects = ConditionChangeManager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["uid", "-at"]),  # per-object pages and pruning
            models.Index(fields=["-at", "-id"]),  # the admin's newest-first list
        ]

    def __str__(self) -> str:
        return f"{self.type}: {self.old_reason or '-'} -> {self.new_reason or '-'}"


class ResyncRequest(AboutHikyoSecret):
    """A forced resync the dashboard asked for: the hikyo.dev/force-sync value it set (a
    request id, not a secret), by whom and when. The timeline reads it as a value; the
    LogEntry beside it is the admin's audit trail."""

    at = models.DateTimeField()
    value = models.CharField(max_length=253)
    requested_by = models.CharField(max_length=150)

    objects = ResyncRequestManager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["uid", "-at"])]

    def __str__(self) -> str:
        return f"force-sync={self.value} by {self.requested_by}"


class EventRecord(AboutHikyoSecret):
    """An event the operator emitted on a HikyoSecret."""

    at = models.DateTimeField()
    type = models.CharField(max_length=16)
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)

    objects = EventRecordManager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["uid", "-at"]),
            models.Index(fields=["-at", "-id"]),  # the admin's newest-first list
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.reason}"


class StatusReport(AboutHikyoSecret):
    """One status-report attempt (S7): when, the HTTP status, the conditions sent. Nothing else:
    the body holds no values, and the token and answer body are never kept."""

    at = models.DateTimeField()
    http_status = models.PositiveSmallIntegerField(null=True)
    outcome = models.CharField(max_length=64)
    conditions = models.JSONField(default=list)

    objects = StatusReportManager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["uid", "-at"]),
            models.Index(fields=["-at", "-id"]),  # the admin's newest-first list
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} {self.http_status or '-'} {self.outcome}"


class LeaseRecord(models.Model):
    """A shard leader's Lease as its holder last recorded it (issue 51 item 3): the overview
    reads this, never the apiserver. Written by the leader itself (leases.LeaseRecorder) on a
    new term and every few seconds while it leads (``lag_seconds``), so a dead leader's
    row stops moving: ``leases.leader_state`` judges it by its renewal, not by its presence.
    The holder is a process's identity (a pod name); nothing here is a secret."""

    lease = models.CharField(max_length=253, unique=True)
    shard = models.PositiveSmallIntegerField()
    shards = models.PositiveSmallIntegerField()
    holder = models.CharField(max_length=253)
    acquired_at = models.DateTimeField(null=True)
    renewed_at = models.DateTimeField()  # the renewTime the holder wrote into the Lease
    duration_seconds = models.PositiveIntegerField()  # the Lease's leaseDurationSeconds
    transitions = models.PositiveIntegerField()  # leaseTransitions: one more per new holder
    lag_seconds = models.FloatField()  # how far the writer's row may trail the Lease
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ["shard"]

    def __str__(self) -> str:
        return f"{self.lease} held by {self.holder}"
