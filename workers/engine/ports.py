"""What the engine needs from the outside, and the plain data that crosses to it: the Kubernetes
``Cluster`` (reads and writes apart, so fencing can wrap every write), the shared
``CoordinationStore``, and the Hikyo server. The ``k8s`` and ``hikyo`` adapters implement these
and may import this module, ``errors`` and ``fetched``; nothing else of the engine.

Every Cluster read is uncached: the Python client keeps no cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .fetched import FetchResult, ReportResult, Scope

HIKYO_API_VERSION = "hikyo.dev/v1alpha1"
LEASE_NAME = "hikyo-operator.hikyo.dev"  # S4.1.5: the leader Lease in the operator namespace
FIELD_MANAGER = "hikyo-operator"  # every write's field manager (S11.4 applies under it)

OPT_IN_ANNOTATION = "hikyo.dev/secrets"  # S6.1
STAMP_ANNOTATION_PREFIX = "stamp.hikyo.dev/"  # S6.4

DEPLOYMENT = "Deployment"
STATEFUL_SET = "StatefulSet"
DAEMON_SET = "DaemonSet"
KINDS = (DEPLOYMENT, STATEFUL_SET, DAEMON_SET)


@dataclass(frozen=True)
class Event:
    type: str  # "Normal" | "Warning"
    reason: str
    message: str


@dataclass(frozen=True)
class LeaseRecord:
    """What S4.1.7 reads from the other operator's Lease. ``holder`` is "" once released."""

    holder: str
    renewed_at: datetime | None


def opted_in_targets(annotations: Mapping[str, str] | None) -> frozenset[str]:
    """S6.1: the comma list in ``hikyo.dev/secrets``, trimmed, empties ignored."""
    raw = (annotations or {}).get(OPT_IN_ANNOTATION) or ""
    return frozenset(name for name in (part.strip() for part in raw.split(",")) if name)


def stamp_annotation(target_name: str) -> str:
    """The pod-template annotation that carries one target's stamp (S6.4)."""
    return STAMP_ANNOTATION_PREFIX + target_name


@dataclass(frozen=True)
class Workload:
    """What S4.1.1 lets a workload cache keep: identity, generation, the opt-in, the rollout
    knobs, the ``stamp.hikyo.dev/*`` pod-template annotations and the S6.5 status fields."""

    kind: str
    name: str
    uid: str = ""
    generation: int = 0
    targets: frozenset[str] = frozenset()
    stamps: Mapping[str, str] = field(default_factory=dict, repr=False)  # target -> stamp
    paused: bool = False  # Deployment spec.paused
    replicas: int = 1  # spec.replicas, defaulted to 1 (DaemonSets have none)
    strategy: str = ""  # Deployment strategy.type; StatefulSet/DaemonSet updateStrategy.type
    observed_generation: int = 0
    updated_replicas: int = 0
    ready_replicas: int = 0
    unavailable_replicas: int = 0
    progress_deadline_exceeded: bool = False  # Progressing=False/ProgressDeadlineExceeded
    desired_number_scheduled: int = 0
    updated_number_scheduled: int = 0
    number_unavailable: int = 0

    @property
    def ref(self) -> str:
        """``Kind/name``, as condition messages and first-seen records name it."""
        return f"{self.kind}/{self.name}"

    def opted_in(self, target_name: str) -> bool:
        return target_name in self.targets


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
    # managedFields: field manager -> the data keys it owns (S11.4 reads its own and others')
    data_managers: dict[str, frozenset[str]] = field(default_factory=dict)

    def keys_managed_by(self, manager: str) -> frozenset[str]:
        return self.data_managers.get(manager, frozenset())

    def keys_managed_elsewhere(self, manager: str) -> frozenset[str]:
        others = (keys for name, keys in self.data_managers.items() if name != manager)
        return frozenset().union(*others)

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


class ClusterReads(Protocol):
    def get_hikyosecret(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_instance(self, name: str) -> dict[str, Any] | None: ...
    def get_secret(self, namespace: str, name: str) -> SecretObject | None: ...
    def get_service_account(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    # S2.3.4: a TokenRequest creates nothing that lasts; it is the credential read of R6.
    def request_token(
        self, namespace: str, service_account: str, audience: str, seconds: int
    ) -> str: ...
    # R7's candidates from the leader's watch index: the UIDs naming the target; None when no
    # watch vouches for them.
    def indexed_claimants(self, namespace: str, target: str) -> tuple[str, ...] | None: ...
    # R7: the same-target CRs, at least as new as the CR's own R0 read (its resourceVersion).
    def list_hikyosecrets_for_target(
        self, namespace: str, target: str, not_older_than: str
    ) -> list[dict[str, Any]]: ...
    # S6.3: the CRs in reach; ``namespaces`` is the watch list, empty = cluster-wide. Each may
    # be reduced to metadata name/namespace/uid and status stamp/operatorNamespace.
    def list_hikyosecrets_in(self, namespaces: Sequence[str]) -> list[dict[str, Any]]: ...
    # S4.15: a SelfSubjectAccessReview, which changes nothing.
    def access_allowed(
        self, verb: str, group: str, resource: str, subresource: str, namespace: str
    ) -> bool: ...
    def namespace_uid(self, name: str) -> str: ...
    def lease_record(self, namespace: str, name: str) -> LeaseRecord | None: ...  # S4.1.7
    # S6.1: the namespace's opted-in Deployments, StatefulSets and DaemonSets (never Secrets).
    def list_workloads(self, namespace: str) -> list[Workload]: ...


class ClusterWrites(Protocol):
    """Every method here changes the cluster; ``FencedCluster`` guards each one (S4.1.4)."""

    def create_secret(self, secret: SecretObject) -> SecretObject: ...
    def replace_secret(self, secret: SecretObject) -> SecretObject: ...
    def delete_secret(self, namespace: str, name: str, uid: str, resource_version: str) -> None: ...
    def apply_secret_data(
        self, namespace: str, name: str, uid: str, resource_version: str, data: dict[str, bytes]
    ) -> SecretObject: ...
    def patch_hikyosecret_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None: ...
    def patch_hikyosecret_status(
        self, namespace: str, name: str, patch: dict[str, Any], resource_version: str
    ) -> dict[str, Any] | None: ...  # the CR as patched, when the answer carries it
    def emit_event(self, cr: dict[str, Any], event: Event) -> None: ...
    # S6.4: sets only pod-template annotation stamp.hikyo.dev/<target>; a non-empty ``uid``
    # makes the patch fail on a workload replaced since it was listed.
    def patch_workload_stamp(
        self, kind: str, namespace: str, name: str, target: str, stamp: str, *, uid: str = ""
    ) -> None: ...


class Cluster(ClusterReads, ClusterWrites, Protocol):
    """The Kubernetes API as the engine sees it."""


def write_methods() -> frozenset[str]:
    """The names of the Cluster methods that write, read off ``ClusterWrites`` itself."""
    return frozenset(name for name in vars(ClusterWrites) if not name.startswith("_"))


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
    # Several notes read at once (one round trip on Redis), in the order named.
    def get_notes(self, *names: str) -> list[str | None]: ...
    # S4.1.6 outbound pacing: one token bucket per instance, shared by every process. Returns 0
    # when a token was taken, else the seconds until one will be there (none is taken then).
    def take_token(self, bucket: str, rate: float, burst: int) -> float: ...


class HikyoServer(Protocol):
    """One Hikyo instance's client (the ``hikyo`` adapter). Neither call raises for HTTP or
    transport problems: the result says what happened, in value-free words (S3.6)."""

    def fetch(
        self,
        scope: Scope,
        *,
        token: str,
        projection: str,
        cursor: str | None,
        acknowledged_keys: Sequence[str],
    ) -> FetchResult: ...
    def report_status(
        self, scope: Scope, *, token: str, report: dict[str, Any]
    ) -> ReportResult: ...


# The client for a HikyoInstance object; raises InvalidBaseUrl / InvalidTrust (S3.1, S3.2).
ServerFor = Callable[[dict[str, Any]], HikyoServer]
