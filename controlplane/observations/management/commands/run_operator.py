"""``manage.py run_operator``: the operator itself.

Embedded (no Redis configured, the default): watches, scheduler, an in-memory keyed queue and
a thread pool of reconciles in this one process. Scaled (HIKYO_OPERATOR_REDIS_URL / REDIS_URL
set): this process watches and dispatches while it holds the Lease; Celery workers
(``celery -A workers.celery_app worker``) run the reconciles.

It migrates the observation database before anything records (issue 7 item 5). /metrics
(S8.6) is served on HIKYO_OPERATOR_METRICS_ADDR (``--metrics-addr``), apart from the probes and
the dashboard (HIKYO_OPERATOR_HEALTH_ADDR, ``--http-addr``), which a production WSGI server
(cheroot, ``controlplane.observations.serving``) serves in this process.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.wsgi import get_wsgi_application

from controlplane.observations import process, serving
from controlplane.observations.cluster_errors import cluster_errors_as_one_line
from controlplane.observations.leases import LeaseRecorder
from controlplane.observations.migrate_at_start import MigrationFailed, migrate_observation_store
from controlplane.observations.recording import BackgroundRecorder
from workers import metrics
from workers.engine.settings import SettingsInvalid, parse_address
from workers.leader.executors import executor_for
from workers.leader.process import OperatorProcess
from workers.memory import limit_malloc_arenas, tracemalloc_on_signal
from workers.runtime import build_runtime
from workers.shards import layout_of

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the operator (embedded mode unless a Redis URL is configured)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--http-addr",
            default=settings.HIKYO_HTTP_ADDR,
            help="where /healthz, /readyz and the dashboard are served (host:port)",
        )
        parser.add_argument(
            "--metrics-addr",
            default=settings.HIKYO_METRICS_ADDR,
            help="where /metrics is served (host:port; S8.6)",
        )

    def handle(self, *args: Any, http_addr: str, metrics_addr: str, **options: Any) -> None:
        limit_malloc_arenas()  # before any thread starts (workers.memory)
        tracemalloc_on_signal()  # development only, with HIKYO_TRACEMALLOC_DIR
        try:  # S8.1: a bad address is one line, not a traceback
            address = parse_address("--http-addr", http_addr, ":8081")
            metrics_address = parse_address("--metrics-addr", metrics_addr, ":8080")
        except SettingsInvalid as error:
            raise CommandError(str(error)) from None
        try:
            migrate_observation_store()
        except MigrationFailed as error:
            raise CommandError(str(error)) from None
        operator_settings = settings.HIKYO_OPERATOR
        recorder = BackgroundRecorder()
        try:
            with cluster_errors_as_one_line():
                runtime = build_runtime(
                    operator_settings,
                    kubeconfig=settings.KUBECONFIG,
                    redis_url=settings.REDIS_URL,
                    record=recorder,
                    record_report=recorder.report,
                )
        except ValueError as error:
            raise CommandError(str(error)) from None
        scaled = settings.REDIS_URL is not None
        shard = layout_of(operator_settings)
        operator = OperatorProcess(
            runtime,
            executor_for(runtime, shard, scaled=scaled),
            leader_election=operator_settings.leader_election,
        )
        process.current = operator
        try:
            metrics_server = metrics.serve(
                metrics_address, metrics.operator_registry(operator.metrics_collector())
            )
        except OSError as error:
            raise CommandError(
                f"cannot serve metrics on {metrics_addr}: {error.strerror or type(error).__name__}"
            ) from None
        try:
            http = serving.serve(address, get_wsgi_application())
        except OSError as error:
            metrics.shutdown(metrics_server)
            raise CommandError(
                f"cannot serve http on {http_addr}: {error.strerror or error}"
            ) from None

        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        mode = "scaled (Celery on Redis)" if scaled else "embedded"
        if shard.sharded:
            mode += f", {shard} (Lease {shard.lease_name})"
        if scaled and not settings.SECRET_KEY_FROM_ENVIRONMENT:
            log.warning(
                "DJANGO_SECRET_KEY is not set: each replica signs dashboard sessions with its "
                "own random key, so a login holds only on the replica that made it"
            )
        log.info(
            "hikyo-operator running in %s mode as %s; http on %s:%s, metrics on %s:%s",
            mode,
            runtime.identity,
            *http.address,
            *metrics_server.server_address[:2],
        )
        self.stdout.write(
            f"hikyo-operator {mode}; http on port {http.address[1]}, "
            f"metrics on port {metrics_server.server_address[1]}"
        )
        operator.start()
        # Issue 51: while this process leads, its Lease's facts go to the store, where the
        # overview reads them (no apiserver read per page).
        lease_recorder = LeaseRecorder(operator, stop)
        lease_recorder.start()
        stop.wait()
        log.info("shutting down")
        operator.stop()
        lease_recorder.join(timeout=5)
        recorder.close()
        http.stop()
        metrics.shutdown(metrics_server)
