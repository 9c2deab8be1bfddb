"""The CRD manifests in k8s/crds/ (the source of truth) and installing them into a cluster."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

CRD_DIR = Path(__file__).resolve().parent / "crds"


def load_crd_manifests() -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text()) for path in sorted(CRD_DIR.glob("*.yaml"))]


def install_crds(api_client: client.ApiClient, timeout: float = 60.0) -> list[str]:
    """Creates or replaces our CRDs and waits until each is Established; returns their names."""
    api = client.ApiextensionsV1Api(api_client)
    names = []
    for manifest in load_crd_manifests():
        name = manifest["metadata"]["name"]
        try:
            current = api.read_custom_resource_definition(name)
        except ApiException as error:
            if error.status != 404:
                raise
            api.create_custom_resource_definition(manifest)
        else:
            manifest = {
                **manifest,
                "metadata": {
                    **manifest["metadata"],
                    "resourceVersion": current.metadata.resource_version,
                },
            }
            api.replace_custom_resource_definition(name, manifest)
        names.append(name)
    deadline = time.monotonic() + timeout
    for name in names:
        while not _established(api, name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f} s")
            time.sleep(0.1)
    return names


def _established(api: client.ApiextensionsV1Api, name: str) -> bool:
    conditions = api.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)
