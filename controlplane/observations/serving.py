"""The production HTTP server of run_operator: /healthz, /readyz and the dashboard, in-process.

cheroot (CherryPy's server, a dependency of nothing else here) because it is made to be
embedded: ``prepare()`` binds, ``serve()`` runs in a thread of ours and ``stop()`` ends it from
the main thread, with no signal handlers or process model of its own (run_operator owns
SIGTERM). Everything is bounded: a fixed pool of request threads, the listen backlog, the
queue of accepted connections waiting for a thread, an idle-socket timeout (a client that
stops sending is dropped, so slow clients cannot pin the pool), and the shutdown wait.
Idle keep-alive connections wait in cheroot's selector, not in a thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from cheroot import wsgi

log = logging.getLogger("controlplane.http")

THREADS = 8  # concurrent requests; the dashboard's pages are a few queries each
LISTEN_BACKLOG = 64  # connections the kernel holds before accept()
ACCEPTED_QUEUE = 64  # accepted connections waiting for a free thread
ACCEPTED_QUEUE_TIMEOUT_SECONDS = 10  # ... for this long, then dropped
SOCKET_TIMEOUT_SECONDS = 10  # a connection silent this long mid-request is closed
SHUTDOWN_TIMEOUT_SECONDS = 5  # running requests get this long at stop, then are cut
SERVER_NAME = "hikyo-operator"  # the Server header: no server software or version disclosed

WSGIApp = Callable[..., Any]


class HttpServer(wsgi.Server):
    """cheroot's WSGI server, logging through ``logging`` instead of writing to stderr."""

    def error_log(self, msg: str = "", level: int = logging.INFO, traceback: bool = False) -> None:
        log.log(level, "%s", msg, exc_info=traceback)

    def bind(self, family: int, type: int, proto: int = 0) -> Any:
        """cheroot's ``bind``, but a socket that cannot bind (port in use) is closed, not left
        for the garbage collector (a ResourceWarning)."""
        sock = self.prepare_socket(
            self.bind_addr, family, type, proto, self.nodelay, self.ssl_adapter, self.reuse_port
        )
        try:
            sock = self.socket = self.bind_socket(sock, self.bind_addr)
        except OSError:
            sock.close()
            raise
        self.bind_addr = self.resolve_real_bind_addr(sock)
        return sock


class Serving:
    """A started server and its thread; ``port`` is the bound one (an ephemeral ``:0`` too)."""

    def __init__(self, server: HttpServer, thread: threading.Thread) -> None:
        self.server, self.thread = server, thread

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.bind_addr[:2]
        return host, port

    def stop(self) -> None:
        """Stops accepting, lets running requests finish (SHUTDOWN_TIMEOUT_SECONDS), returns."""
        self.server.stop()
        self.thread.join(timeout=SHUTDOWN_TIMEOUT_SECONDS + 5)


def serve(address: tuple[str, int], app: WSGIApp, *, threads: int = THREADS) -> Serving:
    """Binds ``address`` (OSError when it cannot) and serves ``app`` on a daemon thread."""
    server = HttpServer(
        address,
        app,
        numthreads=threads,
        max=threads,
        server_name=SERVER_NAME,
        request_queue_size=LISTEN_BACKLOG,
        timeout=SOCKET_TIMEOUT_SECONDS,
        shutdown_timeout=SHUTDOWN_TIMEOUT_SECONDS,
        accepted_queue_size=ACCEPTED_QUEUE,
        accepted_queue_timeout=ACCEPTED_QUEUE_TIMEOUT_SECONDS,
    )
    server.prepare()  # binds and listens: a busy port fails here, in the caller
    thread = threading.Thread(target=server.serve, name="http", daemon=True)
    thread.start()
    return Serving(server, thread)
