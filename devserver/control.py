"""A small JSON control API on a loopback HTTP port, so another process can drive a
standalone devserver (``python -m devserver``), and the ``--seed`` file format.

Every call needs ``Authorization: Bearer <control token>`` (printed at start), because the
control API hands out credentials. ``POST /v1/<operation>`` with a JSON object of arguments
runs one :class:`~devserver.DevServer` method; ``GET /v1/requests``, ``/v1/status-reports``
and ``/v1/info`` read state. Answers are JSON; argument errors are 400 ``{"error": ...}``.
"""

from __future__ import annotations

import datetime as dt
import hmac
import json
import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devserver.faults import Fault
from devserver.server import DevServer

logger = logging.getLogger("devserver.control")

MAX_CONTROL_BODY = 16 * 1024 * 1024
Operation = Callable[[DevServer, dict[str, Any]], Any]


def _time(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError("timestamps need an offset (RFC 3339)")
    return moment


def _add_credential(server: DevServer, args: dict[str, Any]) -> dict[str, str]:
    token = args.pop("token", None) or "hik_" + secrets.token_urlsafe(32)
    expires_at = _time(args.pop("expires_at", None))
    credential_id = server.add_credential(token, expires_at=expires_at, **args)
    return {"credential_id": credential_id, "token": token}


def _set_fault(server: DevServer, args: dict[str, Any]) -> None:
    fault = Fault.from_dict(args.pop("fault"))
    server.set_fault(args.pop("token", None), fault, **args)


OPERATIONS: dict[str, Operation] = {
    "publish": lambda s, a: {"revision": s.publish(**a)},
    "unpublish": lambda s, a: s.unpublish(**a),
    "add_credential": _add_credential,
    "set_grants": lambda s, a: s.set_grants(**a),
    "set_expiry": lambda s, a: s.set_expiry(a["token"], _time(a.get("expires_at"))),
    "revoke": lambda s, a: s.revoke(**a),
    "set_machine_reveal": lambda s, a: s.set_machine_reveal(**a),
    "pin": lambda s, a: s.pin(**a),
    "unpin": lambda s, a: s.unpin(**a),
    "set_capabilities": lambda s, a: s.set_capabilities(a.get("capabilities")),
    "set_fault": _set_fault,
    "clear_fault": lambda s, a: s.clear_fault(a.get("token")),
    "clear_faults": lambda s, a: s.clear_faults(**a),
    "clear_requests": lambda s, a: s.clear_requests(**a),
    "clear_status_reports": lambda s, a: s.clear_status_reports(**a),
    "rotate_cursor_key": lambda s, a: s.rotate_cursor_key(**a),
}


def run_operation(server: DevServer, name: str, args: Mapping[str, Any]) -> Any:
    operation = OPERATIONS.get(name)
    if operation is None:
        raise KeyError(f"unknown operation {name!r}")
    return operation(server, dict(args))


# Seed sections, applied in this order (reveal and catalogue before credentials and pins).
SEED_SECTIONS = {
    "machine_reveal": "set_machine_reveal",
    "publish": "publish",
    "credentials": "add_credential",
    "pins": "pin",
}


def apply_seed(server: DevServer, seed: Mapping[str, Any]) -> None:
    """Preloads state. Shape::

    {"machine_reveal": [{"org", "project", "enabled"}],
     "publish": [{"org", "project", "environment", "keys": [...]}],
     "credentials": [{"token", "org", "project", "environment", "grants", "expires_at"}],
     "pins": [{"token", "revision", ...}],
     "capabilities": ["status-report"] | null}
    """
    unknown = set(seed) - set(SEED_SECTIONS) - {"capabilities"}
    if unknown:
        raise ValueError(f"unknown seed sections: {sorted(unknown)}")
    for section, operation in SEED_SECTIONS.items():
        for entry in seed.get(section, []):
            run_operation(server, operation, entry)
    if "capabilities" in seed:
        server.set_capabilities(seed["capabilities"])


def server_info(server: DevServer) -> dict[str, Any]:
    return {
        "url": server.url,
        "second_origin_url": server.second_origin_url,
        "ca_path": str(server.ca_path),
        "ca_bundle": server.ca_bundle_b64,
    }


class _ControlHandler(BaseHTTPRequestHandler):
    server: ControlServer
    protocol_version = "HTTP/1.1"
    server_version = "hikyo-devserver-control"
    sys_version = ""
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        # Control bodies carry tokens and values; log the operation name only.
        logger.debug("control %s %s", self.command, str(getattr(self, "path", "")))

    def _send(self, status: int, document: Any = None) -> None:
        body = b"" if document is None else json.dumps(document).encode()
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if status != 204:
            self.wfile.write(body)

    def _authorized(self) -> bool:
        presented = self.headers.get("Authorization", "")
        expected = f"Bearer {self.server.control_token}"
        return hmac.compare_digest(presented.encode(), expected.encode())

    def do_GET(self) -> None:
        if not self._authorized():
            return self._send(401, {"error": "control token required"})
        devserver = self.server.devserver
        path = self.path.split("?", 1)[0]
        if path == "/v1/requests":
            return self._send(200, [request.to_dict() for request in devserver.requests])
        if path == "/v1/status-reports":
            return self._send(200, devserver.status_reports)
        if path == "/v1/info":
            return self._send(200, server_info(devserver))
        return self._send(404, {"error": "no such control route"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= MAX_CONTROL_BODY:
            self.close_connection = True
            return self._send(400, {"error": "body too large"})
        raw = self.rfile.read(length) if length else b"{}"
        if not self._authorized():
            return self._send(401, {"error": "control token required"})
        path = self.path.split("?", 1)[0]
        if not path.startswith("/v1/") or path[4:] not in OPERATIONS:
            return self._send(404, {"error": "no such control operation"})
        try:
            args = json.loads(raw or b"{}")
            if not isinstance(args, dict):
                raise ValueError("arguments are a JSON object")
            result = run_operation(self.server.devserver, path[4:], args)
        except (ValueError, KeyError, TypeError) as exc:
            return self._send(400, {"error": f"{type(exc).__name__}: {exc}"})
        return self._send(200, {} if result is None else result)


class ControlServer(ThreadingHTTPServer):
    """The control API for one :class:`DevServer`, on 127.0.0.1."""

    daemon_threads = True

    def __init__(self, devserver: DevServer, control_token: str | None = None, port: int = 0):
        self.devserver = devserver
        self.control_token = control_token or secrets.token_urlsafe(24)
        self._thread: threading.Thread | None = None
        super().__init__(("127.0.0.1", port), _ControlHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> ControlServer:
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.1},
            daemon=True,
            name="devserver-control",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
