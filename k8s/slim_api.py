"""The few Kubernetes API calls the operator makes, without the generated API classes.

The official client's ``CoreV1Api`` and ``AppsV1Api`` are generated modules of 63,000 and
20,000 lines whose ~500 pydantic-validated methods cost the embedded operator ~25 MiB of RSS
the moment they are instantiated (issue 13, measured with bench/operator_scale.py; S9.6 asks
for 128 MiB at 5,000 HikyoSecrets). ``CustomObjectsApi``, ``CoordinationV1Api``,
``AuthorizationV1Api`` and ``ApiextensionsV1Api`` cost another 4.6 MiB between them for the
ten methods used, so those calls are here too. Each call here goes through the same
``ApiClient`` the generated method would use (``param_serialize``, ``call_api``,
``response_deserialize``: the same URL, query, Accept and Content-Type, the same models back,
the same ``ApiException`` on a non-2xx answer, the same ``_preload_content`` and
``_request_timeout`` handling), so callers, timeouts (``k8s.client.bounded``) and
``kubernetes.watch`` see no difference. Only the argument validation pydantic did is gone; our
callers pass plain str/int/bool/dict/models.

Where a caller ignores the answer (the workload stamp patch) it is returned as a plain dict,
so the model tree of a Deployment is never imported.
"""

from __future__ import annotations

import re
from typing import Any

from kubernetes import client

# The generated methods' Accept lists, of which ApiClient.select_header_accept picks the first
# JSON one, and the PATCH Content-Type list (select_header_content_type picks json-patch, which
# the REST layer turns into a strategic merge patch for a non-list body).
ACCEPT = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]
ACCEPT_LIST = [*ACCEPT, "application/cbor", "application/json;stream=watch"]
# Custom objects have no strategic merge patch: their generated methods default to a merge patch.
CUSTOM_PATCH_TYPES = ["application/merge-patch+json", "application/apply-patch+yaml"]
PATCH_TYPES = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/apply-patch+cbor",
]
_CALL_OPTIONS = ("_preload_content", "_request_timeout", "_content_type", "_headers")
_FIRST_CAP = re.compile(r"_([a-z])")


def _query_name(option: str) -> str:
    """``field_manager`` -> ``fieldManager``, ``_continue`` -> ``continue`` (the API's names)."""
    return _FIRST_CAP.sub(lambda m: m.group(1).upper(), option.lstrip("_"))


class _Calls:
    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = api_client or client.ApiClient()

    def _call(
        self,
        method: str,
        path: str,
        path_params: dict[str, str],
        response_type: str,
        options: dict[str, Any],
        *,
        body: Any = None,
        list_call: bool = False,
        patch_types: list[str] = PATCH_TYPES,
    ) -> Any:
        call_options = {k: options.pop(k) for k in _CALL_OPTIONS if k in options}
        query = [(_query_name(k), v) for k, v in options.items() if v is not None]
        headers: dict[str, str] = dict(call_options.get("_headers") or {})
        headers.setdefault(
            "Accept", self.api_client.select_header_accept(ACCEPT_LIST if list_call else ACCEPT)
        )
        if call_options.get("_content_type"):
            headers["Content-Type"] = call_options["_content_type"]
        elif method == "PATCH":
            headers["Content-Type"] = self.api_client.select_header_content_type(patch_types)
        serialized = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            path_params=path_params,
            query_params=query,
            header_params=headers,
            body=body,
            post_params=[],
            files={},
            auth_settings=["BearerToken"],
            collection_formats={},
        )
        return self.api_client._call_with_legacy_options(
            serialized,
            {"200": response_type, "201": response_type, "202": response_type},
            None,
            call_options.get("_preload_content", True),
            call_options.get("_request_timeout"),
            True,
        )


class CoreV1(_Calls):
    """The core/v1 calls of ``k8s.gateway`` and ``k8s.events``, as ``CoreV1Api`` names them."""

    def read_namespace(self, name: str, **options: Any) -> client.V1Namespace:
        return self._call(
            "GET", "/api/v1/namespaces/{name}", {"name": name}, "V1Namespace", options
        )

    def read_namespaced_secret(self, name: str, namespace: str, **options: Any) -> client.V1Secret:
        path = "/api/v1/namespaces/{namespace}/secrets/{name}"
        return self._call("GET", path, {"name": name, "namespace": namespace}, "V1Secret", options)

    def create_namespaced_secret(self, namespace: str, body: Any, **options: Any) -> Any:
        path = "/api/v1/namespaces/{namespace}/secrets"
        return self._call("POST", path, {"namespace": namespace}, "V1Secret", options, body=body)

    def replace_namespaced_secret(
        self, name: str, namespace: str, body: Any, **options: Any
    ) -> Any:
        path = "/api/v1/namespaces/{namespace}/secrets/{name}"
        params = {"name": name, "namespace": namespace}
        return self._call("PUT", path, params, "V1Secret", options, body=body)

    def apply_namespaced_secret(self, name: str, namespace: str, body: Any, **options: Any) -> Any:
        """Server-side apply (``application/apply-patch+yaml``; JSON is YAML)."""
        path = "/api/v1/namespaces/{namespace}/secrets/{name}"
        options.setdefault("_content_type", "application/apply-patch+yaml")
        params = {"namespace": namespace, "name": name}
        return self._call("PATCH", path, params, "V1Secret", options, body=body)

    def delete_namespaced_secret(
        self, name: str, namespace: str, body: Any = None, **options: Any
    ) -> Any:
        path = "/api/v1/namespaces/{namespace}/secrets/{name}"
        params = {"name": name, "namespace": namespace}
        return self._call("DELETE", path, params, "V1Status", options, body=body)

    def read_namespaced_service_account(self, name: str, namespace: str, **options: Any) -> Any:
        path = "/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
        params = {"name": name, "namespace": namespace}
        return self._call("GET", path, params, "V1ServiceAccount", options)

    def create_namespaced_service_account_token(
        self, name: str, namespace: str, body: Any, **options: Any
    ) -> Any:
        path = "/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        params = {"name": name, "namespace": namespace}
        return self._call("POST", path, params, "AuthenticationV1TokenRequest", options, body=body)

    def create_namespaced_event(self, namespace: str, body: Any, **options: Any) -> Any:
        path = "/api/v1/namespaces/{namespace}/events"
        return self._call("POST", path, {"namespace": namespace}, "CoreV1Event", options, body=body)

    def patch_namespaced_event(self, name: str, namespace: str, body: Any, **options: Any) -> Any:
        path = "/api/v1/namespaces/{namespace}/events/{name}"
        params = {"name": name, "namespace": namespace}
        return self._call("PATCH", path, params, "CoreV1Event", options, body=body)


_WORKLOADS = {
    "deployment": "deployments",
    "stateful_set": "statefulsets",
    "daemon_set": "daemonsets",
}


class AppsV1(_Calls):
    """The apps/v1 calls of the workload watches and ``k8s.gateway``, as ``AppsV1Api`` names
    them. Both read the lists raw (``_preload_content=False``; ``k8s.watch`` streams with
    ``return_type="object"``), so no workload model is ever built."""

    def _list(self, kind: str, namespace: str | None, model: str, options: dict) -> Any:
        plural = _WORKLOADS[kind]
        if namespace is None:
            return self._call("GET", f"/apis/apps/v1/{plural}", {}, model, options, list_call=True)
        path = f"/apis/apps/v1/namespaces/{{namespace}}/{plural}"
        return self._call("GET", path, {"namespace": namespace}, model, options, list_call=True)

    def _patch(self, kind: str, name: str, namespace: str, body: Any, options: dict) -> Any:
        path = f"/apis/apps/v1/namespaces/{{namespace}}/{_WORKLOADS[kind]}/{{name}}"
        params = {"name": name, "namespace": namespace}
        return self._call("PATCH", path, params, "object", options, body=body)

    def list_namespaced_deployment(self, namespace: str, **options: Any) -> Any:
        return self._list("deployment", namespace, "V1DeploymentList", options)

    def list_namespaced_stateful_set(self, namespace: str, **options: Any) -> Any:
        return self._list("stateful_set", namespace, "V1StatefulSetList", options)

    def list_namespaced_daemon_set(self, namespace: str, **options: Any) -> Any:
        return self._list("daemon_set", namespace, "V1DaemonSetList", options)

    def list_deployment_for_all_namespaces(self, **options: Any) -> Any:
        return self._list("deployment", None, "V1DeploymentList", options)

    def list_stateful_set_for_all_namespaces(self, **options: Any) -> Any:
        return self._list("stateful_set", None, "V1StatefulSetList", options)

    def list_daemon_set_for_all_namespaces(self, **options: Any) -> Any:
        return self._list("daemon_set", None, "V1DaemonSetList", options)

    def patch_namespaced_deployment(
        self, name: str, namespace: str, body: Any, **options: Any
    ) -> Any:
        return self._patch("deployment", name, namespace, body, options)

    def patch_namespaced_stateful_set(
        self, name: str, namespace: str, body: Any, **options: Any
    ) -> Any:
        return self._patch("stateful_set", name, namespace, body, options)

    def patch_namespaced_daemon_set(
        self, name: str, namespace: str, body: Any, **options: Any
    ) -> Any:
        return self._patch("daemon_set", name, namespace, body, options)


class CustomObjects(_Calls):
    """The custom-object calls of ``k8s.gateway`` and the HikyoSecret/HikyoInstance watches, as
    ``CustomObjectsApi`` names them: answers are plain dicts (its "object" type), lists may be
    read raw (``_preload_content=False``) and streamed by ``kubernetes.watch``."""

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **options: Any
    ) -> Any:
        path = "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}"
        params = _params(group, version, plural, namespace=namespace, name=name)
        return self._call("GET", path, params, "object", options)

    def get_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, **options: Any
    ) -> Any:
        path = "/apis/{group}/{version}/{plural}/{name}"
        return self._call(
            "GET", path, _params(group, version, plural, name=name), "object", options
        )

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, **options: Any
    ) -> Any:
        path = "/apis/{group}/{version}/namespaces/{namespace}/{plural}"
        params = _params(group, version, plural, namespace=namespace)
        return self._call("GET", path, params, "object", options, list_call=True)

    def list_cluster_custom_object(
        self, group: str, version: str, plural: str, **options: Any
    ) -> Any:
        path = "/apis/{group}/{version}/{plural}"
        params = _params(group, version, plural)
        return self._call("GET", path, params, "object", options, list_call=True)

    def patch_namespaced_custom_object(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: Any,
        **options: Any,
    ) -> Any:
        path = "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}"
        params = _params(group, version, plural, namespace=namespace, name=name)
        return self._call(
            "PATCH", path, params, "object", options, body=body, patch_types=CUSTOM_PATCH_TYPES
        )

    def patch_namespaced_custom_object_status(
        self,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        name: str,
        body: Any,
        **options: Any,
    ) -> Any:
        path = "/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/status"
        params = _params(group, version, plural, namespace=namespace, name=name)
        return self._call(
            "PATCH", path, params, "object", options, body=body, patch_types=CUSTOM_PATCH_TYPES
        )


def _params(group: str, version: str, plural: str, **more: str) -> dict[str, str]:
    return {"group": group, "version": version, "plural": plural, **more}


class CoordinationV1(_Calls):
    """The Lease calls of ``k8s.leader`` and ``k8s.gateway``, as ``CoordinationV1Api`` names
    them (``V1Lease`` models back)."""

    def read_namespaced_lease(self, name: str, namespace: str, **options: Any) -> client.V1Lease:
        path = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        return self._call("GET", path, {"name": name, "namespace": namespace}, "V1Lease", options)

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: Any, **options: Any
    ) -> client.V1Lease:
        path = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        params = {"name": name, "namespace": namespace}
        return self._call("PUT", path, params, "V1Lease", options, body=body)

    def create_namespaced_lease(self, namespace: str, body: Any, **options: Any) -> client.V1Lease:
        path = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        return self._call("POST", path, {"namespace": namespace}, "V1Lease", options, body=body)


class AuthorizationV1(_Calls):
    """S4.15's access review, as ``AuthorizationV1Api`` names it."""

    def create_self_subject_access_review(self, body: Any, **options: Any) -> Any:
        path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        return self._call("POST", path, {}, "V1SelfSubjectAccessReview", options, body=body)


class ApiextensionsV1(_Calls):
    """S8.7's CRD read, as ``ApiextensionsV1Api`` names it (``k8s.served_crds`` reads it raw)."""

    def read_custom_resource_definition(self, name: str, **options: Any) -> Any:
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        return self._call("GET", path, {"name": name}, "V1CustomResourceDefinition", options)
