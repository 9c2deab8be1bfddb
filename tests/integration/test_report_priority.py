"""Scaled mode's broker order. S7.4: a status report never delays a reconcile; the leader's
report tasks go to the broker at its lowest priority, so a worker takes a waiting reconcile task
before a report task sent earlier. S4.1.6: a reconcile task carries its ticket's priority, so a
first sync sent after resyncs and retries runs before them. Real Redis, the senders
run_operator uses, and kombu's consumer."""

from __future__ import annotations

import json
import os

import redis
from kombu import Connection

from tests.support.django_scripts import run_python

SEND_REPORT_THEN_RECONCILES = """
from workers.keys import ObjectKey
from workers.leader.executors import celery_report_sender, celery_sender
from workers.queue.base import Priority, Ticket

def ticket(name, priority=Priority.NORMAL):
    return Ticket(ObjectKey("apps", name, "uid-" + name), False, priority)

celery_report_sender(ticket("reported"))
celery_sender(ticket("resynced", Priority.RESYNC))
celery_sender(ticket("retried"))
celery_sender(ticket("retried-too"))
celery_sender(Ticket(ObjectKey("apps", "edited", "uid-edited"), True, Priority.FIRST))
"""


def test_tasks_are_taken_first_syncs_first_and_reports_last(redis_server):
    url = redis_server.url.rsplit("/", 1)[0] + "/9"  # a database of its own
    redis.Redis.from_url(url).flushdb()
    env = {
        **os.environ,
        "HIKYO_OPERATOR_REDIS_URL": url,
        # Scaled settings name a PostgreSQL store; sending a task never opens it.
        "HIKYO_OPERATOR_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/unused",
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    script = "import django; django.setup()\n" + SEND_REPORT_THEN_RECONCILES
    sent = run_python(script, env)
    assert sent.returncode == 0, sent.stderr
    taken = []
    with Connection(url, transport_options={"socket_timeout": 10}) as connection:
        queue = connection.SimpleQueue("celery")
        for _ in range(5):
            message = queue.get(timeout=10)
            taken.append((message.headers["task"], json.loads(message.body)[0][1]))
            message.ack()
        queue.close()
    assert taken == [
        ("hikyo.reconcile_full", "edited"),
        ("hikyo.reconcile", "retried"),
        ("hikyo.reconcile", "retried-too"),
        ("hikyo.reconcile", "resynced"),
        ("hikyo.report_status", "reported"),
    ]
