"""The Hikyo delivery client (S3) and status-report sender (S7.3), on ``requests``.

Strict on security, lenient on fields (pattern 11). Transport rules (S3.2): HTTPS only;
with a CA bundle trust only those certificates, else the system store; TLS >= 1.2;
hostname verification always on; redirects never followed; no proxy environment,
``.netrc`` or cookies; connect + handshake <= ``handshake_timeout``; the whole exchange
<= ``timeout`` (a watchdog shuts the socket down at the deadline, so a server that
trickles headers or body cannot hold a worker); bodies capped at 8 MiB.

``fetch`` and ``report_status`` never raise for HTTP or transport problems: they return
a result whose ``detail`` is a fixed, value-free text (S3.6). ``requests`` exception
strings embed the URL with its query (the cursor), so they are never formatted; the
exception class picks the text. Only programming errors (bad arguments) raise.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import http.client
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from http.cookiejar import DefaultCookiePolicy
from importlib import metadata
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit

import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter

from .delivery import (
    MAX_BODY_BYTES,
    MAX_ERROR_BODY_BYTES,
    decode_delivery,
    error_code,
    is_authoritative_not_found,
)
from .errors import HikyoClientError, InvalidBaseUrl, InvalidResponse, InvalidTrust
from .fetched import Delivery, FetchResult, ReportResult, Scope
from .fetched import FetchOutcome as Outcome

try:  # urllib3 2.x; 1.26 keeps these elsewhere or lacks them
    from urllib3.util.ssl_match_hostname import CertificateError as _HostnameMismatch
except ImportError:  # pragma: no cover
    _HostnameMismatch = ssl.CertificateError
_NameResolutionError = getattr(urllib3.exceptions, "NameResolutionError", socket.gaierror)

__all__ = [
    "DEFAULT_USER_AGENT",
    "Delivery",
    "FetchResult",
    "HikyoClient",
    "HikyoClientError",
    "InvalidBaseUrl",
    "InvalidResponse",
    "InvalidTrust",
    "Outcome",
    "ReportResult",
    "Scope",
]

PROJECTIONS = frozenset({"full", "config-only"})  # delivery-api.yaml DeliveryProjection
RATE_LIMIT_MIN_S = 1.0  # S4.1.6
RATE_LIMIT_MAX_S = 300.0  # S4.1.6
REPORT_RETRY_MAX_S = 3600.0  # S7.5: a CR's next report no earlier than min(Retry-After, 1 h)
_CHUNK = 64 * 1024

# S7.3: the closed report body (additionalProperties: false at both levels).
REPORT_MEMBERS = frozenset(
    {
        "cluster_id",
        "namespace",
        "name",
        "uid",
        "target",
        "generation",
        "observed_generation",
        "lifecycle",
        "conditions",
    }
)
REPORT_CONDITION_MEMBERS = frozenset({"type", "status", "reason"})


# --- construction: S3.1 base URL, S3.2 trust -------------------------------------------


def _package_version() -> str:
    try:
        return metadata.version("hikyo-operator")
    except metadata.PackageNotFoundError:
        return "0+unknown"


DEFAULT_USER_AGENT = f"hikyo-operator/{_package_version()}"  # S3.3


def normalize_base_url(url: str) -> str:
    """S3.1: https, a host, no userinfo/query/fragment; one trailing ``/`` trimmed.

    Messages never repeat the URL: a rejected one may hold credentials in userinfo.
    """
    if not isinstance(url, str) or not url:
        raise InvalidBaseUrl("base URL is empty")
    if any(ch <= " " or ch in "\x7f\\" for ch in url):
        raise InvalidBaseUrl("base URL contains whitespace, control characters or '\\'")
    if "?" in url or "#" in url:
        raise InvalidBaseUrl("base URL must not have a query or fragment")
    parts = urlsplit(url)
    if parts.scheme.lower() != "https":
        raise InvalidBaseUrl("base URL must use https")
    if "@" in parts.netloc:
        raise InvalidBaseUrl("base URL must not contain userinfo")
    if not parts.hostname:
        raise InvalidBaseUrl("base URL has no host")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise InvalidBaseUrl("base URL has an invalid port") from None
    path = parts.path[:-1] if parts.path.endswith("/") else parts.path
    return f"https://{parts.netloc}{path}"


_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.DOTALL)


def build_ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """S3.2: the TLS context. ``None`` = system store; otherwise only the bundle's certs.

    The bundle is base64 (standard alphabet; line breaks ignored) of PEM text. Blocks
    that do not parse are skipped; no parsable certificate at all is an error, never a
    fallback to system roots.
    """
    if ca_bundle is None:
        context = ssl.create_default_context()
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # loads no roots
        loaded = sum(_load_pem_block(context, block) for block in _pem_blocks(ca_bundle))
        if not loaded:
            raise InvalidTrust("CA bundle holds no parsable PEM certificate")
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _pem_blocks(ca_bundle: str) -> list[bytes]:
    compact = ca_bundle.replace("\r", "").replace("\n", "")
    try:
        pem = base64.b64decode(compact.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        pem = None
    if pem is None:  # raised outside the handler: the bad input stays out of __context__
        raise InvalidTrust("CA bundle is not valid base64")
    return _PEM_CERT.findall(pem)


def _load_pem_block(context: ssl.SSLContext, block: bytes) -> bool:
    try:
        context.load_verify_locations(cadata=block.decode("ascii"))
    except (UnicodeDecodeError, ssl.SSLError, ValueError):
        return False
    return True


# --- transport: deadline watchdog, pinned adapter --------------------------------------

_current_deadline: contextvars.ContextVar[_Deadline | None] = contextvars.ContextVar(
    "hikyo_client_deadline", default=None
)


class _Deadline:
    """S3.2 "whole request <= 30 s": at expiry, shut the connection's socket down.

    Socket timeouts bound each read, not their sum; a server that trickles one byte
    per read would otherwise hold the worker far past the deadline. Shutting the
    socket down wakes a blocked read in the requesting thread.
    """

    def __init__(self, seconds: float) -> None:
        self._expires = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._conn: Any = None
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._token: contextvars.Token[_Deadline | None] | None = None

    def __enter__(self) -> _Deadline:
        self._token = _current_deadline.set(self)
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        if self._token is not None:
            _current_deadline.reset(self._token)

    def expired(self) -> bool:
        return self.fired or time.monotonic() >= self._expires

    def attach(self, conn: Any) -> None:
        with self._lock:
            self._conn = conn
            fired = self.fired
        if fired:
            _shutdown(conn)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            conn = self._conn
        if conn is not None:
            _shutdown(conn)


def _shutdown(conn: Any) -> None:
    sock = getattr(conn, "hikyo_socket", None) or getattr(conn, "sock", None)
    if sock is None:
        return  # not connected yet: the connect/handshake timeout bounds that phase
    # The plain-socket method: SSLSocket.shutdown would also drop the TLS object under
    # the reading thread.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _TrackedHTTPSConnection(urllib3.connection.HTTPSConnection):
    """Remembers its socket: http.client drops ``sock`` from a connection whose response
    will close it (HTTP/1.0, ``Connection: close``) while the body is still being read."""

    hikyo_socket: socket.socket | None = None

    def connect(self) -> None:
        super().connect()
        self.hikyo_socket = self.sock


class _DeadlineHTTPSConnectionPool(urllib3.HTTPSConnectionPool):
    """Hands every connection (new or reused) to the active deadline before use."""

    ConnectionCls = _TrackedHTTPSConnection

    def _make_request(self, conn: Any, *args: Any, **kwargs: Any) -> Any:
        deadline = _current_deadline.get()
        if deadline is not None:
            deadline.attach(conn)
        return super()._make_request(conn, *args, **kwargs)


class _RefusePlainHttp(BaseAdapter):
    """S3.2: plain HTTP is never spoken, whatever URL reaches the session."""

    def send(self, *args: Any, **kwargs: Any) -> requests.Response:
        raise requests.exceptions.InvalidSchema("plain http refused")

    def close(self) -> None:
        pass


class _PinnedTLSAdapter(HTTPAdapter):
    """S3.2: one SSLContext for every connection, nothing added from certifi or env."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._context = context
        super().__init__(max_retries=0)  # no in-attempt retries (S7.5)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["ssl_context"] = self._context
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            **self.poolmanager.pool_classes_by_scheme,
            "https": _DeadlineHTTPSConnectionPool,
        }

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        # HTTPAdapter would point the pool at certifi here, and urllib3 would then add
        # those roots to our context: trust must come from the context alone.
        conn.cert_reqs = "CERT_REQUIRED"
        conn.ca_certs = None
        conn.ca_cert_dir = None

    def proxy_manager_for(self, *args: Any, **kwargs: Any) -> Any:
        raise requests.exceptions.InvalidProxyURL("proxies are refused")


class _BlockAllCookies(DefaultCookiePolicy):
    """S3.2: cookies are never stored or sent."""

    def set_ok(self, cookie: Any, request: Any) -> bool:
        return False

    def return_ok(self, cookie: Any, request: Any) -> bool:
        return False


def _harden(session: requests.Session) -> None:
    """S3.2 ambient config: no proxy env, no .netrc, no cookies, no redirects."""
    session.trust_env = False
    session.proxies = {}
    session.max_redirects = 0
    session.cookies.clear()
    session.cookies.set_policy(_BlockAllCookies())
    session.auth = None
    session.verify = True


# --- response helpers ------------------------------------------------------------------


@dataclass(frozen=True)
class _Answer:
    """The raw outcome of one exchange. ``body`` is None unless the status asked for it."""

    status: int | None
    detail: str = ""
    headers: Mapping[str, str] | None = None
    body: bytes | None = None
    oversize: bool = False


def _retry_after(headers: Mapping[str, str] | None, upper: float) -> float:
    """S4.1.6: clamp(Retry-After, 1 s, upper); absent or unparsable => 1 s."""
    raw = (headers or {}).get("Retry-After")
    seconds = _parse_retry_after(raw.strip()) if isinstance(raw, str) else None
    if seconds is None:
        return RATE_LIMIT_MIN_S
    return min(max(seconds, RATE_LIMIT_MIN_S), upper)


def _parse_retry_after(raw: str) -> float | None:
    if raw.isascii() and raw.isdigit():  # delta-seconds (RFC 9110 10.2.3)
        return float(raw)  # huge => inf, clamped by the caller
    try:  # or an HTTP-date
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return when.timestamp() - time.time()


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and everything it wraps (args, .reason, cause, context)."""
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack and len(seen) < 32:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None)]
        linked.extend(current.args)
        stack.extend(item for item in linked if isinstance(item, BaseException))


def _transport_detail(exc: BaseException, deadline: _Deadline) -> str:
    """S3.6: a fixed text chosen by exception class; ``str(exc)`` would show the URL."""
    if deadline.expired():
        return "timeout"
    chain = list(_causes(exc))

    def has(*classes: type[BaseException]) -> bool:
        return any(isinstance(item, classes) for item in chain)

    if has(ssl.SSLCertVerificationError, _HostnameMismatch):
        return "TLS verification failed"
    # Before the timeouts: urllib3's NewConnectionError subclasses ConnectTimeoutError.
    if has(_NameResolutionError, socket.gaierror):
        return "name resolution failed"
    if has(urllib3.exceptions.NewConnectionError, ConnectionRefusedError):
        return "connection failed"
    if has(requests.exceptions.ConnectTimeout, urllib3.exceptions.ConnectTimeoutError):
        return "connect timeout"
    if has(requests.exceptions.Timeout, urllib3.exceptions.TimeoutError, TimeoutError):
        return "timeout"
    if has(ssl.SSLError, urllib3.exceptions.SSLError, requests.exceptions.SSLError):
        return "TLS handshake failed"
    if has(
        urllib3.exceptions.ProtocolError,
        requests.exceptions.ChunkedEncodingError,
        http.client.HTTPException,
        ConnectionError,
    ):
        return "connection broken"
    return "transport error"


_TRANSPORT_ERRORS = (
    requests.exceptions.RequestException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,  # includes ssl.SSLError, socket timeouts
)


# --- the client ------------------------------------------------------------------------


class HikyoClient:
    """One Hikyo instance's client (S3). May be cached per instance UID (S3.1).

    ``session`` is a seam for tests and pooling: a supplied session keeps its mounted
    adapters (so TLS trust is then theirs; ``ca_bundle`` is still validated), but is
    hardened against ambient config (S3.2) and is not closed by :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        ca_bundle: str | None = None,
        *,
        user_agent: str = DEFAULT_USER_AGENT,
        session: requests.Session | None = None,
        timeout: float = 30.0,
        handshake_timeout: float = 10.0,
    ) -> None:
        if not (timeout > 0 and handshake_timeout > 0):
            raise ValueError("timeouts must be positive")
        self._base = normalize_base_url(base_url)
        context = build_ssl_context(ca_bundle)
        self._owns_session = session is None
        if session is None:
            session = requests.Session()
            session.mount("https://", _PinnedTLSAdapter(context))
            session.mount("http://", _RefusePlainHttp())
        _harden(session)
        self._session = session
        self._user_agent = user_agent
        self._timeout = float(timeout)
        self._connect_timeout = min(float(handshake_timeout), self._timeout)
        self._closed = False

    # -- public -------------------------------------------------------------------------

    def fetch(
        self,
        scope: Scope,
        *,
        token: str,
        projection: str,
        cursor: str | None,
        acknowledged_keys: Sequence[str] = (),
    ) -> FetchResult:
        """S3.3 request and S3.5 mapping. An empty ``cursor`` counts as none (S4.3.1(1))."""
        if projection not in PROJECTIONS:
            raise ValueError("projection must be 'full' or 'config-only'")
        acknowledged = _acknowledged(acknowledged_keys)
        headers = self._headers(token)
        presented = bool(cursor)
        query = [("projection", projection)]
        if presented:
            query.append(("cursor", cursor))
        if acknowledged:
            query.append(("acknowledged_keys", acknowledged))
        url = self._scope_url(scope, "/delivery") + "?" + _encode_query(query)
        answer = self._exchange("GET", url, headers, None, _fetch_body_limit)
        return _interpret_fetch(answer, cursor_presented=presented)

    def report_status(self, scope: Scope, *, token: str, report: dict) -> ReportResult:
        """S7.3 POST of the closed report body; the caller applies S7.5 to the result."""
        body = _encode_report(report)
        headers = self._headers(token)
        headers["Content-Type"] = "application/json"
        url = self._scope_url(scope, "/delivery/status")
        answer = self._exchange("POST", url, headers, body, lambda _status: None)
        return _interpret_report(answer)

    def close(self) -> None:
        """Release pooled connections (only of a session this client created)."""
        self._closed = True
        if self._owns_session:
            self._session.close()

    def __enter__(self) -> HikyoClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- request building ---------------------------------------------------------------

    def _headers(self, token: str) -> dict[str, str]:
        """S3.3 headers. No credential => no request (ValueError, value-free)."""
        if not isinstance(token, str) or not token:
            raise ValueError("a bearer token is required")
        if not all("\x21" <= ch <= "\x7e" for ch in token):  # S2.2.3 visible ASCII
            raise ValueError("the bearer token must be visible ASCII")
        return {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "User-Agent": self._user_agent,
            # Raw bytes are capped and parsed as sent; no decompression bombs.
            "Accept-Encoding": "identity",
        }

    def _scope_url(self, scope: Scope, suffix: str) -> str:
        """S3.3 path: IDs percent-encoded as single path segments."""
        org, project, environment = (
            _segment(scope.org),
            _segment(scope.project),
            _segment(scope.environment),
        )
        return (
            f"{self._base}/api/v1/orgs/{org}/projects/{project}/environments/{environment}{suffix}"
        )

    # -- the exchange -------------------------------------------------------------------

    def _exchange(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        data: bytes | None,
        body_limit: Callable[[int], int | None],
    ) -> _Answer:
        """One request under the S3.2 rules; never raises for transport problems."""
        if self._closed:
            raise RuntimeError("client is closed")
        with _Deadline(self._timeout) as deadline:
            response = None
            try:
                # The adapter directly, not Session.send: even with allow_redirects=False
                # the session reads a 3xx body in full (uncapped) to prepare the next hop,
                # and it would extract cookies.
                prepared = self._session.prepare_request(
                    requests.Request(method, url, headers=headers, data=data)
                )
                response = self._session.get_adapter(prepared.url).send(
                    prepared,
                    stream=True,
                    timeout=(self._connect_timeout, self._timeout),
                    verify=True,
                    cert=None,
                    proxies={},
                )
                return _read_answer(response, body_limit, deadline)
            except _TRANSPORT_ERRORS as exc:
                return _Answer(
                    status=response.status_code if response is not None else None,
                    detail=_transport_detail(exc, deadline),
                )
            finally:
                if response is not None:
                    response.close()


def _read_answer(
    response: requests.Response,
    body_limit: Callable[[int], int | None],
    deadline: _Deadline,
) -> _Answer:
    status = response.status_code
    if 300 <= status < 400:  # S3.2: never followed, and the body is not read
        return _Answer(status=status, detail=f"redirect refused (status {status})")
    limit = body_limit(status)
    if limit is None:
        return _Answer(status=status, headers=response.headers)
    body = _read_capped(response, limit, deadline)
    if body is None:
        return _Answer(status=status, headers=response.headers, oversize=True)
    return _Answer(status=status, headers=response.headers, body=body)


def _read_capped(response: requests.Response, limit: int, deadline: _Deadline) -> bytes | None:
    """Up to ``limit`` bytes, or None when the body is larger (never a truncated prefix)."""
    declared = response.headers.get("Content-Length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        return None
    read = _raw_reader(response)
    chunks: list[bytes] = []
    size = 0
    while True:
        if deadline.expired():
            raise TimeoutError  # mapped to "timeout" (S3.2 whole-request deadline)
        chunk = read(min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)


def _raw_reader(response: requests.Response) -> Callable[[int], bytes]:
    raw = response.raw
    if isinstance(raw, urllib3.HTTPResponse):
        # Bytes as sent: a Content-Encoding is not undone, so the cap is on what we parse.
        return lambda amount: raw.read(amount, decode_content=False)
    return raw.read  # a test seam's file-like raw


def _fetch_body_limit(status: int) -> int | None:
    # 200 needs the delivery (S3.4.1); 404/409 only a small error envelope (S3.5.1).
    if status == 200:
        return MAX_BODY_BYTES
    if status in (404, 409):
        return MAX_ERROR_BODY_BYTES
    return None


def _interpret_fetch(answer: _Answer, *, cursor_presented: bool) -> FetchResult:
    """S3.5: status => outcome."""
    status = answer.status
    if answer.detail:
        return FetchResult(Outcome.FAILED, status, detail=answer.detail)
    if status == 200:
        return _interpret_delivery(answer, cursor_presented)
    if status == 404:
        if answer.body is not None and is_authoritative_not_found(answer.body):
            return FetchResult(Outcome.AUTHORITATIVE_NOT_FOUND, 404, detail="not found")
        return FetchResult(Outcome.FAILED, 404, detail="status 404 (not an authoritative body)")
    if status == 409:
        if answer.body is not None and error_code(answer.body) == "conflict":
            return FetchResult(Outcome.NOT_MATERIALIZED, 409, detail="status 409 (conflict)")
        return FetchResult(Outcome.FAILED, 409, detail="status 409")
    if status == 401:
        return FetchResult(Outcome.FAILED, 401, detail="status 401 (credential rejected)")
    if status == 429:
        return FetchResult(
            Outcome.RATE_LIMITED,
            429,
            retry_after=_retry_after(answer.headers, RATE_LIMIT_MAX_S),
            detail="status 429 (rate limited)",
        )
    return FetchResult(Outcome.FAILED, status, detail=f"status {status}")


def _interpret_delivery(answer: _Answer, cursor_presented: bool) -> FetchResult:
    if answer.oversize or answer.body is None:
        return FetchResult(Outcome.FAILED, 200, detail="response exceeds 8 MiB")
    try:
        delivery = decode_delivery(answer.body)
    except InvalidResponse as exc:
        # Our own fixed rule text (S3.4): safe to show.
        return FetchResult(Outcome.FAILED, 200, detail=f"invalid response: {exc}")
    if delivery.current and not cursor_presented:  # S3.5 protocol violation
        return FetchResult(
            Outcome.FAILED, 200, detail="server answered current to a cursor-less request"
        )
    return FetchResult(Outcome.DELIVERY, 200, delivery=delivery)


def _interpret_report(answer: _Answer) -> ReportResult:
    """S7.3 responses; S7.5 decides what each means."""
    status = answer.status
    if answer.detail:
        return ReportResult(status, answer.detail)
    if status == 204:
        return ReportResult(204, "accepted")
    if status == 429:
        return ReportResult(
            429, "status 429 (rate limited)", _retry_after(answer.headers, REPORT_RETRY_MAX_S)
        )
    return ReportResult(status, f"status {status}")


def _segment(value: str) -> str:
    if not isinstance(value, str) or value in ("", ".", ".."):
        # Dot segments would be collapsed by URL normalisation and move the request.
        raise ValueError("scope IDs must be non-empty and not '.' or '..'")
    return quote(value, safe="")


def _encode_query(pairs: list[tuple[str, str]]) -> str:
    # Everything but unreserved characters is escaped: '+' in a cursor must not turn
    # into a space on the server. ',' becomes %2C, which S3.3 allows.
    return "&".join(f"{quote(name, safe='')}={quote(value, safe='')}" for name, value in pairs)


def _acknowledged(names: Sequence[str]) -> str:
    """S3.3: names joined by ',' (form, explode false); '' when the list is empty."""
    if isinstance(names, str):
        raise ValueError("acknowledged_keys must be a sequence of names, not a string")
    for name in names:
        if not isinstance(name, str) or not name or "," in name:
            raise ValueError("acknowledged key names must be non-empty and comma-free")
    return ",".join(names)


def _encode_report(report: dict) -> bytes:
    """S7.3/S7.7: the closed body only, so nothing else can reach the server."""
    if not isinstance(report, dict) or set(report) != REPORT_MEMBERS:
        raise ValueError("report members must be exactly the S7.3 set")
    conditions = report["conditions"]
    if not isinstance(conditions, list) or not all(
        isinstance(item, dict) and set(item) == REPORT_CONDITION_MEMBERS for item in conditions
    ):
        raise ValueError("report conditions must hold exactly type, status and reason")
    return json.dumps(report, separators=(",", ":"), allow_nan=False).encode("utf-8")
