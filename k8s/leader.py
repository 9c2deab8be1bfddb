"""Leader election on a coordination.k8s.io Lease (S4.1.5), after client-go's leaselock.

Expiry is judged by when *we observed* the holder's record change, not by the timestamps in
it, so clock skew between processes cannot hand leadership to two of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from workers.engine.ports import LEASE_NAME

from .slim_api import CoordinationV1

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeldLease:
    """The Lease as this process last took or renewed it: for the dashboard's record
    (controlplane/observations/leases.py), never for deciding who leads."""

    holder: str
    acquired_at: datetime | None
    renewed_at: datetime
    duration_seconds: int
    transitions: int


class LeaderElector(threading.Thread):
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        identity: str,
        *,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
        stop: threading.Event,
        lease_seconds: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        name: str = LEASE_NAME,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name="leader-election", daemon=True)
        self.api = CoordinationV1(api_client)  # not client.CoordinationV1Api: see k8s.slim_api
        self.namespace, self.identity, self.lease_name = namespace, identity, name
        self.on_started, self.on_stopped = on_started, on_stopped
        self.stop_event = stop
        self.lease_seconds, self.renew_deadline = lease_seconds, renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.is_leader = threading.Event()
        self._observed: tuple[str | None, str | None] = (None, None)  # (holder, renewTime)
        self._observed_at = 0.0
        self._last_renewed = 0.0
        # The Lease's leaseTransitions as this process last took or renewed it: a new holder
        # always counts one more, so it numbers terms of leadership in Kubernetes itself.
        self.transitions: int | None = None
        # Replaced whole (never mutated), so another thread reads one consistent snapshot.
        self.held: HeldLease | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                if self._attempt():
                    self._last_renewed = self.clock()
                    if not self.is_leader.is_set():
                        log.info("became leader (%s)", self.identity)
                        self.is_leader.set()
                        self.on_started()
                elif self.is_leader.is_set() and (
                    self.clock() - self._last_renewed > self.renew_deadline
                ):
                    self._step_down("could not renew the lease in time")
                self.stop_event.wait(self.retry_period)
        finally:
            if self.is_leader.is_set():
                self._step_down("shutting down")
                self._release()

    def _step_down(self, why: str) -> None:
        (log.info if self.stop_event.is_set() else log.warning)("leadership ended: %s", why)
        self.is_leader.clear()
        self.held = None
        self.on_stopped()

    def _attempt(self) -> bool:
        """One acquire-or-renew; any failure (API down, timeouts) counts as "not renewed"."""
        try:
            return self._try_acquire_or_renew()
        except Exception as error:
            log.warning(
                "lease %s/%s unreachable: %s", self.namespace, self.lease_name, type(error).__name__
            )
            return False

    def _now(self) -> datetime:
        return datetime.now(UTC)

    def _try_acquire_or_renew(self) -> bool:
        try:
            lease = self.api.read_namespaced_lease(self.lease_name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                log.warning("reading lease failed: HTTP %s", error.status)
                return False
            return self._create()
        spec = lease.spec or client.V1LeaseSpec()
        record = (spec.holder_identity, str(spec.renew_time))
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
        held_by_other = spec.holder_identity not in (None, "", self.identity)
        duration = spec.lease_duration_seconds or self.lease_seconds
        if held_by_other and self.clock() - self._observed_at < duration:
            return False
        now = self._now()
        if spec.holder_identity != self.identity:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity = self.identity
        spec.lease_duration_seconds = int(self.lease_seconds)
        spec.renew_time = now
        lease.spec = spec
        try:
            self.api.replace_namespaced_lease(self.lease_name, self.namespace, lease)
        except ApiException as error:
            if error.status != 409:  # 409: someone else won this round
                log.warning("updating lease failed: HTTP %s", error.status)
            return False
        self.transitions = spec.lease_transitions or 0
        self._held(spec.acquire_time, now)
        return True

    def _create(self) -> bool:
        now = self._now()
        lease = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.lease_name, namespace=self.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=int(self.lease_seconds),
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            ),
        )
        try:
            self.api.create_namespaced_lease(self.namespace, lease)
        except ApiException as error:
            if error.status != 409:
                log.warning("creating lease failed: HTTP %s", error.status)
            return False
        self.transitions = 0
        self._held(now, now)
        return True

    def _held(self, acquired: object, renewed: datetime) -> None:
        # A Lease written by hand may lack acquireTime: unknown, not a guess.
        acquired = acquired if isinstance(acquired, datetime) else None
        self.held = HeldLease(
            self.identity, acquired, renewed, int(self.lease_seconds), self.transitions or 0
        )

    def _release(self) -> None:
        """Hands the lease over at once on a clean shutdown (client-go ReleaseOnCancel)."""
        try:
            lease = self.api.read_namespaced_lease(self.lease_name, self.namespace)
            if lease.spec and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                lease.spec.lease_duration_seconds = 1
                self.api.replace_namespaced_lease(self.lease_name, self.namespace, lease)
        except Exception as error:
            log.info("releasing the lease failed: %s", type(error).__name__)


def live_holder(
    api_client: client.ApiClient, namespace: str, now: datetime, name: str = LEASE_NAME
) -> str | None:
    """Who holds the leader Lease by its own record (renewTime + leaseDurationSeconds still
    ahead of ``now``), or None when nobody does. For one-off commands that must not run beside
    a live operator; the elector itself never trusts these timestamps (clock skew)."""
    try:
        lease = CoordinationV1(api_client).read_namespaced_lease(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    spec = lease.spec
    if spec is None or not spec.holder_identity or spec.renew_time is None:
        return None
    expires = spec.renew_time.timestamp() + (spec.lease_duration_seconds or 0)
    return spec.holder_identity if expires > now.timestamp() else None
