"""The socket layer: two loopback HTTPS origins on ``http.server`` threads.

The TLS handshake runs on the connection's own thread (not in the accept loop), and every
socket has a timeout, so a slow or broken client holds one thread for a bounded time and
never blocks other requests. The stdlib's request-line logging is replaced: it would print
query strings, and with them cursors (S0.4.2).
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devserver.app import DeliveryApp, Incoming
from devserver.replies import Reply, error_reply

logger = logging.getLogger("devserver.http")

HANDSHAKE_TIMEOUT = 10.0
IO_TIMEOUT = 30.0
MAX_REQUEST_BODY = 64 * 1024
MAX_DRAINED_BODY = 1024 * 1024
_CHUNK = 64 * 1024
_NO_BODY_STATUSES = (204, 304)


class _Handler(BaseHTTPRequestHandler):
    server: OriginServer
    protocol_version = "HTTP/1.1"
    server_version = "hikyo-devserver"
    sys_version = ""
    timeout = IO_TIMEOUT
    # Headers and body are separate writes; Nagle plus delayed ACK would add ~40 ms.
    disable_nagle_algorithm = True

    def __getattr__(self, name: str) -> Any:
        # Every method reaches the app, which answers unknown ones with the uniform 404.
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    # -- logging without query strings, tokens or values ---------------------------------

    def _safe_path(self) -> str:
        return str(getattr(self, "path", "") or "").split("?", 1)[0]

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        logger.info(
            "%s %s %s -> %s", self.server.origin, self.command or "-", self._safe_path(), code
        )

    def log_error(self, format: str, *args: Any) -> None:
        # The stdlib passes the raw request line here (query string included).
        logger.debug("%s: protocol error from client", self.server.origin)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s: http.server message suppressed", self.server.origin)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        """Protocol-level errors (bad request line, oversized headers) as Hikyo JSON."""
        reply = error_reply(code, None, "request: malformed" if code == 400 else None)
        self.close_connection = True
        self._write(reply, include_body=getattr(self, "command", None) != "HEAD")

    # -- request handling ----------------------------------------------------------------

    def _read_body(self) -> tuple[bytes, bool]:
        if self.headers.get("Transfer-Encoding"):
            # Only Content-Length bodies are supported; the rest of the stream is unusable.
            self.close_connection = True
            return b"", True
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            return b"", True
        if length < 0 or length > MAX_DRAINED_BODY:
            self.close_connection = True
            return b"", True
        body = self.rfile.read(length)
        # A moderately oversized body is read and dropped, so the client sees the 400
        # instead of a reset while it is still sending.
        return (b"", True) if length > MAX_REQUEST_BODY else (body, False)

    def _dispatch(self) -> None:
        body, too_large = self._read_body()
        incoming = Incoming(
            origin=self.server.origin,
            method=self.command,
            target=self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
            body_too_large=too_large,
            authorization_headers=len(self.headers.get_all("Authorization") or []),
        )
        try:
            reply = self.server.app.handle(incoming)
        except Exception:
            logger.exception("%s: request handling failed", self.server.origin)
            reply = error_reply(500)
        if reply.delay:
            # Waits on the stop event so stopping the server never hangs on a slow fault.
            self.server.stopping.wait(reply.delay)
        if reply.disconnect:
            self.close_connection = True
            return
        self._write(reply, include_body=self.command != "HEAD")

    def _write(self, reply: Reply, *, include_body: bool) -> None:
        try:
            self.send_response(reply.status)
            for name, value in reply.headers:
                self.send_header(name, value)
            if reply.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            elif reply.status not in _NO_BODY_STATUSES:
                self.send_header("Content-Length", str(len(reply.body)))
            if reply.close or self.close_connection:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if not include_body or reply.status in _NO_BODY_STATUSES:
                return
            if reply.chunked:
                for start in range(0, len(reply.body), _CHUNK):
                    chunk = reply.body[start : start + _CHUNK]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.wfile.write(reply.body)
            self.wfile.flush()
        except (OSError, ValueError):
            # The client went away (e.g. it stopped reading an oversize body): fine.
            self.close_connection = True


class OriginServer(ThreadingHTTPServer):
    """One HTTPS origin on ``host`` (127.0.0.1 unless a local node's pods must reach it);
    ``origin`` is ``"main"`` or ``"second"``."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self,
        origin: str,
        app: DeliveryApp,
        context: ssl.SSLContext,
        stopping: threading.Event,
        port: int = 0,
        host: str = "127.0.0.1",
    ) -> None:
        self.origin = origin
        self.app = app
        self.context = context
        self.stopping = stopping
        self._live: set[ssl.SSLSocket] = set()
        self._live_lock = threading.Lock()
        self._closing = False
        # A socket pair wakes the accept loop at once on stop (no polling interval).
        self._wake_reader, self._wake_writer = socket.socketpair()
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def serve(self) -> None:
        """The accept loop; returns as soon as :meth:`request_stop` is called."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while not self._closing:
                for key, _ in selector.select():
                    if key.fileobj is self.socket and not self._closing:
                        self._handle_request_noblock()

    def request_stop(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"x")

    def server_close(self) -> None:
        super().server_close()
        self._wake_reader.close()
        self._wake_writer.close()

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Runs on the connection's thread: TLS handshake with a deadline, then HTTP."""
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            connection = self.context.wrap_socket(request, server_side=True)
        except (OSError, ValueError):
            return  # failed handshake (untrusting client, plain HTTP, timeout)
        with self._live_lock:
            self._live.add(connection)
        try:
            connection.settimeout(IO_TIMEOUT)
            self.RequestHandlerClass(connection, client_address, self)
        finally:
            with self._live_lock:
                self._live.discard(connection)
            connection.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.debug("%s: connection ended with an error", self.origin, exc_info=True)

    def close_connections(self) -> None:
        """Wakes every connection thread (keep-alive readers included) so it can exit."""
        with self._live_lock:
            live = list(self._live)
        for connection in live:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
