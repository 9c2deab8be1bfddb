"""S3.1-S3.6 and S7.3: the Hikyo client against a real loopback HTTPS server.

The server is stdlib ``http.server`` behind ``ssl``, with certificates minted here by
``cryptography``; each test starts its own in a thread. No network beyond 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import json
import logging
import socket
import ssl
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hikyo.client import DEFAULT_USER_AGENT, HikyoClient
from workers.engine.errors import HikyoClientError, InvalidBaseUrl, InvalidTrust
from workers.engine.fetched import FetchOutcome as Outcome
from workers.engine.fetched import FetchResult, ReportResult, Scope

SCOPE = Scope(
    org="org_01900000-0000-7000-8000-000000000001",
    project="proj_01900000-0000-7000-8000-000000000002",
    environment="env_01900000-0000-7000-8000-000000000003",
)
CANARY_TOKEN = "hik_canarytoken0d1e"
CANARY_CURSOR = "canary-cursor-5be1"
CANARY_VALUE = "canary-value-77aa"
DELIVERY_PATH = (
    f"/api/v1/orgs/{SCOPE.org}/projects/{SCOPE.project}/environments/{SCOPE.environment}/delivery"
)


# --- PKI -------------------------------------------------------------------------------


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


@dataclass(frozen=True)
class Authority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def bundle(self) -> str:
        """``caBundle`` form: base64 of PEM, with line breaks (S3.2 ignores them)."""
        return base64.encodebytes(self.pem).decode()


def make_authority(common_name: str) -> Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return Authority(key, cert)


def issue_server_files(ca: Authority, names: list[str], directory: Path) -> tuple[Path, Path]:
    """A serving certificate for ``names`` (DNS names or IPs), written as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), False
        )
        .sign(ca.key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@dataclass(frozen=True)
class Pki:
    trusted: Authority
    other: Authority
    good: tuple[Path, Path]  # trusted CA, SAN 127.0.0.1 + localhost
    foreign: tuple[Path, Path]  # other CA, same names
    misnamed: tuple[Path, Path]  # trusted CA, SAN other.test only


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    base = tmp_path_factory.mktemp("pki")
    trusted, other = make_authority("trusted test CA"), make_authority("other test CA")
    return Pki(
        trusted=trusted,
        other=other,
        good=issue_server_files(trusted, ["127.0.0.1", "localhost"], base / "good"),
        foreign=issue_server_files(other, ["127.0.0.1", "localhost"], base / "foreign"),
        misnamed=issue_server_files(trusted, ["other.test"], base / "misnamed"),
    )


# --- the loopback HTTPS server ---------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    method: str
    target: str  # the raw request-target: path and query as sent
    headers: Message
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query, keep_blank_values=True)


App = Callable[[BaseHTTPRequestHandler], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection; bodies may end at close
    server: _TLSServer

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append(Seen(self.command, self.path, self.headers, body))
        # The client may stop reading: expected in the cap and deadline tests.
        with suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.server.app(self)

    def log_message(self, *args: Any) -> None:
        pass


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, cert_files: tuple[Path, Path]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(*cert_files)
        self.seen: list[Seen] = []
        self.app: App = reply(200, b"{}")
        self.stop = threading.Event()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}"

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Handshake in the worker thread, so a client that refuses us blocks nothing.
        request.settimeout(5)
        try:
            tls = self.tls.wrap_socket(request, server_side=True)
        except OSError:
            return  # e.g. the client rejected our certificate
        try:
            super().finish_request(tls, client_address)
        except OSError:
            pass
        finally:
            tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@contextmanager
def serve(cert_files: tuple[Path, Path]) -> Iterator[_TLSServer]:
    server = _TLSServer(cert_files)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()  # releases handlers that wait on purpose
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def server(pki: Pki) -> Iterator[_TLSServer]:
    with serve(pki.good) as running:
        yield running


@pytest.fixture
def client(server: _TLSServer, pki: Pki) -> Iterator[HikyoClient]:
    with HikyoClient(server.url, pki.trusted.bundle) as hikyo:
        yield hikyo


def reply(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> App:
    def app(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        if "Content-Length" not in (headers or {}):
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return app


def json_reply(status: int, doc: Any, headers: dict[str, str] | None = None) -> App:
    return reply(
        status, json.dumps(doc).encode(), {"Content-Type": "application/json", **(headers or {})}
    )


def delivery_doc(**overrides: Any) -> dict[str, Any]:
    doc = {
        "credential_id": "cred_x",
        "current": False,
        "cursor": "next-cursor",
        "change_token": "v1:x",
        "schema_revision": 1,
        "pin_expired": False,
        "keys": [
            {"name": "A", "classification": "config", "presence": "set", "value": CANARY_VALUE}
        ],
        "issued_at": "2026-05-01T10:00:00Z",
        "snapshot_expires_at": "2026-05-01T11:00:00Z",
        "capabilities": ["status-report"],
    }
    doc.update(overrides)
    return doc


def fetch(hikyo: HikyoClient, *, cursor: str | None = None, **kwargs: Any) -> FetchResult:
    kwargs.setdefault("token", CANARY_TOKEN)
    kwargs.setdefault("projection", "full")
    return hikyo.fetch(SCOPE, cursor=cursor, **kwargs)


NOT_FOUND = {"error": {"code": "not_found", "message": "not found"}}
CONFLICT = {"error": {"code": "conflict", "message": "conflict"}}


# --- S3.1 base URL ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("http://hikyo.test", id="http"),
        pytest.param("ftp://hikyo.test", id="other-scheme"),
        pytest.param("hikyo.test", id="no-scheme"),
        pytest.param("", id="empty"),
        pytest.param("https://", id="no-host"),
        pytest.param("https:///path", id="empty-host"),
        pytest.param("https://user:canary-pass@hikyo.test", id="userinfo"),
        pytest.param("https://@hikyo.test", id="empty-userinfo"),
        pytest.param("https://hikyo.test/?", id="empty-query"),
        pytest.param("https://hikyo.test/?a=canary-pass", id="query"),
        pytest.param("https://hikyo.test/#frag", id="fragment"),
        pytest.param("https://hikyo.test:99999", id="port-out-of-range"),
        pytest.param("https://hikyo.test:port", id="port-not-numeric"),
        pytest.param("https://hikyo.test/a b", id="space"),
        pytest.param("https://hikyo.test/\n", id="newline"),
        pytest.param("https://hikyo.test\\@evil.test", id="backslash"),
    ],
)
def test_base_url_rules_refuse_before_any_request(url):
    """S3.1: https, a host, no userinfo, query or fragment; messages never echo the URL."""
    with pytest.raises(InvalidBaseUrl) as caught:
        HikyoClient(url)
    assert isinstance(caught.value, HikyoClientError)
    assert "canary-pass" not in str(caught.value)
    assert "hikyo.test" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "prefix"),
    [
        pytest.param("https://hikyo.test", "https://hikyo.test", id="bare"),
        pytest.param("https://hikyo.test/", "https://hikyo.test", id="trailing-slash"),
        pytest.param("HTTPS://hikyo.test:8443/base/", "https://hikyo.test:8443/base", id="prefix"),
        pytest.param("https://hikyo.test/base//", "https://hikyo.test/base/", id="one-slash-only"),
        pytest.param("https://[::1]:8443", "https://[::1]:8443", id="ipv6"),
    ],
)
def test_base_url_path_is_a_prefix(url, prefix):
    """S3.1: a path acts as a prefix; exactly one trailing / is trimmed."""
    seen: list[str] = []

    class Capture(requests.adapters.BaseAdapter):
        def send(self, request, **kwargs):
            seen.append(request.url)
            raise requests.exceptions.ConnectionError("captured")

        def close(self):
            pass

    session = requests.Session()
    session.mount("https://", Capture())
    with HikyoClient(url, session=session) as hikyo:
        assert fetch(hikyo).outcome is Outcome.FAILED
    assert seen == [f"{prefix}{DELIVERY_PATH}?projection=full"]


# --- S3.2 trust ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bundle",
    [
        pytest.param("", id="empty"),
        pytest.param("not base64!", id="not-base64"),
        pytest.param("QUJD=", id="bad-padding"),
        pytest.param("-_-_", id="urlsafe-alphabet"),
        pytest.param("QUJD RA==", id="inner-space"),
        pytest.param(base64.b64encode(b"hello").decode(), id="not-pem"),
        pytest.param(
            base64.b64encode(
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
            ).decode(),
            id="garbage-certificate",
        ),
        pytest.param(
            base64.b64encode(
                b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
            ).decode(),
            id="key-not-certificate",
        ),
        pytest.param("ü", id="non-ascii"),
    ],
)
def test_bad_ca_bundle_refuses_without_fallback(bundle):
    """S3.2: bad base64 or no parsable PEM certificate => no request, never system roots."""
    with pytest.raises(InvalidTrust) as caught:
        HikyoClient("https://hikyo.test", bundle)
    assert isinstance(caught.value, HikyoClientError)
    assert caught.value.__context__ is None  # the bad input is not carried along


@pytest.mark.parametrize("served", ["good", "foreign"])
def test_bundle_with_line_breaks_and_extra_blocks_is_accepted(pki, served):
    """S3.2: line breaks ignored; unparsable blocks skipped when one certificate parses; every
    certificate that parses is trusted (the servers are signed by the second and third)."""
    junk = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    bundle = base64.encodebytes(junk + pki.trusted.pem + pki.other.pem).decode()
    bundle = bundle.replace("\n", "\r\n")
    with serve(getattr(pki, served)) as running, HikyoClient(running.url, bundle) as hikyo:
        running.app = json_reply(200, delivery_doc())
        result = fetch(hikyo)
    assert result.outcome is Outcome.DELIVERY, result.detail


def test_trusts_a_server_signed_by_the_bundle(client, server):
    server.app = json_reply(200, delivery_doc())
    result = fetch(client)
    assert result.outcome is Outcome.DELIVERY, result.detail
    assert result.delivery.capabilities == frozenset({"status-report"})


@pytest.mark.parametrize(
    ("served", "bundle"),
    [
        pytest.param("foreign", "trusted", id="other-ca"),
        pytest.param("misnamed", "trusted", id="hostname-mismatch"),
        pytest.param("good", "other", id="bundle-of-another-ca"),
        pytest.param("good", None, id="system-roots-lack-test-ca"),
    ],
)
def test_tls_verification_failures(pki, served, bundle):
    """S3.2: chain and hostname always verified; with a bundle only its CAs are trusted."""
    ca_bundle = None if bundle is None else getattr(pki, bundle).bundle
    with serve(getattr(pki, served)) as running, HikyoClient(running.url, ca_bundle) as hikyo:
        result = fetch(hikyo, cursor=CANARY_CURSOR)
        assert result == FetchResult(Outcome.FAILED, None, detail="TLS verification failed")
        assert running.seen == []


def test_system_roots_never_added_to_a_bundle(pki, monkeypatch):
    """S3.2: with a bundle, environment CA settings add nothing (no certifi, no env)."""
    ca_file = pki.good[0].parent / "other-ca.pem"
    ca_file.write_bytes(pki.other.pem)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.setenv(name, str(ca_file))
    with serve(pki.foreign) as running, HikyoClient(running.url, pki.trusted.bundle) as hikyo:
        assert fetch(hikyo).detail == "TLS verification failed"


def _tls_1_1_only(context: ssl.SSLContext) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # that is the point
        context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        context.maximum_version = ssl.TLSVersion.TLSv1_1


def test_tls_below_1_2_is_refused(pki):
    """S3.2: TLS >= 1.2."""
    with serve(pki.good) as running:
        _tls_1_1_only(running.tls)
        with HikyoClient(running.url, pki.trusted.bundle) as hikyo:
            result = fetch(hikyo)
    assert result.outcome is Outcome.FAILED
    assert result.detail in ("TLS handshake failed", "connection broken")
    assert running.seen == []


@contextmanager
def plain_http_listener() -> Iterator[str]:
    """An https:// URL whose port answers in plain HTTP (a common misconfiguration)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def run() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_plain_http_peer_fails_the_handshake(pki):
    with plain_http_listener() as url, HikyoClient(url, pki.trusted.bundle) as hikyo:
        assert fetch(hikyo) == FetchResult(Outcome.FAILED, None, detail="TLS handshake failed")


# --- S3.2 redirects, ambient config, cookies --------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_refused_and_not_followed(pki, client, server, status):
    """S3.2: any 3xx fails; the bearer never reaches the Location host."""
    with serve(pki.good) as elsewhere:
        server.app = reply(status, headers={"Location": f"{elsewhere.url}/steal"})
        result = fetch(client, cursor=CANARY_CURSOR)
        assert result == FetchResult(
            Outcome.FAILED, status, detail=f"redirect refused (status {status})"
        )
        assert elsewhere.seen == []
    assert len(server.seen) == 1


def test_proxy_and_netrc_environment_ignored(client, server, monkeypatch, tmp_path):
    """S3.2: HTTP(S)_PROXY and .netrc are not consulted (trust_env off)."""
    dead = "http://127.0.0.1:9"
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login intruder password canary-netrc\n")
    monkeypatch.setenv("NETRC", str(netrc))
    server.app = json_reply(200, delivery_doc())
    assert fetch(client).outcome is Outcome.DELIVERY
    assert server.seen[0].headers["Authorization"] == f"Bearer {CANARY_TOKEN}"


def test_cookies_never_stored_or_sent(client, server):
    """S3.2: a Set-Cookie is dropped; the next request carries no Cookie."""
    server.app = json_reply(200, delivery_doc(), {"Set-Cookie": "sid=canary; Path=/"})
    fetch(client)
    fetch(client)
    assert [seen.headers.get("Cookie") for seen in server.seen] == [None, None]


def test_supplied_session_is_hardened(server, pki):
    """S3.2: a passed-in session loses proxies, env trust and stored cookies."""
    session = requests.Session()
    session.proxies = {"https": "http://127.0.0.1:9"}
    session.cookies.set("sid", "canary")
    HikyoClient(server.url, pki.trusted.bundle, session=session)
    assert session.trust_env is False
    assert session.proxies == {}
    assert len(session.cookies) == 0


# --- S3.2 timeouts and body cap ---------------------------------------------------------


def _drip(prefix: bytes, filler: bytes, interval: float) -> App:
    """Write ``prefix`` then one byte of ``filler`` per ``interval``: each read is quick,
    the sum is not (only a whole-request deadline stops it)."""

    def app(handler: BaseHTTPRequestHandler) -> None:
        handler.wfile.write(prefix)
        handler.wfile.flush()
        for byte in filler:
            if handler.server.stop.wait(interval):
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()

    return app


def _stall(handler: BaseHTTPRequestHandler) -> None:
    handler.server.stop.wait(10)


@pytest.mark.parametrize(
    "app",
    [
        pytest.param(_stall, id="no-answer"),
        pytest.param(
            _drip(b"HTTP/1.0 200 OK\r\nX-Slow: ", b"a" * 200, 0.05), id="dripping-headers"
        ),
        pytest.param(
            _drip(b"HTTP/1.0 200 OK\r\nContent-Length: 200\r\n\r\n", b"{" * 200, 0.05),
            id="dripping-body",
        ),
        pytest.param(
            _drip(b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n", b"{" * 200, 0.05),
            id="dripping-body-keep-alive",
        ),
    ],
)
def test_whole_request_deadline(server, pki, app):
    """S3.2: the whole request is bounded, not only each socket read: the dripping peers
    answer every read within 0.05 s, so only the 0.5 s whole-request deadline yields a
    timeout (without it they finish after 10 s with a body that is not JSON)."""
    server.app = app
    with HikyoClient(server.url, pki.trusted.bundle, timeout=0.5) as hikyo:
        result = fetch(hikyo, cursor=CANARY_CURSOR)
    assert result.outcome is Outcome.FAILED
    assert result.detail == "timeout"


def test_request_deadlines_share_one_watchdog_thread_and_a_finished_one_never_fires():
    """The S3.2 deadlines of many requests are kept by one thread, not one per request; a
    request that finished before its deadline is never cut off afterwards."""
    from hikyo.transport import _Deadline

    with contextlib.ExitStack() as open_requests:
        deadlines = [open_requests.enter_context(_Deadline(30.0)) for _ in range(20)]
        watchers = [t for t in threading.enumerate() if t.name == "hikyo-deadlines"]
        assert len(watchers) == 1
    assert all(d.finished and not d.fired for d in deadlines)
    finished = deadlines[0]
    finished.fire()  # what the watchdog does at expiry
    assert not finished.fired and not finished.expired()
    with _Deadline(30.0) as live:
        live.fire()
        assert live.fired and live.expired()


def test_the_watchdog_is_woken_only_by_a_deadline_earlier_than_those_it_waits_for():
    """Issue 37: the watchdog thread sleeps until its earliest deadline, so a request whose
    deadline is later (nearly all: each is 30 s on) does not wake it; an earlier one does, and
    still fires on time."""
    from hikyo.transport import _Deadline, _Watchdog
    from tests.support.waiting import wait_for

    wakes: list[int] = []

    class CountingCondition(threading.Condition):
        def notify(self, n: int = 1) -> None:
            wakes.append(n)
            super().notify(n)

    watchdog = _Watchdog()
    watchdog._changed = CountingCondition()
    watchdog.watch(_Deadline(30.0))
    assert len(wakes) == 1  # the first: the thread waited for none
    watchdog.watch(_Deadline(60.0))
    assert len(wakes) == 1
    early = _Deadline(0.2)
    watchdog.watch(early)
    assert len(wakes) == 2
    assert wait_for(lambda: early.fired, timeout=5, what="the earlier deadline fired")


def test_the_watchdog_shuts_an_expired_requests_socket_down():
    """S3.2: at the deadline the watchdog shuts down the socket the request reads from, which
    wakes a read blocked on it (a peer that sends nothing more)."""
    from hikyo.transport import _Deadline
    from tests.support.waiting import wait_for

    ours, peer = socket.socketpair()
    with ours, peer:

        class Connection:
            sock = ours

        with _Deadline(0.2) as deadline:
            deadline.attach(Connection())
            ours.settimeout(10.0)
            assert ours.recv(1) == b""  # woken by the shutdown, well before the 10 s timeout
            assert wait_for(lambda: deadline.fired, timeout=5, what="the deadline fired")


def test_handshake_timeout(pki):
    """S3.2: a peer that accepts TCP but never speaks TLS is cut off by the handshake bound."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with HikyoClient(
            f"https://127.0.0.1:{port}", pki.trusted.bundle, handshake_timeout=0.3
        ) as hikyo:
            result = fetch(hikyo)
    assert result.outcome is Outcome.FAILED
    assert "timeout" in result.detail


def test_connection_refused(pki):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    with HikyoClient(f"https://127.0.0.1:{port}", pki.trusted.bundle) as hikyo:
        assert fetch(hikyo) == FetchResult(Outcome.FAILED, None, detail="connection failed")


def _big_body(size: int, *, declared: bool) -> App:
    def app(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        if declared:
            handler.send_header("Content-Length", str(size))
        handler.end_headers()
        # A valid JSON object padded with spaces: only the size makes it fail.
        head = json.dumps(delivery_doc()).encode()
        handler.wfile.write(head)
        remaining = size - len(head)
        block = b" " * 65536
        while remaining > 0:
            handler.wfile.write(block[: min(len(block), remaining)])
            remaining -= len(block)

    return app


@pytest.mark.parametrize(
    ("size", "declared", "outcome"),
    [
        pytest.param(8 * 1024 * 1024, False, Outcome.DELIVERY, id="exactly-8-mib"),
        pytest.param(8 * 1024 * 1024 + 1, False, Outcome.FAILED, id="one-byte-over-streamed"),
        pytest.param(8 * 1024 * 1024 + 1, True, Outcome.FAILED, id="one-byte-over-declared"),
        pytest.param(64 * 1024 * 1024, False, Outcome.FAILED, id="far-over-streamed"),
    ],
)
def test_body_cap(client, server, size, declared, outcome):
    """S3.2: at most 8 MiB; larger fails and no truncated prefix is parsed."""
    server.app = _big_body(size, declared=declared)
    result = fetch(client)
    assert result.outcome is outcome, result.detail
    if outcome is Outcome.FAILED:
        assert result == FetchResult(Outcome.FAILED, 200, detail="response exceeds 8 MiB")


def test_truncated_body_is_never_parsed(client, server):
    """S3.2: a body cut short of its Content-Length fails; the prefix is not decoded."""
    body = json.dumps(delivery_doc()).encode()
    server.app = reply(200, body, {"Content-Length": str(len(body) + 100)})
    assert fetch(client) == FetchResult(Outcome.FAILED, 200, detail="connection broken")


def test_compressed_body_is_not_inflated(client, server):
    """Accept-Encoding identity: a gzip answer is parsed as sent (and is invalid)."""
    import gzip

    body = gzip.compress(json.dumps(delivery_doc()).encode())
    server.app = reply(200, body, {"Content-Encoding": "gzip"})
    result = fetch(client)
    assert result.outcome is Outcome.FAILED
    assert result.detail.startswith("invalid response: S3.4.1")
    assert server.seen[0].headers["Accept-Encoding"] == "identity"


# --- S3.3 request -----------------------------------------------------------------------


def test_request_shape(client, server):
    """S3.3: path, query and headers."""
    server.app = json_reply(200, delivery_doc())
    fetch(client, cursor="c+/=&% ü", projection="config-only", acknowledged_keys=["LD_X", "PATH"])
    (seen,) = server.seen
    assert seen.method == "GET"
    assert seen.path == DELIVERY_PATH
    assert seen.query == {
        "projection": ["config-only"],
        "cursor": ["c+/=&% ü"],
        "acknowledged_keys": ["LD_X,PATH"],
    }
    assert "cursor=c%2B%2F%3D%26%25%20%C3%BC" in seen.target  # '+' must not become a space
    assert seen.headers["Authorization"] == f"Bearer {CANARY_TOKEN}"
    assert seen.headers["Accept"] == "application/json"
    assert seen.headers["User-Agent"] == DEFAULT_USER_AGENT
    assert DEFAULT_USER_AGENT.startswith("hikyo-operator/")
    assert seen.body == b""


@pytest.mark.parametrize(
    ("kwargs", "query"),
    [
        pytest.param({}, {"projection": ["full"]}, id="minimal"),
        pytest.param({"cursor": ""}, {"projection": ["full"]}, id="empty-cursor-not-sent"),
        pytest.param({"acknowledged_keys": []}, {"projection": ["full"]}, id="empty-acks-omitted"),
        pytest.param(
            {"acknowledged_keys": ("PATH",)},
            {"projection": ["full"], "acknowledged_keys": ["PATH"]},
            id="one-ack",
        ),
    ],
)
def test_optional_query_members(client, server, kwargs, query):
    """S3.3: cursor only when given; acknowledged_keys only when non-empty."""
    server.app = json_reply(200, delivery_doc())
    fetch(client, **kwargs)
    assert server.seen[0].query == query


def test_ids_are_percent_encoded_path_segments(client, server):
    """S3.3: an ID can never add a path segment."""
    server.app = json_reply(404, NOT_FOUND)
    client.fetch(Scope("o/../x", "p q", "e?f#g"), token="t", projection="full", cursor=None)
    assert server.seen[0].target.startswith(
        "/api/v1/orgs/o%2F..%2Fx/projects/p%20q/environments/e%3Ff%23g/delivery?"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"token": ""}, "token", id="empty-token"),
        pytest.param({"token": None}, "token", id="no-token"),
        pytest.param({"token": "tok en"}, "visible ASCII", id="token-space"),
        pytest.param({"token": "tok\r\nX-Evil: 1"}, "visible ASCII", id="token-crlf"),
        pytest.param({"projection": "secret-only"}, "projection", id="bad-projection"),
        pytest.param({"acknowledged_keys": ["A,B"]}, "comma", id="comma-in-ack"),
        pytest.param({"acknowledged_keys": [""]}, "non-empty", id="empty-ack"),
        pytest.param({"acknowledged_keys": "PATH"}, "sequence", id="ack-string"),
    ],
)
def test_programming_errors_raise_before_any_request(client, server, kwargs, message):
    """S3.3: no credential => no request; bad arguments never reach the wire."""
    with pytest.raises(ValueError, match=message) as caught:
        fetch(client, **kwargs)
    assert "tok" not in str(caught.value).replace("token", "")
    assert server.seen == []


@pytest.mark.parametrize("org", ["", ".", ".."])
def test_dot_and_empty_ids_raise(client, server, org):
    with pytest.raises(ValueError):
        client.fetch(Scope(org, "p", "e"), token="t", projection="full", cursor=None)
    assert server.seen == []


# --- S3.5 outcome mapping ---------------------------------------------------------------

OUTCOMES = [
    pytest.param(
        json_reply(200, delivery_doc(current=True, keys=[])),
        CANARY_CURSOR,
        FetchResult(Outcome.DELIVERY, 200),
        id="200-current-with-cursor",
    ),
    pytest.param(
        json_reply(200, delivery_doc(current=True, keys=[])),
        None,
        FetchResult(Outcome.FAILED, 200, detail="server answered current to a cursor-less request"),
        id="200-current-without-cursor",
    ),
    pytest.param(
        json_reply(200, delivery_doc(keys=None)),
        None,
        FetchResult(
            Outcome.FAILED, 200, detail="invalid response: S3.4.2: keys missing or not an array"
        ),
        id="200-invalid",
    ),
    pytest.param(
        reply(200, b"<html>" + CANARY_VALUE.encode()),
        None,
        FetchResult(
            Outcome.FAILED, 200, detail="invalid response: S3.4.1: body is not well-formed JSON"
        ),
        id="200-html",
    ),
    pytest.param(
        json_reply(404, NOT_FOUND),
        None,
        FetchResult(Outcome.AUTHORITATIVE_NOT_FOUND, 404, detail="not found"),
        id="404-authoritative",
    ),
    pytest.param(
        reply(404, json.dumps(NOT_FOUND).encode(), {"Content-Type": "text/plain"}),
        None,
        FetchResult(Outcome.AUTHORITATIVE_NOT_FOUND, 404, detail="not found"),
        id="404-content-type-ignored",
    ),
    pytest.param(
        reply(404, b"<html>nginx 404</html>"),
        None,
        FetchResult(Outcome.FAILED, 404, detail="status 404 (not an authoritative body)"),
        id="404-proxy-page",
    ),
    pytest.param(
        reply(404, json.dumps(NOT_FOUND).encode() + b" " * 64 * 1024),
        None,
        FetchResult(Outcome.FAILED, 404, detail="status 404 (not an authoritative body)"),
        id="404-over-64-kib",
    ),
    pytest.param(
        json_reply(409, CONFLICT),
        None,
        FetchResult(Outcome.NOT_MATERIALIZED, 409, detail="status 409 (conflict)"),
        id="409-conflict",
    ),
    pytest.param(
        json_reply(409, {"error": {"code": "bad_request"}}),
        None,
        FetchResult(Outcome.FAILED, 409, detail="status 409"),
        id="409-other",
    ),
    pytest.param(
        json_reply(401, {"error": {"code": "unauthenticated"}}),
        None,
        FetchResult(Outcome.FAILED, 401, detail="status 401 (credential rejected)"),
        id="401",
    ),
    pytest.param(
        json_reply(429, {}, {"Retry-After": "17"}),
        None,
        FetchResult(
            Outcome.RATE_LIMITED, 429, retry_after=17.0, detail="status 429 (rate limited)"
        ),
        id="429",
    ),
    pytest.param(
        json_reply(403, {"error": {"code": "forbidden"}}),
        None,
        FetchResult(Outcome.FAILED, 403, detail="status 403"),
        id="403",
    ),
    pytest.param(
        json_reply(400, {"error": {"code": "bad_request", "detail": CANARY_VALUE}}),
        None,
        FetchResult(Outcome.FAILED, 400, detail="status 400"),
        id="400",
    ),
    pytest.param(reply(500), None, FetchResult(Outcome.FAILED, 500, detail="status 500"), id="500"),
    pytest.param(reply(503), None, FetchResult(Outcome.FAILED, 503, detail="status 503"), id="503"),
    pytest.param(reply(204), None, FetchResult(Outcome.FAILED, 204, detail="status 204"), id="204"),
    pytest.param(
        reply(304),
        None,
        FetchResult(Outcome.FAILED, 304, detail="redirect refused (status 304)"),
        id="304",
    ),
    pytest.param(reply(418), None, FetchResult(Outcome.FAILED, 418, detail="status 418"), id="418"),
]


@pytest.mark.parametrize(("app", "cursor", "expected"), OUTCOMES)
def test_status_to_outcome(client, server, app, cursor, expected):
    """S3.5: status and body => outcome."""
    server.app = app
    result = fetch(client, cursor=cursor)
    if expected.outcome is Outcome.DELIVERY:
        assert (result.outcome, result.status, result.detail) == (Outcome.DELIVERY, 200, "")
        assert result.delivery.current
    else:
        assert result == expected


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        pytest.param(None, 1.0, id="absent"),
        pytest.param("0", 1.0, id="zero-clamped-up"),
        pytest.param("1", 1.0, id="one"),
        pytest.param("300", 300.0, id="five-minutes"),
        pytest.param("301", 300.0, id="clamped-down"),
        pytest.param("99999999999999999999999", 300.0, id="huge"),
        pytest.param("1.5", 1.0, id="fraction-unparsable"),
        pytest.param("-5", 1.0, id="negative-unparsable"),
        pytest.param("soon", 1.0, id="prose"),
        pytest.param("Wed, 21 Oct 2015 07:28:00 GMT", 1.0, id="date-in-past"),
        pytest.param("Fri, 01 Jan 2100 00:00:00 GMT", 300.0, id="date-far-ahead"),
    ],
)
def test_rate_limit_retry_after(client, server, header, seconds):
    """S4.1.6: clamp(Retry-After, 1 s, 5 min); absent or unparsable => 1 s."""
    server.app = json_reply(429, {}, {"Retry-After": header} if header is not None else {})
    result = fetch(client)
    assert result.outcome is Outcome.RATE_LIMITED
    assert result.retry_after == seconds


# --- S3.6 / S0.4 hygiene ----------------------------------------------------------------


def _closed_port_url() -> str:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return f"https://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize(
    "app",
    [
        pytest.param(
            reply(302, headers={"Location": f"https://x.test/?c={CANARY_CURSOR}"}), id="redirect"
        ),
        pytest.param(reply(500, CANARY_VALUE.encode()), id="500-with-body"),
        pytest.param(reply(200, f'{{"cursor": "{CANARY_CURSOR}"'.encode()), id="truncated-json"),
        pytest.param(json_reply(200, delivery_doc(current=True)), id="invalid-current-with-keys"),
        pytest.param(_big_body(9 * 1024 * 1024, declared=False), id="oversize"),
        pytest.param(reply(404, f"not found {CANARY_VALUE}".encode()), id="404-page"),
    ],
)
def test_failure_details_carry_no_query_token_or_body(client, server, app):
    """S3.6: failure text names the class only."""
    server.app = app
    result = fetch(client, cursor=CANARY_CURSOR, acknowledged_keys=["PATH"])
    assert result.outcome is Outcome.FAILED
    _assert_clean(result)


@pytest.mark.parametrize("case", ["tls", "refused", "timeout", "handshake-failure"])
def test_transport_failure_details_carry_no_url(pki, case):
    """S3.6: requests' exception text embeds the URL with the cursor; it is never shown."""
    if case == "refused":
        hikyo = HikyoClient(_closed_port_url(), pki.trusted.bundle)
        result = fetch(hikyo, cursor=CANARY_CURSOR)
    elif case == "handshake-failure":
        with plain_http_listener() as url:
            hikyo = HikyoClient(url, pki.trusted.bundle)
            result = fetch(hikyo, cursor=CANARY_CURSOR)
    else:
        served = pki.foreign if case == "tls" else pki.good
        with serve(served) as running:
            if case == "timeout":
                running.app = _stall
            hikyo = HikyoClient(running.url, pki.trusted.bundle, timeout=0.3)
            result = fetch(hikyo, cursor=CANARY_CURSOR)
    hikyo.close()
    assert result.outcome is Outcome.FAILED
    assert result.detail
    _assert_clean(result)


def _assert_clean(result: FetchResult | ReportResult) -> None:
    for text in (result.detail, repr(result), str(result)):
        for canary in (CANARY_CURSOR, CANARY_TOKEN, CANARY_VALUE, "cursor=", "?", "127.0.0.1"):
            assert canary not in text, text


def test_delivery_result_repr_hides_values_and_cursor(client, server):
    server.app = json_reply(200, delivery_doc(cursor=CANARY_CURSOR))
    result = fetch(client)
    assert result.delivery.cursor == CANARY_CURSOR
    assert result.delivery.keys[0].value == CANARY_VALUE
    _assert_clean(result)


def test_urllib3_request_lines_carry_no_query(client, server, caplog):
    """S0.4.2: urllib3 logs each request line at DEBUG; importing ``hikyo`` redacts its query."""
    server.app = json_reply(200, delivery_doc())
    with caplog.at_level(logging.DEBUG, logger="urllib3"):
        fetch(client, cursor=CANARY_CURSOR, acknowledged_keys=["PATH"])
    lines = [record.getMessage() for record in caplog.records]
    assert any("/delivery?<redacted>" in line for line in lines), lines
    for canary in (CANARY_CURSOR, CANARY_TOKEN, "cursor=", "projection="):
        assert not any(canary in line for line in lines), lines


# --- S7.3 status report -----------------------------------------------------------------

REPORT = {
    "cluster_id": "01900000-0000-7000-8000-00000000000c",
    "namespace": "payments",
    "name": "payments-config",
    "uid": "01900000-0000-7000-8000-00000000000d",
    "target": "payments-env",
    "generation": 4,
    "observed_generation": 4,
    "lifecycle": "Synced",
    "conditions": [{"type": "Synced", "status": "True", "reason": "Current"}],
}


def test_report_posts_the_closed_body(client, server):
    """S7.3: POST .../delivery/status, JSON, bearer; 204 accepted."""
    server.app = reply(204)
    result = client.report_status(SCOPE, token=CANARY_TOKEN, report=REPORT)
    assert result == ReportResult(204, "accepted", None)
    (seen,) = server.seen
    assert (seen.method, seen.target) == ("POST", f"{DELIVERY_PATH}/status")
    assert json.loads(seen.body) == REPORT
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Authorization"] == f"Bearer {CANARY_TOKEN}"
    assert seen.headers["User-Agent"] == DEFAULT_USER_AGENT


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        pytest.param(json_reply(404, NOT_FOUND), ReportResult(404, "status 404"), id="404"),
        pytest.param(json_reply(403, {}), ReportResult(403, "status 403"), id="403"),
        pytest.param(json_reply(400, {}), ReportResult(400, "status 400"), id="400"),
        pytest.param(reply(502), ReportResult(502, "status 502"), id="502"),
        pytest.param(
            json_reply(429, {}, {"Retry-After": "7200"}),
            ReportResult(429, "status 429 (rate limited)", 3600.0),
            id="429-capped-at-an-hour",
        ),
        pytest.param(
            json_reply(429, {}, {"Retry-After": "120"}),
            ReportResult(429, "status 429 (rate limited)", 120.0),
            id="429",
        ),
        pytest.param(
            reply(307, headers={"Location": "https://x.test/"}),
            ReportResult(307, "redirect refused (status 307)"),
            id="redirect",
        ),
    ],
)
def test_report_responses(client, server, app, expected):
    """S7.3/S7.5: the status is returned for the caller's policy; no retries in-attempt."""
    server.app = app
    assert client.report_status(SCOPE, token=CANARY_TOKEN, report=REPORT) == expected
    assert len(server.seen) == 1


def test_report_transport_failure(pki):
    with HikyoClient(_closed_port_url(), pki.trusted.bundle) as hikyo:
        result = hikyo.report_status(SCOPE, token=CANARY_TOKEN, report=REPORT)
    assert result == ReportResult(None, "connection failed")


@pytest.mark.parametrize(
    "report",
    [
        pytest.param({**REPORT, "cursor": CANARY_CURSOR}, id="extra-member"),
        pytest.param({k: v for k, v in REPORT.items() if k != "uid"}, id="missing-member"),
        pytest.param(
            {
                **REPORT,
                "conditions": [
                    {
                        "type": "Synced",
                        "status": "True",
                        "reason": "Current",
                        "message": CANARY_VALUE,
                    }
                ],
            },
            id="condition-message",
        ),
        pytest.param({**REPORT, "conditions": "Synced"}, id="conditions-not-list"),
    ],
)
def test_report_body_must_be_the_closed_set(client, server, report):
    """S7.7: nothing outside the allowlist can be sent."""
    with pytest.raises(ValueError) as caught:
        client.report_status(SCOPE, token=CANARY_TOKEN, report=report)
    assert CANARY_CURSOR not in str(caught.value) and CANARY_VALUE not in str(caught.value)
    assert server.seen == []


def test_closed_client_refuses(server, pki):
    hikyo = HikyoClient(server.url, pki.trusted.bundle)
    hikyo.close()
    with pytest.raises(RuntimeError):
        fetch(hikyo)
