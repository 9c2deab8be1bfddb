"""HTTP answers as plain data, and the Hikyo error envelope (delivery-api.yaml `Error`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

#: Fixed message per code: never derived from the request (delivery-api.yaml `Error`).
MESSAGES = {
    "bad_request": "bad request",
    "unauthenticated": "unauthenticated",
    "forbidden": "forbidden",
    "not_found": "not found",
    "conflict": "conflict",
    "limit_exceeded": "limit exceeded",
    "too_many_requests": "too many requests",
    "internal": "internal error",
}

#: The code a plain status maps to when a fault or the transport asks for it.
STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "limit_exceeded",
    429: "too_many_requests",
}


@dataclass(frozen=True)
class Reply:
    """One response. ``chunked`` drops Content-Length; ``disconnect`` sends nothing at all."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    chunked: bool = False
    disconnect: bool = False
    close: bool = False
    delay: float = 0.0

    def delayed(self, seconds: float) -> Reply:
        return replace(self, delay=seconds)


def dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def json_reply(status: int, document: Any, *headers: tuple[str, str]) -> Reply:
    return Reply(
        status,
        dumps(document),
        (("Content-Type", "application/json"), ("Cache-Control", "no-store"), *headers),
    )


def error_reply(
    status: int, code: str | None = None, detail: str | None = None, *headers: tuple[str, str]
) -> Reply:
    """A Hikyo error body; ``detail`` only where the contract allows it (400, pin 409)."""
    code = code or STATUS_CODES.get(status, "internal" if status >= 500 else "bad_request")
    error: dict[str, Any] = {"code": code, "message": MESSAGES.get(code, "error")}
    if detail is not None:
        error["detail"] = detail
    if status == 401:
        headers = (("WWW-Authenticate", 'Bearer realm="hikyo"'), *headers)
    return json_reply(status, {"error": error}, *headers)


#: The uniform answer for "missing", "not yours" and "no such route" (S3.5.1).
NOT_FOUND_BODY = b'{"error":{"code":"not_found","message":"not found"}}'


def not_found() -> Reply:
    return error_reply(404)


PROXY_NOT_FOUND_HTML = (
    b"<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n"
    b"<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
