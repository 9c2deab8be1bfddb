"""Builders shared by the devserver tests."""

from __future__ import annotations

import http.client
import select
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests

from devserver import DevServer

CONFIG_VALUE = "canary-config-4f1c"
SECRET_VALUE = "canary-secret-9b7e"
TOKEN = "hik_test_token_7d2a"


@dataclass(frozen=True)
class Scope:
    org: str
    project: str
    environment: str

    def args(self) -> tuple[str, str, str]:
        return (self.org, self.project, self.environment)


def client(server: DevServer) -> requests.Session:
    """A session like the operator's: only the devserver CA, no ambient config (S3.2).

    ``trust_env`` must be off: with it, requests lets ``REQUESTS_CA_BUNDLE`` override a
    session's ``verify``.
    """
    session = requests.Session()
    session.verify = str(server.ca_path)
    session.trust_env = False
    return session


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def fetch(
    http: requests.Session,
    server: DevServer,
    scope: Scope,
    token: str | None = TOKEN,
    **params: str,
) -> requests.Response:
    """GET the delivery like the operator does (no redirects followed, S3.2)."""
    headers = auth(token) if token is not None else {}
    return http.get(
        server.delivery_url(*scope.args()),
        params=params,
        headers=headers,
        allow_redirects=False,
        timeout=10,
    )


def still_open(sock: socket.socket) -> bool:
    """No answer and no close from the server yet: the connection is still held open.

    A TLS socket can be readable with no application data (TLS 1.3 session tickets), so it
    is asked for one byte without blocking; any byte read means an answer had arrived.
    """
    if not isinstance(sock, ssl.SSLSocket):
        readable, _, _ = select.select([sock], [], [], 0)
        return not readable
    sock.setblocking(False)
    try:
        sock.recv(1)
    except ssl.SSLWantReadError:
        return True
    finally:
        sock.setblocking(True)
    return False


def start_fetch(server: DevServer, scope: Scope, token: str = TOKEN) -> http.client.HTTPSConnection:
    """Sends a delivery GET without reading the answer; ``getresponse()`` reads it later."""
    url = urlsplit(server.delivery_url(*scope.args()))
    context = ssl.create_default_context(cafile=str(server.ca_path))
    connection = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=30)
    connection.request("GET", url.path, headers=auth(token))
    return connection


def report_body(**overrides: object) -> dict[str, object]:
    """A valid DeliveryStatusReport (S7.3), with overrides."""
    body: dict[str, object] = {
        "cluster_id": "5f0c7a1e-0d7b-4c39-9a55-2f1b6b0f6a10",
        "namespace": "payments",
        "name": "payments-config",
        "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
        "target": "payments-env",
        "generation": 4,
        "observed_generation": 4,
        "lifecycle": "Synced",
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Reconciled"},
            {"type": "Synced", "status": "True", "reason": "Current"},
        ],
    }
    body.update(overrides)
    return body


def keys_by_name(response: requests.Response) -> dict[str, dict[str, object]]:
    return {key["name"]: key for key in response.json()["keys"]}
