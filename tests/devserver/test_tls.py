"""Transport: the devserver's PKI, TLS floor, and robustness against stuck clients (S3.2)."""

from __future__ import annotations

import base64
import socket
import ssl
import threading

import pytest
import requests
from cryptography import x509

from devserver import DevServer, Fault, pki
from tests.devserver.helpers import fetch, still_open
from tests.support.waiting import wait_for


def _server_certificate(server: DevServer, host: str = "127.0.0.1") -> x509.Certificate:
    context = ssl.create_default_context(cafile=str(server.ca_path))
    port = int(server.url.rsplit(":", 1)[1])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_ca_bundle_is_the_base64_of_the_ca_pem(devserver):
    assert base64.b64decode(devserver.ca_bundle_b64) == devserver.ca_pem
    assert devserver.ca_path.read_bytes() == devserver.ca_pem
    assert "\n" not in devserver.ca_bundle_b64


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_serving_certificate_verifies_for_loopback_names(devserver, host):
    certificate = _server_certificate(devserver, host)

    san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)


def test_second_origin_uses_the_same_ca(devserver):
    port = int(devserver.second_origin_url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(devserver.ca_path))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_serving_context_floor_is_tls_1_2(tmp_path):
    context = pki.server_context(pki.generate(), tmp_path)

    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert list(tmp_path.iterdir()) == []  # key material is not left on disk


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls_1_2_and_1_3_clients_connect(devserver, version):
    context = ssl.create_default_context(cafile=str(devserver.ca_path))
    context.minimum_version = context.maximum_version = version
    port = int(devserver.url.rsplit(":", 1)[1])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() == version.name.replace("v1_", "v1.")


def test_other_trust_roots_do_not_verify_the_server(devserver):
    with DevServer() as other, requests.Session() as session:
        session.trust_env = False
        session.verify = str(other.ca_path)
        with pytest.raises(requests.exceptions.SSLError):
            session.get(devserver.url + "/api/v1/meta", timeout=5)


def test_a_client_stuck_before_the_handshake_blocks_nobody(devserver, http, published):
    port = int(devserver.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stuck:
        response = fetch(http, devserver, published)
        # Answered while the stuck handshake is still pending: a server that served the
        # two in turn would have dropped it at its handshake timeout (10 s) first.
        assert still_open(stuck)

    assert response.status_code == 200


def test_a_client_stuck_mid_request_blocks_nobody(devserver, http, published):
    port = int(devserver.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(devserver.ca_path))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /api/v1/orgs/")  # never finishes its request line
        assert fetch(http, devserver, published).status_code == 200


def test_plain_http_to_the_tls_port_does_not_break_the_server(devserver, http, published):
    with requests.Session() as plain, pytest.raises(requests.ConnectionError):
        plain.get(devserver.url.replace("https://", "http://") + "/", timeout=5)

    assert fetch(http, devserver, published).status_code == 200


def test_stop_is_idempotent_and_context_manager_restarts_nothing():
    server = DevServer()
    with server:
        url = server.url
    server.stop()

    assert url.startswith("https://127.0.0.1:")
    with pytest.raises(RuntimeError):
        _ = server.url


def test_addresses_need_a_started_server():
    server = DevServer()
    for attribute in ("url", "second_origin_url", "ca_pem", "ca_bundle_b64", "ca_path"):
        with pytest.raises(RuntimeError):
            getattr(server, attribute)


def _request_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if "process_request_thread" in t.name}


def test_stop_releases_a_request_held_by_a_slow_fault(devserver, http, published):
    devserver.set_fault(None, Fault.slow(600))
    before = _request_threads()
    held: list[BaseException | requests.Response] = []

    def slow_client() -> None:
        try:
            held.append(fetch(http, devserver, published))
        except requests.RequestException as error:
            held.append(error)

    client_thread = threading.Thread(target=slow_client, daemon=True)
    client_thread.start()
    wait_for(lambda: devserver.requests, what="the slow request to reach the server")
    handlers = _request_threads() - before
    assert handlers and not held  # the server holds the request

    devserver.stop()

    # The held handler ends and the client gets its answer (or the close): a stop that left
    # the request waiting out the 600 s fault fails these deadlines instead.
    for thread in (*handlers, client_thread):
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert not isinstance(held[0], requests.Timeout)
