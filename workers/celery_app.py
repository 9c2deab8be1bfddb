"""The Celery app; configuration comes from Django settings' CELERY_* namespace. A worker's
start (``worker_init``, before its pool forks) migrates the observation store and serves the
worker's /metrics (S8.6); once ready, it advertises its slots to the leader."""

import logging
import os
import warnings
from typing import Any

from celery import Celery
from celery.exceptions import CPendingDeprecationWarning
from celery.signals import (
    celeryd_after_setup,
    worker_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)
from celery.worker.consumer import Consumer

from controlplane.boot import load_settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
# S8.1: a bad value is one line, not celery's import failure with its whole stack.
load_settings_or_exit()


class ConsumerWithoutGossip(Consumer):
    """Celery's consumer without its gossip and mingle steps (issue 33 item 5). Nothing here
    uses them: the leader learns a worker's slots from the keyed store
    (workers/broker_window.py), not from gossip, and no task is ever revoked, which mingle
    would sync at start. Gossip's restart after a Redis loss logged an ERROR with an
    AttributeError although the worker recovered; without it a reconnect is celery's own
    "Connected to" line. Set here, not only as worker flags, so every way of starting a worker
    (the chart, a shell) gets it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The same switches as the worker's --without-gossip/--without-mingle flags: the steps
        # stay in the blueprint (others require Mingle) but do nothing.
        super().__init__(*args, **{**kwargs, "without_gossip": True, "without_mingle": True})


app = Celery("hikyo_operator")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.worker_consumer = f"{__name__}:ConsumerWithoutGossip"
# No remote control (pidbox): anyone holding the Redis password could otherwise shut the
# workers down, cancel consumers or change rate limits through a broadcast. Nothing here
# sends one: the leader learns a worker's slots from the keyed store, and no task is revoked.
app.conf.worker_enable_remote_control = False
app.autodiscover_tasks(["workers"], related_name="tasks")


@celeryd_after_setup.connect
def _no_warning_for_kept_runs(**_: Any) -> None:
    """Running reconciles are kept on a lost connection on purpose (controlplane/settings.py
    says why); Celery still warns about that choice, in nine lines, on every Redis loss
    (issue 33 item 5). Set here: the worker's logging set-up, just before, turns Celery's own
    warnings to 'always'."""
    warnings.filterwarnings(
        "ignore", category=CPendingDeprecationWarning, module=r"celery\.worker\.consumer\."
    )


@worker_init.connect
def _migrate_before_work(**_: Any) -> None:
    """Issue 7 item 5: a worker never records into a database that lacks its tables. Runs once
    in the main process, before the pool forks; the migrate itself is locked (PostgreSQL
    advisory lock), so workers and run_operator starting together take turns."""
    from django.db import connections

    from controlplane.observations.migrate_at_start import (
        MigrationFailed,
        migrate_observation_store,
    )

    try:
        migrate_observation_store()
    except MigrationFailed as error:
        logging.getLogger(__name__).critical("%s", error)
        # SystemExit, because celery logs and ignores an Exception from a signal handler.
        raise SystemExit(1) from None
    finally:
        connections.close_all()  # forked pool children must not share this connection


_metrics_server: Any = None


@worker_init.connect
def _serve_metrics(**_: Any) -> None:
    """S8.6: this worker's /metrics on HIKYO_OPERATOR_METRICS_ADDR, served by the main process
    from prometheus_client's multiprocess files: enabled (and the directory emptied) here,
    before the prefork pool starts, so every pool child writes there (workers/metrics.py)."""
    global _metrics_server
    from django.conf import settings

    from workers import metrics
    from workers.engine.settings import parse_address

    raw = settings.HIKYO_METRICS_ADDR  # validated with the other settings (S8.1)
    address = parse_address("HIKYO_OPERATOR_METRICS_ADDR", raw, ":8080")
    try:
        metrics.enable_multiprocess()
        _metrics_server = metrics.serve(address, metrics.multiprocess_registry())
    except OSError as error:
        logging.getLogger(__name__).critical(
            "cannot serve metrics on %s: %s", raw, error.strerror or type(error).__name__
        )
        raise SystemExit(1) from None
    logging.getLogger(__name__).info("metrics on %s:%s", *_metrics_server.server_address[:2])


@worker_init.connect
def _name_this_worker(sender: Any = None, **_: Any) -> None:
    """Before the pool forks: the name this worker's slots and its runs' locks carry, so the
    leader can tell its runs apart once it is gone (workers/queue/orphans.py)."""
    from workers.runtime import name_this_worker

    name_this_worker(str(getattr(sender, "hostname", None) or "celery"))


@worker_init.connect
def _kubeconfig_loads(**_: Any) -> None:
    """Issue 33 item 5: a worker with no usable kubeconfig stops at its start, with the one
    line naming KUBECONFIG, and exits non-zero, rather than run and fail every task. Loading it
    reads files only: an apiserver that is down does not stop the worker."""
    from django.conf import settings

    from k8s.client import KubeconfigUnusable, api_client

    try:
        api_client(settings.KUBECONFIG).close()
    except KubeconfigUnusable as error:
        logging.getLogger(__name__).critical("%s", error)
        raise SystemExit(1) from None  # as _migrate_before_work: celery ignores an Exception


_slot_advertiser: Any = None


@worker_ready.connect
def _advertise_slots(sender: Any = None, **_: Any) -> None:
    """The leader hands out only as many keys as the live workers run at once, plus a spare
    round (workers/broker_window.py): this worker says how many it runs, from its main process
    (its pool is up by now), as long as it lives. Sent again on a broker reconnect: once is
    enough."""
    global _slot_advertiser
    if _slot_advertiser is not None:
        return
    from django.conf import settings

    from workers.broker_window import SlotAdvertiser
    from workers.runtime import build_queue, name_this_worker

    controller = getattr(sender, "controller", None)
    slots = getattr(controller, "concurrency", None)
    hostname = getattr(sender, "hostname", None)
    if isinstance(slots, int):
        from workers import metrics

        metrics.set_max_concurrent_reconciles(slots)
    if not isinstance(slots, int) or not hostname or not settings.REDIS_URL:
        return
    store = build_queue(settings.REDIS_URL)
    _slot_advertiser = SlotAdvertiser(store, name_this_worker(str(hostname)), slots)
    _slot_advertiser.start()


@worker_process_shutdown.connect
def _pool_child_exits(pid: int | None = None, **_: Any) -> None:
    from workers import metrics

    metrics.process_exited(pid)


@worker_shutdown.connect
def _stop_serving_metrics(**_: Any) -> None:
    from workers import metrics

    metrics.shutdown(_metrics_server)


@worker_shutting_down.connect
def _no_more_slots(**_: Any) -> None:
    """A stopping worker takes no new task, so its slots go as its shutdown begins (SIGTERM),
    not once its last task has ended: a warm shutdown can outlast the pod's grace period. It
    still says it lives until then, so its running tasks keep their keys; a SIGKILL before the
    end lets the advertisement expire, and the leader hands those keys out again."""
    if _slot_advertiser is not None:
        _slot_advertiser.drain()


@worker_shutdown.connect
def _withdraw_slots(**_: Any) -> None:
    """The pool has stopped (its tasks ended): the worker is gone without leaving keys."""
    if _slot_advertiser is not None:
        _slot_advertiser.stop()
