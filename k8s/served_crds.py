"""S8.7: reading the CRDs the apiserver serves, as plain JSON for ``workers.engine.crd_check``.

The raw body is kept (``_preload_content=False``): the typed model would rename the
``x-kubernetes-*`` keys the check reads, and it only needs a few fields of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .gateway import translate
from .slim_api import ApiextensionsV1

CRD_GROUP = "apiextensions.k8s.io"


def read_crd(api_client: client.ApiClient, name: str) -> dict[str, Any] | None:
    """An uncached GET of one CRD; None when it does not exist, else our error tree."""
    api = ApiextensionsV1(api_client)  # not client.ApiextensionsV1Api: see k8s.slim_api
    try:
        response = api.read_custom_resource_definition(name, _preload_content=False)
    except ApiException as error:
        if error.status == 404:
            return None
        raise translate(
            error,
            f"get customresourcedefinitions {name}",
            verb="get",
            group=CRD_GROUP,
            resource="customresourcedefinitions",
        ) from None
    return json.loads(response.data)


def read_crds(api_client: client.ApiClient, names: Iterable[str]) -> dict[str, Any]:
    """Each named CRD (or None when absent), by name; the RBAC grant is ``get`` by name."""
    return {name: read_crd(api_client, name) for name in names}
