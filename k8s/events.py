"""Events on HikyoSecrets with the aggregation of S5.5.1 (the Python client has no correlator).

An event equal in (object UID, type, reason, message) to one sent in the last 10 minutes is
PATCHed (count + 1, lastTimestamp) instead of created; at most one create per CR per reason per
minute. The records are names and digests only.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

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


class EventSink:
    def __init__(self, core: CoreV1, clock: Callable[[], float] = time.monotonic):
        self.core = core
        self.clock = clock
        self._lock = threading.Lock()
        self._series: dict[str, tuple[str, int, float]] = {}  # digest -> (name, count, sent)
        self._creates: dict[tuple[str, str], float] = {}  # (uid, reason) -> last create
        self._next_sweep = clock() + SERIES_WINDOW_SECONDS

    def _forget_expired(self, now: float) -> None:
        """Drops the records no longer able to aggregate or limit anything (older than their
        window), once per window: without it they grew with every CR and message ever seen."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + SERIES_WINDOW_SECONDS
        self._series = {
            digest: series
            for digest, series in self._series.items()
            if now - series[2] < SERIES_WINDOW_SECONDS
        }
        self._creates = {
            key: last for key, last in self._creates.items() if now - last < CREATE_INTERVAL_SECONDS
        }

    def emit(self, cr: dict[str, Any], event: Event) -> None:
        metadata = cr["metadata"]
        uid, namespace = metadata["uid"], metadata["namespace"]
        digest = _digest(uid, event)
        now = self.clock()
        stamp = datetime.now(UTC)
        with self._lock:
            self._forget_expired(now)
            series = self._series.get(digest)
            if series and now - series[2] < SERIES_WINDOW_SECONDS:
                name, count, _ = series
                self._series[digest] = (name, count + 1, now)
                patch = {"count": count + 1, "lastTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ")}
                create = False
            else:
                last = self._creates.get((uid, event.reason))
                if last is not None and now - last < CREATE_INTERVAL_SECONDS:
                    return  # rate limit: one create per CR per reason per minute
                name = f"{metadata['name']}.{uuid.uuid4().hex[:16]}"
                self._series[digest] = (name, 1, now)
                self._creates[(uid, event.reason)] = now
                create = True
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
