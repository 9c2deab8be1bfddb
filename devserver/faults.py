"""Injected faults: what a test asks the server to do instead of (or around) its answer.

A fault is attached to a bearer token (or to every request, ``token=None``) on the main
origin, optionally for a number of requests. It applies to deliveries and status reports
alike, and to any other route the token is presented on.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from devserver.malformed import MALFORMED_KINDS, TOLERATED_KINDS
from devserver.state import token_digest

FAULT_KINDS = (
    "status",
    "rate_limited",
    "unauthorized",
    "not_found",
    "malformed",
    "tolerated",
    "claim_current",
    "slow",
    "redirect",
    "disconnect",
)
ROUTES = ("delivery", "status")


@dataclass(frozen=True)
class Fault:
    """One injected behaviour. Build it with the class methods, not the constructor."""

    kind: str
    http_status: int | None = None
    code: str | None = None
    retry_after: str | None = None
    hikyo_body: bool = True
    variant: str | None = None
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}")
        if self.kind == "malformed" and self.variant not in MALFORMED_KINDS:
            raise ValueError(f"unknown malformed kind {self.variant!r}; see MALFORMED_KINDS")
        if self.kind == "tolerated" and self.variant not in TOLERATED_KINDS:
            raise ValueError(f"unknown tolerated kind {self.variant!r}; see TOLERATED_KINDS")
        if self.kind == "redirect" and self.http_status not in (301, 302, 303, 307, 308):
            raise ValueError("a redirect status is one of 301, 302, 303, 307, 308")
        if self.kind == "status" and not (
            isinstance(self.http_status, int) and 200 <= self.http_status <= 599
        ):
            raise ValueError("a fault status is an HTTP status from 200 to 599")

    @classmethod
    def status(cls, status: int, code: str | None = None) -> Fault:
        """That status with a Hikyo error body; ``code`` overrides the usual code for it
        (e.g. ``Fault.status(409, code="limit_exceeded")`` for "any other 409", S3.5)."""
        return cls("status", http_status=status, code=code)

    @classmethod
    def rate_limited(cls, retry_after: str | None = "2") -> Fault:
        """429 ``too_many_requests``; ``retry_after=None`` omits the header (S3.5, S7.5)."""
        return cls("rate_limited", http_status=429, retry_after=retry_after)

    @classmethod
    def unauthorized(cls) -> Fault:
        """401 ``unauthenticated``, as for a dead credential (S3.5)."""
        return cls("unauthorized", http_status=401)

    @classmethod
    def not_found(cls, hikyo_body: bool = True) -> Fault:
        """404: the uniform Hikyo body (authoritative, S3.5.1) or a proxy's HTML page."""
        return cls("not_found", http_status=404, hikyo_body=hikyo_body)

    @classmethod
    def malformed(cls, kind: str) -> Fault:
        """A 200 that breaks one S3.4 rule; ``kind`` is one of ``MALFORMED_KINDS``."""
        return cls("malformed", http_status=200, variant=kind)

    @classmethod
    def tolerated(cls, kind: str) -> Fault:
        """A valid but unusual 200; ``kind`` is one of ``TOLERATED_KINDS``."""
        return cls("tolerated", http_status=200, variant=kind)

    @classmethod
    def claim_current(cls) -> Fault:
        """200 ``current: true`` whatever the cursor: a protocol violation when no cursor
        was presented (S3.5, third row)."""
        return cls("claim_current", http_status=200)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """The normal answer, sent after ``seconds`` (other connections are unaffected)."""
        return cls("slow", seconds=float(seconds))

    @classmethod
    def redirect(cls, status: int = 302) -> Fault:
        """A redirect to the second origin, same path and query (S3.2: never followed)."""
        return cls("redirect", http_status=status)

    @classmethod
    def disconnect(cls) -> Fault:
        """Close the connection without answering (a transport error)."""
        return cls("disconnect")

    def to_dict(self) -> dict[str, Any]:
        return {name: value for name, value in asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Fault:
        """Inverse of :meth:`to_dict`; also accepts the ``status``/``kind`` shorthand used
        by the control API (``{"kind": "status", "status": 503}``)."""
        data = dict(data)
        if "status" in data and "http_status" not in data:
            data["http_status"] = data.pop("status")
        if data.get("kind") in ("malformed", "tolerated") and "variant" not in data:
            data["variant"] = data.pop("malformed", None) or data.pop("tolerated", None)
        return cls(**data)


@dataclass
class _Armed:
    fault: Fault
    remaining: int | None
    route: str | None


class FaultBook:
    """Faults per token digest (``None`` = every request), consumed per matching request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: dict[str | None, _Armed] = {}

    def arm(
        self, token: str | None, fault: Fault, times: int | None = None, route: str | None = None
    ) -> None:
        if times is not None and times < 1:
            raise ValueError("times is a positive count or None (until cleared)")
        if route is not None and route not in ROUTES:
            raise ValueError(f"route is one of {ROUTES} or None (all)")
        digest = None if token is None else token_digest(token)
        with self._lock:
            self._armed[digest] = _Armed(fault, times, route)

    def clear(self, token: str | None) -> None:
        with self._lock:
            self._armed.pop(None if token is None else token_digest(token), None)

    def clear_all(self) -> None:
        with self._lock:
            self._armed.clear()

    def take(self, token: str | None, route: str | None) -> Fault | None:
        """The fault for this request, counting it against ``times``; token faults win."""
        digests = ([token_digest(token)] if token is not None else []) + [None]
        with self._lock:
            for digest in digests:
                armed = self._armed.get(digest)
                if armed is None or (armed.route is not None and armed.route != route):
                    continue
                if armed.remaining is not None:
                    armed.remaining -= 1
                    if armed.remaining == 0:
                        del self._armed[digest]
                return armed.fault
        return None
