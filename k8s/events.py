"""Events on HikyoSecrets with the aggregation of S5.5.1 (the Python client has no correlator).

An event equal in (object UID, type, reason, message) to one sent in the last 10 minutes is
PATCHed (count + 1, lastTimestamp) instead of created; at most one create per CR per reason per
minute. The records are an event's name, a digest and a count: in the keyed-queue store of the
operator process, so scaled workers aggregate together (S5.5.1, S8.4).
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from kubernetes import client

from workers.engine.ports import Event

from .slim_api import CoreV1

SERIES_WINDOW_SECONDS = 600.0
CREATE_INTERVAL_SECONDS = 60.0
COMPONENT = "hikyo-operator"


def _digest(uid: str, event: Event) -> str:
    return hashlib.sha256(
        "\x00".join((uid, event.type, event.reason, event.message)).encode()
    ).hexdigest()


class EventRecords(Protocol):
    """Where the aggregation's records live: the keyed-queue store (``CoordinationStore``) in
    an operator process, so every scaled worker aggregates with the others and across its own
    restart (S5.5.1, S8.4); ``LocalRecords`` for a one-off command."""

    def get_note(self, name: str) -> str | None: ...
    def put_note(self, name: str, value: str, ttl: float) -> None: ...
    def take_token(self, bucket: str, rate: float, burst: int) -> float: ...


class LocalRecords:
    """This process's records, each kept until its window ends (swept once per window)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._notes: dict[str, tuple[str, float]] = {}  # name -> (value, expires)
        self._next_sweep = clock() + SERIES_WINDOW_SECONDS

    def _sweep(self, now: float) -> None:
        if now >= self._next_sweep:
            self._next_sweep = now + SERIES_WINDOW_SECONDS
            self._notes = {k: v for k, v in self._notes.items() if v[1] > now}

    def get_note(self, name: str) -> str | None:
        now = self.clock()
        self._sweep(now)
        found = self._notes.get(name)
        return found[0] if found and found[1] > now else None

    def put_note(self, name: str, value: str, ttl: float) -> None:
        self._notes[name] = (value, self.clock() + ttl)

    def take_token(self, bucket: str, rate: float, burst: int) -> float:
        """A bucket of one token (all the sink asks for): 0 when taken, else seconds left."""
        now = self.clock()
        self._sweep(now)
        left = self._notes.get(bucket, ("", now))[1] - now
        if left > 0:
            return left
        self._notes[bucket] = ("", now + 1.0 / rate)
        return 0.0

    def __len__(self) -> int:
        return len(self._notes)


class EventSink:
    def __init__(
        self,
        core: CoreV1,
        clock: Callable[[], float] = time.monotonic,
        records: EventRecords | None = None,
    ) -> None:
        self.core = core
        self.records = records if records is not None else LocalRecords(clock)
        self._lock = threading.Lock()  # a process's threads agree; processes, nearly (S5.5.1)

    def emit(self, cr: dict[str, Any], event: Event) -> None:
        metadata = cr["metadata"]
        uid, namespace = metadata["uid"], metadata["namespace"]
        series = f"event-series:{_digest(uid, event)}"
        stamp = datetime.now(UTC)
        with self._lock:
            found = self.records.get_note(series)
            if found:
                name, _, count_text = found.rpartition(" ")
                count = int(count_text) + 1
                patch = {"count": count, "lastTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ")}
                create = False
            else:
                limit = f"event-create:{uid}:{event.reason}"
                if self.records.take_token(limit, 1.0 / CREATE_INTERVAL_SECONDS, 1) > 0:
                    return  # rate limit: one create per CR per reason per minute
                name, count = f"{metadata['name']}.{uuid.uuid4().hex[:16]}", 1
                create = True
            self.records.put_note(series, f"{name} {count}", SERIES_WINDOW_SECONDS)
        if not create:
            self.core.patch_namespaced_event(name, namespace, patch)
            return
        self.core.create_namespaced_event(
            namespace,
            client.CoreV1Event(
                metadata=client.V1ObjectMeta(name=name, namespace=namespace),
                involved_object=client.V1ObjectReference(
                    api_version=cr.get("apiVersion", "hikyo.dev/v1alpha1"),
                    kind="HikyoSecret",
                    name=metadata["name"],
                    namespace=namespace,
                    uid=uid,
                    resource_version=metadata.get("resourceVersion"),
                ),
                type=event.type,
                reason=event.reason,
                message=event.message,
                count=1,
                first_timestamp=stamp,
                last_timestamp=stamp,
                source=client.V1EventSource(component=COMPONENT),
                reporting_component=COMPONENT,
                reporting_instance=COMPONENT,
            ),
        )
