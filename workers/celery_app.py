"""The Celery app only; configuration comes from Django settings' CELERY_* namespace."""

import logging
import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

from controlplane.boot import load_settings_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
# S8.1: a bad value is one line, not celery's import failure with its whole stack.
load_settings_or_exit()

app = Celery("hikyo_operator")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"], related_name="tasks")


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
