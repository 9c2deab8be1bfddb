"""The reads of one reconcile (S4.2), through the ports it is given; it writes nothing.

``observe`` reads the CR, then asks ``decide_before_fetch`` which read the next step needs and
makes it, until the steps stop or a fetch is planned: each object is read uncached, in step
order, and only once the steps before it passed (R7's list at least as new as the R0 read of
the CR, ``Cluster.list_hikyosecrets_for_target``, unless the leader's index holds the CR alone
on its target, ``_sole_indexed_claimant``). A 403 on a read is recorded with what a
SelfSubjectAccessReview says about it, for S4.15.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from typing import Any

from .credentials import Credential, account_refusal, from_secret, from_token
from .decide import decide_before_fetch
from .errors import FAILED_CALLS, Forbidden, HikyoClientError, KubeError
from .observed import ForbiddenRead, Observed
from .outcome import Outcome
from .pacing import paused_for
from .plan import FetchPlan, Needs, Now, Read, Stop
from .ports import LEASE_NAME, Cluster, CoordinationStore, ServerFor
from .settings import OperatorSettings
from .spec import SecretSpec, parse_spec
from .stamp import STAMP_ROOT_BYTES
from .stamp_root import STAMP_ROOT_SECRET, RecentStampRoot

log = logging.getLogger(__name__)


def observe(
    cluster: Cluster,
    store: CoordinationStore,
    settings: OperatorSettings,
    server_for: ServerFor,
    namespace: str,
    name: str,
    uid: str | None,
    *,
    forced_full: bool,
    now: Now,
    recent_root: RecentStampRoot | None = None,
) -> tuple[Observed, Stop | FetchPlan]:
    """The reads, and the decision the steps reached on them (a stop or the fetch plan), so
    the run does not derive it (the stamp key, the binding) once more. ``recent_root``: the
    process's reuse window for the stamp root (S6.3); without one, every run reads it."""
    observed = Observed(namespace, name, forced_full, read_cr(cluster, namespace, name, uid))
    reader = _Reader(cluster, store, settings, server_for, recent_root, wall=now.wall)
    # The R-table runs again after each read, on purpose: which read comes next (or none) is
    # the decision's, and only the steps before a read may say it is needed (S4.2). The steps
    # are pure and cheap next to the read each pass makes.
    while isinstance(decision := decide_before_fetch(observed, settings, now), Needs):
        observed = reader.read(observed, decision.read)
    return observed, decision


def read_cr(cluster: Cluster, namespace: str, name: str, uid: str | None) -> dict[str, Any] | None:
    """R0: the CR, None when it is gone or was replaced since it was queued (another UID)."""
    cr = cluster.get_hikyosecret(namespace, name)
    if cr is None or (uid and cr["metadata"]["uid"] != uid):
        return None
    return cr


class _Reader:
    def __init__(
        self,
        cluster: Cluster,
        store: CoordinationStore,
        settings: OperatorSettings,
        server_for: ServerFor,
        recent_root: RecentStampRoot | None = None,
        wall: float | None = None,
    ) -> None:
        self.cluster = cluster
        self.wall = time.time() if wall is None else wall  # the run's clock
        self.store = store
        self.settings = settings
        self.server_for = server_for
        self.recent_root = recent_root or RecentStampRoot(time.monotonic, window=0.0)

    def read(self, observed: Observed, read: Read) -> Observed:
        if read is Read.LEASE:  # any failure, Forbidden included, counts as a live owner
            other = observed.status.get("operatorNamespace", "")
            try:
                return replace(observed, lease=self.cluster.lease_record(other, LEASE_NAME))
            except KubeError:
                return replace(observed, lease=None, lease_readable=False)
        spec = parse_spec(observed.cr or {})  # the steps before this read parsed it
        if read is Read.TOKEN:
            paused = self._paused(observed, spec)
            if paused > 0:  # S4.1.6 rev 4: a CR that waits for a 429 pause mints no token
                return replace(observed, token=None, token_deferred=paused)
            return replace(observed, **_token(self.cluster, self.settings, spec, observed))
        try:
            return replace(observed, **self._fields(observed, read, spec))
        except Forbidden as error:
            return replace(observed, forbidden=self._forbidden(error, observed.namespace))

    def _paused(self, observed: Observed, spec: SecretSpec) -> float:
        instance_uid = ((observed.instance or {}).get("metadata") or {}).get("uid")
        if not instance_uid:
            return 0.0
        return paused_for(self.store, instance_uid, spec.org, self.wall)

    def _fields(self, observed: Observed, read: Read, spec: SecretSpec) -> dict[str, Any]:
        cluster = self.cluster
        if read is Read.INSTANCE:
            return {"instance": cluster.get_instance(spec.instance_name)}
        if read is Read.CREDENTIAL:
            if spec.credential_secret:
                return {
                    "credential_secret": cluster.get_secret(spec.namespace, spec.credential_secret)
                }
            account = spec.credential_service_account or ""
            return {"service_account": cluster.get_service_account(spec.namespace, account)}
        if read is Read.CLAIMANTS:
            if _sole_indexed_claimant(cluster, spec):
                return {"claimants": [observed.cr]}
            read_at = observed.metadata.get("resourceVersion") or ""
            claimants = cluster.list_hikyosecrets_for_target(
                spec.namespace, spec.target_name, read_at
            )
            return {"claimants": claimants}
        if read is Read.TARGET:
            return {"target": cluster.get_secret(spec.namespace, spec.target_name)}
        if read is Read.STAMP_ROOT:
            root = self.recent_root.read(
                lambda: cluster.get_secret(self.settings.operator_namespace, STAMP_ROOT_SECRET)
            )
            # S6.3: the root a fresh install creates, if the steps allow it
            fresh = os.urandom(STAMP_ROOT_BYTES) if root is None else b""
            return {"stamp_root": root, "fresh_root": fresh}
        if read is Read.REACH:
            return {"reach": cluster.list_hikyosecrets_in(self.settings.namespaces)}
        if read is Read.NOT_FOUND:
            return {"not_found": self.store.not_found_seen(spec.uid)}
        if read is Read.SERVER:
            instance = observed.instance or {}
            try:
                return {"server": self.server_for(instance)}
            except HikyoClientError as error:  # S3.1, S3.2: no request made
                return {"server": None, "server_error": str(error)}
        if read is Read.WORKLOADS:
            return self._workloads(spec)
        raise ValueError(f"no reader for {read}")

    def _workloads(self, spec: SecretSpec) -> dict[str, Any]:
        try:
            workloads = self.cluster.list_workloads(spec.namespace)
        except FAILED_CALLS as error:
            log.warning("workloads for %s/%s not listed: %s", spec.namespace, spec.name, error)
            return {"workloads": None}
        return {"workloads": workloads, "stall_first_seen": self.store.stall_first_seen(spec.uid)}

    def _forbidden(self, error: Forbidden, namespace: str) -> ForbiddenRead:
        resource = error.resource + (f"/{error.subresource}" if error.subresource else "")
        if error.namespace_terminating:
            return ForbiddenRead(error.verb, resource, namespace_terminating=True)
        return ForbiddenRead(
            error.verb, resource, allowed=access_allowed(self.cluster, error, namespace)
        )


def _sole_indexed_claimant(cluster: Cluster, spec: SecretSpec) -> bool:
    """R7 by the leader's watch index (S4.2's path for clusters without selectable fields,
    taken on every version, issue 37): a CR that the index holds alone under its target wins
    without the list. Anything else lists: a second claimant, an index that does not hold
    this CR (yet), or no index to ask (a shard's worker, a leader whose watch has not listed
    or is between a relist's pages).

    Sound because ``target.name`` is immutable (S1.3.2) and the index answers only while it
    holds the CRs in the order they were created (events in resourceVersion order, not a
    list's pages in name order): an index that holds this CR then holds every CR created
    before it, and only those can win R7. One it does not hold yet is newer: it wins only by
    a tie of the one-second ``creationTimestamp``, as it could against a list made a moment
    earlier; its own run lists, and so does this CR's next run once the index holds both.
    S4.2 also lists for a CR without ``status.managedSecretUID``; the order makes that list
    redundant, and it was one of a first sync's 7 requests."""
    return cluster.indexed_claimants(spec.namespace, spec.target_name) == (spec.uid,)


def access_allowed(cluster: Cluster, error: Forbidden, namespace: str) -> bool:
    """S4.15: whether RBAC permits the refused call (a SelfSubjectAccessReview)."""
    try:
        return cluster.access_allowed(
            error.verb, error.group, error.resource, error.subresource, namespace
        )
    except KubeError:
        return False


def _token(
    cluster: Cluster, settings: OperatorSettings, spec: SecretSpec, observed: Observed
) -> dict[str, Any]:
    """R6: the TokenRequest of a designated ServiceAccount (S2.3.4); any failure is S2.4."""
    instance = observed.instance or {}
    audience = (instance.get("spec") or {}).get("audience") or ""
    account = spec.credential_service_account or ""
    try:
        token = cluster.request_token(spec.namespace, account, audience, settings.token_seconds)
    except KubeError as error:  # incl. Forbidden by resourceNames
        return {"token": None, "token_error": str(error)}
    return {"token": token}


def read_credential(
    cluster: Cluster, settings: OperatorSettings, spec: SecretSpec, instance: dict[str, Any]
) -> Credential | Outcome:
    """R6 alone, for a caller that is not a reconcile (a status report, S7.1): the reads and the
    TokenRequest, then the same S2 decision. Raises KubeError when a read fails."""
    if spec.credential_secret:
        return from_secret(spec, cluster.get_secret(spec.namespace, spec.credential_secret))
    account = cluster.get_service_account(spec.namespace, spec.credential_service_account or "")
    refused = account_refusal(spec, account, settings, instance)
    if refused is not None:
        return refused
    assert account is not None
    found = _token(cluster, settings, spec, Observed(spec.namespace, spec.name, instance=instance))
    return from_token(spec, account, found.get("token"), found.get("token_error", ""))
