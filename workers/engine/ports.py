"""What the engine needs from Kubernetes and from the shared coordination store.

The k8s package implements ``Cluster`` over the real API; the engine only sees plain data and
the errors of ``k8s.errors``. Every read here is uncached: the Python client keeps no cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .foreign_owner import LeaseRecord
from .outcome import Event
from .rollout import Workload

HIKYO_API_VERSION = "hikyo.dev/v1alpha1"


@dataclass
class SecretObject:
    """A Secret as plain data. ``data`` holds raw bytes and never appears in repr."""

    namespace: str
    name: str
    type: str = "Opaque"
    data: dict[str, bytes] = field(default_factory=dict, repr=False)
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    owner_references: list[dict[str, Any]] = field(default_factory=list)
    finalizers: list[str] = field(default_factory=list)
    deleting: bool = False

    def controller_uid(self) -> str | None:
        for ref in self.owner_references:
            if ref.get("controller"):
                return ref.get("uid")
        return None

    def controlled_by(self, cr_uid: str) -> bool:
        """S0.3 "controlled": a controller ownerReference with this CR's UID."""
        return any(
            ref.get("controller")
            and ref.get("uid") == cr_uid
            and ref.get("apiVersion", "").startswith("hikyo.dev/")
            and ref.get("kind") == "HikyoSecret"
            for ref in self.owner_references
        )


class Cluster(Protocol):
    def get_hikyosecret(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_instance(self, name: str) -> dict[str, Any] | None: ...
    def get_secret(self, namespace: str, name: str) -> SecretObject | None: ...
    def get_service_account(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def request_token(
        self, namespace: str, service_account: str, audience: str, seconds: int
    ) -> str: ...
    def list_hikyosecrets_for_target(self, namespace: str, target: str) -> list[dict[str, Any]]: ...
    # S6.3: the CRs in reach; ``namespaces`` is the watch list, empty = cluster-wide.
    def list_hikyosecrets_in(self, namespaces: Sequence[str]) -> list[dict[str, Any]]: ...
    def create_secret(self, secret: SecretObject) -> SecretObject: ...
    def replace_secret(self, secret: SecretObject) -> SecretObject: ...
    def delete_secret(self, namespace: str, name: str, uid: str, resource_version: str) -> None: ...
    def patch_hikyosecret_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None: ...
    def patch_hikyosecret_status(
        self, namespace: str, name: str, patch: dict[str, Any], resource_version: str
    ) -> None: ...
    def emit_event(self, cr: dict[str, Any], event: Event) -> None: ...
    def access_allowed(
        self, verb: str, group: str, resource: str, subresource: str, namespace: str
    ) -> bool: ...
    def namespace_uid(self, name: str) -> str: ...
    def lease_record(self, namespace: str, name: str) -> LeaseRecord | None: ...  # S4.1.7
    # S6.1: the namespace's opted-in Deployments, StatefulSets and DaemonSets (never Secrets).
    def list_workloads(self, namespace: str) -> list[Workload]: ...
    # S6.4: sets only pod-template annotation stamp.hikyo.dev/<target>; a non-empty ``uid``
    # makes the patch fail on a workload replaced since it was listed.
    def patch_workload_stamp(
        self, kind: str, namespace: str, name: str, target: str, stamp: str, *, uid: str = ""
    ) -> None: ...


class CoordinationStore(Protocol):
    """Shared, value-free coordination state (S8.4); in memory here, on Redis when scaled."""

    def not_found_seen(self, cr_uid: str) -> tuple[str, float] | None: ...
    def record_not_found(self, cr_uid: str, binding: str, at: float) -> None: ...
    def clear_not_found(self, cr_uid: str) -> None: ...
    # S6.5: "Kind/name" -> wall time a held stall test was first seen, per CR; names and times
    # only. ``set`` replaces the whole map; an empty map removes the record.
    def stall_first_seen(self, cr_uid: str) -> dict[str, float]: ...
    def set_stall_first_seen(self, cr_uid: str, first_seen: Mapping[str, float]) -> None: ...
    # Small value-free notes with a lifetime: an instance's capability set (S7.2), a CR's report
    # pause (S7.5), the cluster id (S7.6). Names and values are identifiers, never secrets.
    def put_note(self, name: str, value: str, ttl: float) -> None: ...
    def get_note(self, name: str) -> str | None: ...
    # S4.1.6 outbound pacing: one token bucket per instance, shared by every process. Returns 0
    # when a token was taken, else the seconds until one will be there (none is taken then).
    def take_token(self, bucket: str, rate: float, burst: int) -> float: ...
