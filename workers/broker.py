"""The Celery broker transport of the scaled mode: kombu's Redis transport, made to survive the
loss of Redis (issue 7 item 4; settings.CELERY_BROKER_TRANSPORT selects it).

On a lost connection Celery's consumer closes the kombu Connection first, which detaches the
transport from it (``transport.client = None``), and only then the channels; closing a channel
that still holds unacknowledged messages (acks_late: every busy worker) makes kombu build a new
Redis pool from ``transport.client`` and die with ``AttributeError: 'NoneType' object has no
attribute 'hostname'`` ("Unrecoverable error": the worker exits). Here a channel remembers its
broker address, so that restore works or fails with a connection error that Celery ignores, and
an ack that cannot reach Redis is one log line instead of a CRITICAL traceback: the message then
comes back after the visibility timeout, or never if Redis restarted empty; both are harmless
because the keyed queue, not the message, is what schedules a reconcile (S8.4).
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

log = logging.getLogger(__name__)


class Channel(kombu_redis.Channel):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._broker = self.connection.client  # the kombu Connection: address and options

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = self.connection
        if transport is None:
            raise redis.exceptions.ConnectionError("broker channel closed")
        if transport.client is None:  # detached by Celery's reconnect; only we still use it
            transport.client = self._broker
        return super()._connparams(asynchronous=asynchronous)

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        try:
            super().basic_ack(delivery_tag, multiple=multiple)
        except redis.exceptions.RedisError as error:
            virtual.QoS.ack(self.qos, delivery_tag)  # done here; Redis may restore it later
            log.warning(
                "ack of message %s lost with the broker connection (%s); it is redelivered "
                "after the visibility timeout unless Redis lost it",
                delivery_tag,
                type(error).__name__,
            )


class Transport(kombu_redis.Transport):
    Channel = Channel


class StoreErrorsExpected:
    """Celery task annotation (settings.CELERY_TASK_ANNOTATIONS): a Redis error that escapes a
    task (the store went away between runs, e.g. at ``begin`` or ``finish``) is logged by
    Celery as one "raised expected" line, not a traceback. The key is not lost: its lock
    expires and the dispatcher's stale check, or the S8.4 lost-store re-enqueue, runs it again.
    """

    def annotate(self, task: Any) -> dict[str, Any] | None:
        if task.name.startswith("hikyo."):
            return {"throws": (redis.exceptions.RedisError,)}
        return None
