"""Small helpers over the official client for what it has no typed method for."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client

from .processes import free_port


def get_raw(api_client: client.ApiClient, path: str, accept: str = "application/json") -> bytes:
    """GET an arbitrary API path (Table API, /openid/v1/jwks, /metrics) and return the body."""
    method, url, headers, *_ = api_client.param_serialize(
        "GET", path, header_params={"Accept": accept}, auth_settings=["BearerToken"]
    )
    response = api_client.call_api(method, url, header_params=headers)
    response.read()
    if not 200 <= response.status < 300:
        raise AssertionError(f"GET {path}: HTTP {response.status}")
    return response.data


def unreachable_kubeconfig(kubeconfig: Path, tmp_path: Path) -> Path:
    """The same credentials, pointed at a loopback port nobody listens on."""
    config = yaml.safe_load(kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    path = tmp_path / "unreachable.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


UNREACHED_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def unreached_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig a process loads at its start (a worker stops without one) for a test that
    never lets it reach a cluster."""
    path = tmp_path / "unreached.kubeconfig"
    path.write_text(UNREACHED_KUBECONFIG)
    return path

