"""``manage.py reconcile NAMESPACE/NAME``: run one reconcile now and print its outcome."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.observations.recording import record_run
from workers.engine.reconcile import reconcile
from workers.runtime import build_engine


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
        try:
            engine = build_engine(settings.HIKYO_OPERATOR, settings.KUBECONFIG)
        except ValueError as error:
            raise CommandError(str(error)) from error
        started, clock = datetime.now(UTC), time.monotonic()
        result = reconcile(engine, namespace, name, forced_full=full)
        record_run(result, started, time.monotonic() - clock)
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
