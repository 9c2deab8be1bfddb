"""The engine's ``Cluster`` port over the official client: plain data in, our errors out.

Every call here is a direct API request (the Python client has no cache), so every read is the
"uncached GET" the spec asks for, except the two the leader's watches may answer (the
HikyoInstance and the opted-in workloads, k8s.watch_cache). Secrets are only ever read by
name: never listed or watched.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from workers.engine.ports import (
    DAEMON_SET,
    DEPLOYMENT,
    FIELD_MANAGER,
    STATEFUL_SET,
    Event,
    LeaseRecord,
    SecretObject,
    Workload,
    stamp_annotation,
)

from .errors import (
    AlreadyExists,
    Conflict,
    FieldsOwnedElsewhere,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    ServerError,
)
from .events import EventSink
from .slim_api import AppsV1, AuthorizationV1, CoordinationV1, CoreV1, CustomObjects
from .watch_cache import ServedReads
from .workloads import workload_from

log = logging.getLogger(__name__)

GROUP = "hikyo.dev"
VERSION = "v1alpha1"
SECRETS_PLURAL = "hikyosecrets"
INSTANCES_PLURAL = "hikyoinstances"
APPS_GROUP = "apps"
# S6.1: the workload kinds that can opt in to rollouts, with their apps/v1 resource names.
WORKLOAD_RESOURCES = {
    DEPLOYMENT: "deployments",
    STATEFUL_SET: "statefulsets",
    DAEMON_SET: "daemonsets",
}


def translate(
    error: ApiException,
    action: str,
    *,
    verb: str,
    group: str,
    resource: str,
    namespace: str = "",
    subresource: str = "",
) -> KubeError:
    """Maps an ApiException to our tree, keeping only status and reason (never the body)."""
    status = error.status
    reason = ""
    causes: list[dict[str, Any]] = []
    try:
        body = json.loads(error.body or "{}")
        reason = str(body.get("reason") or "")
        causes = list((body.get("details") or {}).get("causes") or [])
    except (TypeError, ValueError):
        pass
    if status == 404:
        return NotFound(action, status, reason)
    if status == 409:
        owned = _fields_owned_elsewhere(causes)
        if owned:
            return FieldsOwnedElsewhere(action, status, reason, owned)
        return (AlreadyExists if reason == "AlreadyExists" else Conflict)(action, status, reason)
    if status == 403:
        return Forbidden(
            action,
            status,
            reason,
            verb=verb,
            group=group,
            resource=resource,
            subresource=subresource,
            namespace=namespace,
            namespace_terminating=any(c.get("type") == "NamespaceTerminating" for c in causes),
        )
    if status == 410:
        return Gone(action, status, reason)
    if status == 422:
        return Invalid(action, status, reason)
    return ServerError(action, status, reason)


def _fields_owned_elsewhere(causes: list[dict[str, Any]]) -> tuple[str, ...]:
    """A server-side apply's conflicts: the data keys named by ``.data.<key>`` causes (names
    only; the cause's message, which names the other manager, is not kept)."""
    keys = set()
    for cause in causes:
        field_path = str(cause.get("field") or "")
        if cause.get("reason") == "FieldManagerConflict" and field_path.startswith(".data."):
            keys.add(field_path.removeprefix(".data."))
    return tuple(sorted(keys))


def _data_managers(managed_fields: list[dict[str, Any]]) -> dict[str, frozenset[str]]:
    """managedFields -> field manager -> the data keys it owns (``f:data`` / ``f:<key>``)."""
    owners: dict[str, set[str]] = {}
    for entry in managed_fields:
        data = ((entry.get("fieldsV1") or {}).get("f:data")) or {}
        keys = {name.removeprefix("f:") for name in data if name.startswith("f:")}
        owners.setdefault(str(entry.get("manager") or ""), set()).update(keys)
    return {manager: frozenset(keys) for manager, keys in owners.items()}


def _maybe(call: Callable[[], Any], action: str, **where: str) -> Any:
    """A read where 404 means absent (None); any other error becomes our tree."""
    try:
        return call()
    except ApiException as error:
        if error.status == 404:
            return None
        raise translate(error, action, **where) from None


@contextmanager
def _translated(
    action: str,
    *,
    verb: str,
    group: str,
    resource: str,
    namespace: str = "",
    subresource: str = "",
) -> Iterator[None]:
    """Runs one API call, raising our error tree (value-free) instead of an ApiException."""
    try:
        yield
    except ApiException as error:
        raise translate(
            error,
            action,
            verb=verb,
            group=group,
            resource=resource,
            namespace=namespace,
            subresource=subresource,
        ) from None


_OWNER_REFERENCE_FIELDS = ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")


def _secret_from(obj: dict[str, Any]) -> SecretObject:
    """A Secret from the API's JSON. Secrets are read raw (``_preload_content=False``): a
    V1Secret model per read, create and read-back cost CPU the engine never used."""
    metadata = obj.get("metadata") or {}
    return SecretObject(
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        type=obj.get("type") or "Opaque",
        data={k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()},
        uid=metadata.get("uid") or "",
        resource_version=metadata.get("resourceVersion") or "",
        labels=dict(metadata.get("labels") or {}),
        annotations=dict(metadata.get("annotations") or {}),
        owner_references=[
            {k: ref[k] for k in _OWNER_REFERENCE_FIELDS if ref.get(k) is not None}
            for ref in metadata.get("ownerReferences") or []
        ],
        finalizers=list(metadata.get("finalizers") or []),
        deleting=metadata.get("deletionTimestamp") is not None,
        data_managers=_data_managers(metadata.get("managedFields") or []),
    )


def _raw_json(response: Any) -> Any:
    """The JSON of an answer read with ``_preload_content=False``, its connection released."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def _secret_body(secret: SecretObject) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": secret.name, "namespace": secret.namespace}
    if secret.resource_version:
        metadata["resourceVersion"] = secret.resource_version
    if secret.uid:
        metadata["uid"] = secret.uid
    if secret.labels:
        metadata["labels"] = secret.labels
    if secret.annotations:
        metadata["annotations"] = secret.annotations
    if secret.owner_references:
        metadata["ownerReferences"] = secret.owner_references
    if secret.finalizers:
        metadata["finalizers"] = secret.finalizers
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": secret.type,
        "data": {k: base64.b64encode(v).decode() for k, v in secret.data.items()},
    }


REACH_PAGE_SIZE = 100  # a parsed page of 500 CRs is ~6 MiB, and first reconciles list at once


def reach_fields(cr: dict[str, Any]) -> dict[str, Any]:
    """What S6.3's reach check reads of a CR: its name and namespace, status.stamp and
    status.operatorNamespace (``workers.engine.stamp_root.stamped_in_reach``)."""
    metadata, status = cr.get("metadata") or {}, cr.get("status") or {}
    kept_status = {k: status[k] for k in ("stamp", "operatorNamespace") if k in status}
    return {
        "metadata": {k: metadata[k] for k in ("namespace", "name", "uid") if k in metadata},
        "status": kept_status,
    }


class KubeCluster:
    """Implements workers.engine.ports.Cluster."""

    def __init__(self, api_client: client.ApiClient, events: EventSink | None = None) -> None:
        self.api_client = api_client
        # The reads the leader's watches answer (k8s.watch_cache): its own caches in embedded
        # mode, what it publishes to the keyed-queue store in a scaled worker.
        self.watched: ServedReads | None = None
        # Not the generated client.*Api classes: see k8s.slim_api.
        self.core = CoreV1(api_client)
        self.custom = CustomObjects(api_client)
        self.coordination = CoordinationV1(api_client)
        self.authorization = AuthorizationV1(api_client)
        self.apps = AppsV1(api_client)
        self.events = events or EventSink(self.core)

    # -- reads ---------------------------------------------------------------------------

    def get_hikyosecret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return _maybe(
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, SECRETS_PLURAL, name
            ),
            f"get hikyosecrets {namespace}/{name}",
            verb="get",
            group=GROUP,
            resource=SECRETS_PLURAL,
            namespace=namespace,
        )

    def get_instance(self, name: str) -> dict[str, Any] | None:
        if self.watched is not None:
            known, instance = self.watched.instances.lookup(name)
            if known:
                return instance
        return _maybe(
            lambda: self.custom.get_cluster_custom_object(GROUP, VERSION, INSTANCES_PLURAL, name),
            f"get hikyoinstances {name}",
            verb="get",
            group=GROUP,
            resource=INSTANCES_PLURAL,
        )

    def get_secret(self, namespace: str, name: str) -> SecretObject | None:
        secret = _maybe(
            lambda: _raw_json(
                self.core.read_namespaced_secret(name, namespace, _preload_content=False)
            ),
            f"get secrets {namespace}/{name}",
            verb="get",
            group="",
            resource="secrets",
            namespace=namespace,
        )
        return None if secret is None else _secret_from(secret)

    def get_service_account(self, namespace: str, name: str) -> dict[str, Any] | None:
        account = _maybe(
            lambda: self.core.read_namespaced_service_account(name, namespace),
            f"get serviceaccounts {namespace}/{name}",
            verb="get",
            group="",
            resource="serviceaccounts",
            namespace=namespace,
        )
        return None if account is None else self.api_client.sanitize_for_serialization(account)

    def request_token(
        self, namespace: str, service_account: str, audience: str, seconds: int
    ) -> str:
        """S2.3.4: exactly one audience, 600 s, no bound object; the token stays in memory."""
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[audience], expiration_seconds=seconds)
        )
        with _translated(
            f"create serviceaccounts/token {namespace}/{service_account}",
            verb="create",
            group="",
            resource="serviceaccounts",
            subresource="token",
            namespace=namespace,
        ):
            response = self.core.create_namespaced_service_account_token(
                service_account, namespace, request
            )
        return response.status.token

    def indexed_claimants(self, namespace: str, target: str) -> tuple[str, ...] | None:
        """R7's candidates from the leader's CR watch (k8s.watch_cache.TargetCache): the UIDs
        naming ``target``; None when no watch vouches for them (the caller lists)."""
        if self.watched is None:
            return None
        return self.watched.claimants.lookup(namespace, target)

    def list_hikyosecrets_for_target(
        self, namespace: str, target: str, not_older_than: str
    ) -> list[dict[str, Any]]:
        """R7 via the CRD's selectable field spec.target.name, at least as new as
        ``not_older_than``: the resourceVersion of the CR as R0 read it, uncached.

        A list without a resourceVersion is served from the apiserver's watch cache only once
        that cache has confirmed etcd's newest revision; after a write to any other resource
        that waits for a progress notification, ~95 ms (``bench/reconcile_cost.py``: a first
        sync took 100 ms, 30 ms without it). ``NotOlderThan`` is answered at once, from the
        cache's newest state. It holds at least every CR created before this one last
        changed, so every claimant with an earlier ``creationTimestamp`` (the winners of R7),
        and the R8 read and the create-only-absent write still guard the target itself. An
        apiserver that has not reached the revision within its 3 s wait (HA, a member lagging)
        answers 504; the consistent list serves then, as it does for an empty
        ``not_older_than``.
        """
        selector = f"spec.target.name={target}"
        if not_older_than:
            try:
                return self._list_hikyosecrets(
                    namespace,
                    field_selector=selector,
                    resource_version=not_older_than,
                    resource_version_match="NotOlderThan",
                )
            except KubeError as error:
                if error.status != 504:
                    raise
                log.info("list hikyosecrets %s: not at the CR's revision yet (504)", namespace)
        return self._list_hikyosecrets(namespace, field_selector=selector)

    def _list_hikyosecrets(self, namespace: str, **options: str) -> list[dict[str, Any]]:
        with _translated(
            f"list hikyosecrets {namespace}",
            verb="list",
            group=GROUP,
            resource=SECRETS_PLURAL,
            namespace=namespace,
        ):
            listed = self.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, SECRETS_PLURAL, **options
            )
        return list(listed.get("items") or [])

    def namespace_uid(self, name: str) -> str:
        """S7.6: the cluster id is the kube-system Namespace UID."""
        with _translated(f"get namespaces {name}", verb="get", group="", resource="namespaces"):
            return self.core.read_namespace(name).metadata.uid

    def lease_record(self, namespace: str, name: str) -> LeaseRecord | None:
        """S4.1.7: holder and renewTime of another operator's Lease; None when it is absent.
        A released Lease (clean shutdown, ``holderIdentity: ""``) has an empty holder."""
        lease = _maybe(
            lambda: self.coordination.read_namespaced_lease(name, namespace),
            f"get leases {namespace}/{name}",
            verb="get",
            group="coordination.k8s.io",
            resource="leases",
            namespace=namespace,
        )
        if lease is None:
            return None
        spec = lease.spec or client.V1LeaseSpec()
        return LeaseRecord(holder=spec.holder_identity or "", renewed_at=spec.renew_time)

    def list_hikyosecrets_in(self, namespaces: Sequence[str]) -> list[dict[str, Any]]:
        """S6.3: an uncached list of the CRs in reach: the watch list, or every namespace when it
        is empty (cluster-wide mode). A listed namespace we may not list is outside the
        effective reach (S8.1: watch list ∩ RBAC), so it is skipped, not an error."""
        if not namespaces:
            with _translated(
                "list hikyosecrets", verb="list", group=GROUP, resource=SECRETS_PLURAL
            ):
                return self._reach_pages(
                    self.custom.list_cluster_custom_object, (GROUP, VERSION, SECRETS_PLURAL)
                )
        items: list[dict[str, Any]] = []
        for namespace in namespaces:
            try:
                with _translated(
                    f"list hikyosecrets {namespace}",
                    verb="list",
                    group=GROUP,
                    resource=SECRETS_PLURAL,
                    namespace=namespace,
                ):
                    listed_here = self._reach_pages(
                        self.custom.list_namespaced_custom_object,
                        (GROUP, VERSION, namespace, SECRETS_PLURAL),
                    )
            except Forbidden:
                log.info("hikyosecrets in %s are not readable; outside our reach", namespace)
                continue
            items.extend(listed_here)
        return items

    @staticmethod
    def _reach_pages(list_fn: Callable[..., Any], args: tuple[str, ...]) -> list[dict[str, Any]]:
        """One consistent (uncached) list, read in pages of REACH_PAGE_SIZE, each CR reduced at
        once to what S6.3 reads (``reach_fields``): a fresh install at thousands of CRs would
        otherwise hold every CR in full, once per reconcile running at the same time."""
        items: list[dict[str, Any]] = []
        paging: dict[str, Any] = {"limit": REACH_PAGE_SIZE}
        while True:
            page = json.loads(list_fn(*args, _preload_content=False, **paging).data)
            items.extend(reach_fields(item) for item in page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            paging["_continue"] = token

    def access_allowed(
        self, verb: str, group: str, resource: str, subresource: str, namespace: str
    ) -> bool:
        """S4.15: a SelfSubjectAccessReview for the call that was forbidden."""
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb,
                    group=group,
                    resource=resource,
                    subresource=subresource or None,
                    namespace=namespace,
                )
            )
        )
        with _translated(
            "create selfsubjectaccessreviews",
            verb="create",
            group="authorization.k8s.io",
            resource="selfsubjectaccessreviews",
        ):
            answer = self.authorization.create_self_subject_access_review(review)
        return bool(answer.status and answer.status.allowed)

    def list_workloads(self, namespace: str) -> list[Workload]:
        """S6.1: the namespace's workloads, kept only if they opted in, reduced at once to the
        fields S4.1.1 allows a cache to keep.

        ``resourceVersion=0`` serves them from the apiserver's watch cache. A consistent list
        would wait for that cache to confirm the newest etcd revision, ~70 ms after every write
        of ours (measured with bench/reconcile_cost.py). A list a moment stale can at most cause
        a repeated, identical stamp patch or an S6.5 verdict one evaluation late. The leader's
        own workload watches hold the same records and answer first (k8s.watch_cache); in a
        scaled worker, what the leader published answers when none opted in.
        """
        cached = self.watched.workloads.lookup(namespace) if self.watched is not None else None
        if cached is not None:
            return cached
        listers = {
            DEPLOYMENT: self.apps.list_namespaced_deployment,
            STATEFUL_SET: self.apps.list_namespaced_stateful_set,
            DAEMON_SET: self.apps.list_namespaced_daemon_set,
        }
        found: list[Workload] = []
        for kind, lister in listers.items():
            with _translated(
                f"list {WORKLOAD_RESOURCES[kind]} {namespace}",
                verb="list",
                group=APPS_GROUP,
                resource=WORKLOAD_RESOURCES[kind],
                namespace=namespace,
            ):
                response = lister(namespace, resource_version="0", _preload_content=False)
            for item in _raw_json(response).get("items") or []:
                workload = workload_from(kind, item)
                if workload is not None:
                    found.append(workload)
        return found

    # -- writes --------------------------------------------------------------------------

    def create_secret(self, secret: SecretObject) -> SecretObject:
        with _translated(
            f"create secrets {secret.namespace}/{secret.name}",
            verb="create",
            group="",
            resource="secrets",
            namespace=secret.namespace,
        ):
            created = self.core.create_namespaced_secret(
                secret.namespace, _secret_body(secret), _preload_content=False
            )
        return _secret_from(_raw_json(created))

    def replace_secret(self, secret: SecretObject) -> SecretObject:
        """A full update with the read resourceVersion as precondition (409 on a race)."""
        with _translated(
            f"update secrets {secret.namespace}/{secret.name}",
            verb="update",
            group="",
            resource="secrets",
            namespace=secret.namespace,
        ):
            replaced = self.core.replace_namespaced_secret(
                secret.name, secret.namespace, _secret_body(secret), _preload_content=False
            )
        return _secret_from(_raw_json(replaced))

    def apply_secret_data(
        self, namespace: str, name: str, uid: str, resource_version: str, data: dict[str, bytes]
    ) -> SecretObject:
        """S11.4: server-side apply of ``data`` alone, as FIELD_MANAGER, never forced. The UID
        as well as the resourceVersion is a precondition: an apply creates an absent object
        even with a resourceVersion, but not one whose UID it names (409)."""
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid,
                "resourceVersion": resource_version,
            },
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        with _translated(
            f"apply secrets {namespace}/{name}",
            verb="patch",
            group="",
            resource="secrets",
            namespace=namespace,
        ):
            applied = self.core.apply_namespaced_secret(
                name,
                namespace,
                body,
                field_manager=FIELD_MANAGER,
                force=False,
                _preload_content=False,
            )
        return _secret_from(_raw_json(applied))

    def delete_secret(self, namespace: str, name: str, uid: str, resource_version: str) -> None:
        """S4.10.2: preconditions on UID and resourceVersion, so a replacement is never hit."""
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version)
        )
        with _translated(
            f"delete secrets {namespace}/{name}",
            verb="delete",
            group="",
            resource="secrets",
            namespace=namespace,
        ):
            self.core.delete_namespaced_secret(name, namespace, body=options)

    def patch_hikyosecret_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None:
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}}
        with _translated(
            f"patch hikyosecrets {namespace}/{name}",
            verb="patch",
            group=GROUP,
            resource=SECRETS_PLURAL,
            namespace=namespace,
        ):
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, SECRETS_PLURAL, name, body
            )

    def patch_hikyosecret_status(
        self, namespace: str, name: str, patch: dict[str, Any], resource_version: str
    ) -> dict[str, Any] | None:
        """A JSON merge patch of the status subresource (None removes a field); the CR as
        patched."""
        body = {"metadata": {"resourceVersion": resource_version}, "status": patch}
        with _translated(
            f"patch hikyosecrets/status {namespace}/{name}",
            verb="patch",
            group=GROUP,
            resource=SECRETS_PLURAL,
            subresource="status",
            namespace=namespace,
        ):
            patched = self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, SECRETS_PLURAL, name, body
            )
        return patched if isinstance(patched, dict) else None

    def patch_workload_stamp(
        self, kind: str, namespace: str, name: str, target: str, stamp: str, *, uid: str = ""
    ) -> None:
        """S6.4: a JSON merge patch of one pod-template annotation and nothing else.

        With ``uid`` the patch also carries ``metadata.uid``, which the apiserver rejects (422)
        if the name now belongs to another object, so a replacement is never touched.
        """
        patchers = {
            DEPLOYMENT: self.apps.patch_namespaced_deployment,
            STATEFUL_SET: self.apps.patch_namespaced_stateful_set,
            DAEMON_SET: self.apps.patch_namespaced_daemon_set,
        }
        body: dict[str, Any] = {
            "spec": {"template": {"metadata": {"annotations": {stamp_annotation(target): stamp}}}}
        }
        if uid:
            body["metadata"] = {"uid": uid}
        with _translated(
            f"patch {WORKLOAD_RESOURCES[kind]} {namespace}/{name}",
            verb="patch",
            group=APPS_GROUP,
            resource=WORKLOAD_RESOURCES[kind],
            namespace=namespace,
        ):
            patchers[kind](name, namespace, body, _content_type="application/merge-patch+json")

    def emit_event(self, cr: dict[str, Any], event: Event) -> None:
        namespace = (cr.get("metadata") or {}).get("namespace", "")
        with _translated(
            f"create events {namespace}",
            verb="create",
            group="",
            resource="events",
            namespace=namespace,
        ):
            self.events.emit(cr, event)

    # -- for the operator's commands (manage.py resync); not on the engine's port ---------

    def select_hikyosecrets(
        self, namespace: str | None = None, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        """An uncached, paged list of HikyoSecrets in ``namespace`` (None: every namespace),
        optionally restricted by a label selector; a malformed one is the apiserver's 400."""
        where = f" {namespace}" if namespace else ""
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            options: dict[str, Any] = {"limit": 500}
            if label_selector:
                options["label_selector"] = label_selector
            if token:
                options["_continue"] = token
            with _translated(
                f"list hikyosecrets{where}",
                verb="list",
                group=GROUP,
                resource=SECRETS_PLURAL,
                namespace=namespace or "",
            ):
                if namespace:
                    listed = self.custom.list_namespaced_custom_object(
                        GROUP, VERSION, namespace, SECRETS_PLURAL, **options
                    )
                else:
                    listed = self.custom.list_cluster_custom_object(
                        GROUP, VERSION, SECRETS_PLURAL, **options
                    )
            items.extend(listed.get("items") or [])
            token = (listed.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    def annotate_hikyosecret(
        self,
        namespace: str,
        name: str,
        annotations: dict[str, str | None],
        *,
        uid: str = "",
    ) -> None:
        """A JSON merge patch of ``metadata.annotations`` alone (None removes one): no spec
        change, so no new generation. With ``uid`` the apiserver refuses the patch if the name now
        belongs to another object."""
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if uid:
            metadata["uid"] = uid
        with _translated(
            f"patch hikyosecrets {namespace}/{name}",
            verb="patch",
            group=GROUP,
            resource=SECRETS_PLURAL,
            namespace=namespace,
        ):
            self.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                SECRETS_PLURAL,
                name,
                {"metadata": metadata},
                _content_type="application/merge-patch+json",
            )


class ClusterUnavailable(Exception):
    """No usable Kubernetes configuration; the message is one line, without the file's text."""


def configured_cluster(kubeconfig: str | None) -> KubeCluster:
    """The client the operator uses (``kubeconfig``, else in-cluster, else ~/.kube/config),
    with its timeouts; a missing or unreadable configuration raises ClusterUnavailable."""
    from .client import KubeconfigUnusable, api_client

    try:
        return KubeCluster(api_client(kubeconfig))
    except KubeconfigUnusable as error:
        raise ClusterUnavailable(f"no cluster configured: {error}") from None
