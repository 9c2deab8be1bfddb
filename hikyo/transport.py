"""The hardened HTTPS exchange on ``requests`` (S3.2), for deliveries and reports alike.

Transport rules (S3.2): HTTPS only, over the one TLS context ``endpoint`` built (TLS >= 1.2,
hostname verification always on, no roots added from certifi or the environment); redirects
never followed; no proxy environment, ``.netrc`` or cookies; connect + handshake <=
``handshake_timeout``; the whole exchange <= ``timeout`` (a watchdog shuts the socket down at
the deadline, so a server that trickles headers or body cannot hold a worker); bodies read
only up to the caller's cap.

:meth:`Transport.exchange` never raises for HTTP or transport problems: its :class:`Answer`
carries a fixed, value-free text (S3.6). ``requests`` exception strings embed the URL with its
query (the cursor), so they are never formatted; the exception class picks the text.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import http.client
import itertools
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from http.cookiejar import DefaultCookiePolicy
from typing import Any

import requests
import urllib3
from requests.adapters import BaseAdapter, HTTPAdapter

from workers.engine.fetched import TLS_VERIFICATION_FAILED

try:  # urllib3 2.x; 1.26 keeps these elsewhere or lacks them
    from urllib3.util.ssl_match_hostname import CertificateError as _HostnameMismatch
except ImportError:  # pragma: no cover
    _HostnameMismatch = ssl.CertificateError
_NameResolutionError = getattr(urllib3.exceptions, "NameResolutionError", socket.gaierror)

RATE_LIMIT_MIN_S = 1.0  # S4.1.6
_CHUNK = 64 * 1024
DRAIN_BYTES = 4096  # an unwanted body up to this size is read and dropped to keep the connection


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
        self.expires = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._conn: Any = None
        self.fired = False
        self.finished = False
        self._token: contextvars.Token[_Deadline | None] | None = None

    def __enter__(self) -> _Deadline:
        self._token = _current_deadline.set(self)
        _watchdog.watch(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.finished = True
        _watchdog.forget_one()
        if self._token is not None:
            _current_deadline.reset(self._token)

    def expired(self) -> bool:
        return self.fired or time.monotonic() >= self.expires

    def attach(self, conn: Any) -> None:
        with self._lock:
            self._conn = conn
            fired = self.fired
        if fired:
            _shutdown(conn)

    def fire(self) -> None:
        with self._lock:
            if self.finished:
                return
            self.fired = True
            conn = self._conn
        if conn is not None:
            _shutdown(conn)


class _Watchdog:
    """One daemon thread fires every request deadline of the process at its expiry.

    A thread per request (a ``threading.Timer``) cost two thread starts per reconcile (the
    fetch and the report, issue 13). A finished deadline stays in the heap until its
    expiry, or until finished ones are half of it and the heap is rebuilt.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._order = itertools.count()
        self._finished = 0
        self._thread: threading.Thread | None = None

    def watch(self, deadline: _Deadline) -> None:
        with self._changed:
            heapq.heappush(self._heap, (deadline.expires, next(self._order), deadline))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="hikyo-deadlines", daemon=True
                )
                self._thread.start()
            # The thread waits for the earliest deadline: a later one needs no wake-up (each
            # request's is 30 s on, so most are later; a wake per request cost a thread switch).
            if self._heap[0][2] is deadline:
                self._changed.notify()

    def forget_one(self) -> None:
        with self._changed:
            self._finished += 1
            if self._finished > 64 and self._finished * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].finished]
                heapq.heapify(self._heap)
                self._finished = 0

    def _run(self) -> None:
        while True:
            with self._changed:
                due = self._next_due()
            if due is not None:
                due.fire()

    def _next_due(self) -> _Deadline | None:
        """The earliest unfinished deadline once it expires; None after a wait (a new entry,
        or an idle minute), so the caller fires outside the lock."""
        while self._heap and self._heap[0][2].finished:
            heapq.heappop(self._heap)
            self._finished = max(0, self._finished - 1)
        if not self._heap:
            self._changed.wait(60.0)
            return None
        wait = self._heap[0][0] - time.monotonic()
        if wait > 0:
            self._changed.wait(wait)
            return None
        return heapq.heappop(self._heap)[2]


_watchdog = _Watchdog()  # its thread starts with the first request


def _new_watchdog() -> None:
    global _watchdog
    _watchdog = _Watchdog()


# A forked child (Celery's prefork pool) has no watchdog thread and maybe a lock held by a
# thread that is gone: it starts its own.
os.register_at_fork(after_in_child=_new_watchdog)


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
class Answer:
    """The raw outcome of one exchange. ``body`` is None unless the status asked for it."""

    status: int | None
    detail: str = ""
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    body: bytes | None = field(default=None, repr=False)  # may hold values (S0.4)
    oversize: bool = False


def retry_after(headers: Mapping[str, str] | None, upper: float) -> float:
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
        return TLS_VERIFICATION_FAILED
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


# --- the exchange ----------------------------------------------------------------------


class Transport:
    """One hardened session and the S3.2 exchange over it.

    ``session`` is a seam for tests and pooling: a supplied session keeps its mounted
    adapters (so TLS trust is then theirs), but is hardened against ambient config (S3.2)
    and is not closed by :meth:`close`.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        *,
        session: requests.Session | None,
        timeout: float,
        handshake_timeout: float,
    ) -> None:
        self._owns_session = session is None
        if session is None:
            session = requests.Session()
            session.mount("https://", _PinnedTLSAdapter(context))
            session.mount("http://", _RefusePlainHttp())
        _harden(session)
        self._session = session
        self._timeout = float(timeout)
        self._connect_timeout = min(float(handshake_timeout), self._timeout)
        self._closed = False

    def close(self) -> None:
        """Release pooled connections (only of a session this transport created)."""
        self._closed = True
        if self._owns_session:
            self._session.close()

    def exchange(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        data: bytes | None,
        body_limit: Callable[[int], int | None],
    ) -> Answer:
        """One request under the S3.2 rules; never raises for transport problems."""
        if self._closed:
            raise RuntimeError("client is closed")
        with _Deadline(self._timeout) as deadline:
            response = None
            finished = False  # the answer was read to its end: its connection may be reused
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
                answer = _read_answer(response, body_limit, deadline)
                finished = _read_to_end(response, answer)
                return answer
            except _TRANSPORT_ERRORS as exc:
                return Answer(
                    status=response.status_code if response is not None else None,
                    detail=_transport_detail(exc, deadline),
                )
            finally:
                if response is not None:
                    if finished and not deadline.expired():
                        # Back to the pool, kept alive: the next exchange skips a TCP and TLS
                        # handshake. (close() would shut the socket even after a full read.)
                        response.raw.release_conn()
                    else:
                        response.close()  # unread bytes or a dead socket: never reused


def _read_answer(
    response: requests.Response,
    body_limit: Callable[[int], int | None],
    deadline: _Deadline,
) -> Answer:
    status = response.status_code
    if 300 <= status < 400:  # S3.2: never followed, and the body is not read
        return Answer(status=status, detail=f"redirect refused (status {status})")
    limit = body_limit(status)
    if limit is None:
        _drain_small(response, deadline)  # discarded: only so the connection can be reused
        return Answer(status=status, headers=response.headers)
    body = _read_capped(response, limit, deadline)
    if body is None:
        return Answer(status=status, headers=response.headers, oversize=True)
    return Answer(status=status, headers=response.headers, body=body)


def _drain_small(response: requests.Response, deadline: _Deadline) -> None:
    """Reads and drops a body nobody wants when it declares at most DRAIN_BYTES (an error
    envelope), so the connection is left clean for the next request; a larger or undeclared
    one is left unread and its connection closed."""
    declared = response.headers.get("Content-Length", "")
    if not (declared.isascii() and declared.isdigit()) or int(declared) > DRAIN_BYTES:
        return
    _read_capped(response, DRAIN_BYTES, deadline)  # http.client stops at Content-Length


def _read_to_end(response: requests.Response, answer: Answer) -> bool:
    """True when nothing of the answer is left on the connection: a body read to its end, or
    none at all (204, 304, Content-Length 0). A redirect, an unread or oversize body, or a
    connection the server closes leave it False, and the connection is then closed."""
    raw = response.raw
    if not isinstance(raw, urllib3.HTTPResponse) or answer.oversize or answer.detail:
        return False
    if raw.headers.get("Connection", "").lower() == "close":
        return False
    if answer.body is not None or _exhausted(raw):
        return raw.length_remaining in (0, None) and _exhausted(raw)
    no_body = response.status_code in (204, 304) or raw.headers.get("Content-Length") == "0"
    return no_body and not response.headers.get("Transfer-Encoding")


def _exhausted(raw: urllib3.HTTPResponse) -> bool:
    """The underlying http.client response has seen the end of its body."""
    original = getattr(raw, "_original_response", None)
    return original is None or original.isclosed()


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
