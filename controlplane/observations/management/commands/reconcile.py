"""``manage.py reconcile NAMESPACE/NAME``: run one reconcile now and print its outcome.

It runs like a worker (S4.1.4): under the key's lock, with fenced writes and the 90 s deadline,
so it cannot write beside a live operator. In scaled mode the lock is in the shared Redis store.
In embedded mode a running operator keeps its locks in its own memory, so the command refuses
while the leader Lease is live.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.observations.cluster_errors import cluster_errors_as_one_line
from controlplane.observations.recording import record_run
from k8s.leader import live_holder
from workers.keys import ObjectKey
from workers.runner import LOCK_TTL_SECONDS, run_locked
from workers.runtime import build_runtime


class Command(BaseCommand):
    help = "Reconcile one HikyoSecret once (for debugging) and print the outcome."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("target", help="NAMESPACE/NAME of the HikyoSecret")
        parser.add_argument(
            "--full", action="store_true", help="withhold the cursor: fetch a full delivery"
        )

    def handle(self, *args: Any, target: str, full: bool, **options: Any) -> None:
        namespace, _, name = target.partition("/")
        if not namespace or not name:
            raise CommandError("give the HikyoSecret as NAMESPACE/NAME")
        operator_settings = settings.HIKYO_OPERATOR
        try:
            with cluster_errors_as_one_line():
                runtime = build_runtime(
                    operator_settings,
                    kubeconfig=settings.KUBECONFIG,
                    redis_url=settings.REDIS_URL,
                    record=record_run,
                )
        except ValueError as error:
            raise CommandError(str(error)) from None
        with cluster_errors_as_one_line(runtime.cluster.api_client):
            cr = runtime.cluster.get_hikyosecret(namespace, name)
            if cr is None:
                raise CommandError(f"HikyoSecret {namespace}/{name} not found")
            if not settings.REDIS_URL:
                self._refuse_beside_a_live_leader(runtime)
        key = ObjectKey(namespace, name, cr["metadata"]["uid"])
        lock = runtime.queue.begin(key, runtime.identity, ttl=LOCK_TTL_SECONDS)
        if lock is None:
            raise CommandError(
                f"HikyoSecret {namespace}/{name} is being reconciled by another process right "
                "now (its per-key lock is held); it runs once more after that run, so there is "
                "nothing to do"
            )
        result = run_locked(runtime, lock, forced_full=full)
        if result is None:
            raise CommandError(f"the reconcile of {namespace}/{name} failed (see the log above)")
        outcome = result.outcome
        if not result.uid:
            raise CommandError(f"HikyoSecret {namespace}/{name} not found")
        self.stdout.write(f"{namespace}/{name}: {outcome.reason}")
        if outcome.message:
            self.stdout.write(f"  {outcome.message}")
        self.stdout.write(
            f"  lifecycle={outcome.lifecycle or '(unchanged)'} fetched={outcome.fetched} "
            f"wrote_secret={outcome.wrote_secret} status_written={result.status_written} "
            f"next={outcome.requeue.value}"
        )
        for condition in result.conditions_after:
            self.stdout.write(
                f"  {condition['type']}={condition['status']} {condition['reason']}: "
                f"{condition['message']}"
            )

    def _refuse_beside_a_live_leader(self, runtime: Any) -> None:
        namespace = runtime.settings.operator_namespace
        holder = live_holder(runtime.cluster.api_client, namespace, datetime.now(UTC))
        if holder is not None:
            raise CommandError(
                f"an operator ({holder}) holds the leader Lease in {namespace} and keeps its "
                "per-key locks in its own memory (embedded mode), so this command could write "
                "beside it; stop that operator first, or point this command at the operator's "
                "Redis (HIKYO_OPERATOR_REDIS_URL) to share its locks"
            )
