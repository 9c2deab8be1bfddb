"""Small helpers over the official client for what it has no typed method for."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import yaml
from kubernetes import client

from .processes import free_port
from .waiting import wait_for


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


WRITE_VERBS = {"POST", "CREATE", "UPDATE", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}
WATCHED = {
    "secrets",
    "hikyosecrets",
    "hikyoinstances",
    "events",
    "deployments",
    "statefulsets",
    "daemonsets",
}


def request_totals(
    api_client, verbs: set[str], resources: set[str], *, by_subresource: bool = True
) -> dict[str, float]:
    """The apiserver's own apiserver_request_total, summed by "VERB resource[/subresource]"
    over ``verbs`` and ``resources``."""
    text = get_raw(api_client, "/metrics", accept="text/plain").decode()
    totals: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels.get("verb") in verbs and labels.get("resource") in resources:
            key = f"{labels['verb']} {labels['resource']}"
            if by_subresource:
                key += f"/{labels.get('subresource', '')}"
            totals[key] += float(line.rsplit(" ", 1)[1])
    return dict(totals)


def write_counters(api_client) -> dict[str, float]:
    """Every write verb on what the operator could write, by (verb, resource, subresource):
    the status subresource of hikyosecrets included."""
    return request_totals(api_client, WRITE_VERBS, WATCHED)


def settle(api_client, own: str) -> None:
    """Earlier tests' namespaces finish deleting first: the namespace controller and the
    garbage collector write (delete) while they go, and the counters have no client label."""
    core = client.CoreV1Api(api_client)

    def quiet() -> bool:
        return not [
            n.metadata.name
            for n in core.list_namespace().items
            if n.status.phase == "Terminating" and n.metadata.name != own
        ]

    wait_for(quiet, timeout=180, interval=0.5, what="earlier test namespaces deleted")
