"""Request handling, independent of the socket layer: an incoming request in, a Reply out.

Order of decisions for every endpoint (delivery-api.yaml): route (unknown route or method
is the uniform 404) -> injected fault -> request syntax (400, decided before
authentication) -> authentication (401) -> authorization (uniform 404) -> state (409/400)
-> answer.

``GET .../delivery/values`` is a devserver-only route, not part of delivery-api.yaml: the
values the bearer's delivery would carry, as one flat JSON object ``{"NAME": "value"}``
(same authentication, grants, reveal and pin rules; presence-only keys are left out). It
exists so External Secrets Operator's generic webhook provider can read the same values
the operator does, for the side-by-side benchmark (bench/eso_side_by_side.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

from devserver.cursors import MAX_CURSOR_LENGTH, CursorKeyring
from devserver.delivery import PROJECTIONS, DeliveryRequest, build_delivery
from devserver.faults import Fault, FaultBook
from devserver.ids import is_valid_id
from devserver.malformed import malformed_reply, synthetic_base, tolerated_reply
from devserver.recording import RecordedRequest, RequestLog
from devserver.replies import (
    PROXY_NOT_FOUND_HTML,
    Reply,
    error_reply,
    json_reply,
    not_found,
)
from devserver.reports import ReportInvalid, parse_body, validate_report
from devserver.state import Principal, Scope, State, StateError

logger = logging.getLogger("devserver")

TokenVerifier = Callable[[str], Principal | None]
"""Federation hook: maps a bearer the devserver did not mint to a principal, or ``None``."""

#: delivery-api.yaml `KeyName` and `DeliveryAcknowledgedKeys.maxItems`.
KEY_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
MAX_KEY_NAME_LENGTH = 128
MAX_ACKNOWLEDGED_KEYS = 64
_BEARER = re.compile(r"Bearer ([\x21-\x7e]+)", re.IGNORECASE)


@dataclass(frozen=True)
class Incoming:
    """A parsed HTTP request as the socket layer hands it over."""

    origin: str
    method: str
    target: str
    headers: Mapping[str, str]  # lower-cased names
    body: bytes = b""
    body_too_large: bool = False
    authorization_headers: int = 0


@dataclass(frozen=True)
class Route:
    kind: str  # "delivery" | "status" | "values" (devserver-only, see the module docstring)
    scope: Scope


@dataclass(frozen=True)
class DeliveryQuery:
    cursor: str | None
    projection: str
    acknowledged_keys: tuple[str, ...]


class QueryInvalid(ValueError):
    """``args[0]`` names the offending parameter; values are never echoed."""


def match_route(method: str, path: str, prefix: str) -> Route | None:
    """The endpoint for ``path`` (percent-decoded per segment), or ``None``."""
    if not path.startswith(prefix + "/"):
        return None
    segments = path[len(prefix) :].split("/")
    if len(segments) not in (10, 11) or segments[:4] != ["", "api", "v1", "orgs"]:
        return None
    if segments[5] != "projects" or segments[7] != "environments" or segments[9] != "delivery":
        return None
    org, project, environment = (unquote(s, errors="strict") for s in segments[4:9:2])
    if not (org and project and environment):
        return None
    if len(segments) == 10:
        return Route("delivery", (org, project, environment)) if method == "GET" else None
    if segments[10] == "status" and method == "POST":
        return Route("status", (org, project, environment))
    if segments[10] == "values" and method == "GET":
        return Route("values", (org, project, environment))
    return None


def parse_delivery_query(pairs: list[tuple[str, str]]) -> DeliveryQuery:
    """S3.3 parameters; unknown parameters are ignored."""
    seen: dict[str, str] = {}
    for name, value in pairs:
        if name in ("cursor", "projection", "acknowledged_keys"):
            if name in seen:
                raise QueryInvalid(f"{name}: given more than once")
            seen[name] = value
    cursor = seen.get("cursor")
    if cursor is not None and len(cursor) > MAX_CURSOR_LENGTH:
        raise QueryInvalid(f"cursor: longer than {MAX_CURSOR_LENGTH} characters")
    projection = seen.get("projection", "full")
    if projection not in PROJECTIONS:
        raise QueryInvalid("projection: must be full or config-only")
    acknowledged: tuple[str, ...] = ()
    if "acknowledged_keys" in seen:
        raw = seen["acknowledged_keys"]
        if raw == "":
            raise QueryInvalid("acknowledged_keys: empty; omit the parameter instead")
        names = tuple(raw.split(","))
        if len(names) > MAX_ACKNOWLEDGED_KEYS:
            raise QueryInvalid(f"acknowledged_keys: more than {MAX_ACKNOWLEDGED_KEYS} names")
        for index, name in enumerate(names):
            if len(name) > MAX_KEY_NAME_LENGTH or not KEY_NAME.fullmatch(name):
                raise QueryInvalid(f"acknowledged_keys[{index}]: not a key name")
        acknowledged = names
    return DeliveryQuery(cursor, projection, acknowledged)


def bearer_token(incoming: Incoming) -> str | None:
    """The bearer of a single well-formed ``Authorization: Bearer`` header, else ``None``."""
    if incoming.authorization_headers != 1:
        return None
    match = _BEARER.fullmatch(incoming.headers.get("authorization", "").strip())
    return match.group(1) if match else None


class DeliveryApp:
    """The Hikyo delivery API as the devserver implements it."""

    def __init__(
        self,
        state: State,
        keyring: CursorKeyring,
        faults: FaultBook,
        log: RequestLog,
        *,
        path_prefix: str,
        strict_ids: bool,
        clock: Callable[[], dt.datetime],
        second_origin: Callable[[], str],
    ) -> None:
        self.state = state
        self.keyring = keyring
        self.faults = faults
        self.log = log
        self.path_prefix = path_prefix
        self.strict_ids = strict_ids
        self.clock = clock
        self.second_origin = second_origin
        self.token_verifier: TokenVerifier | None = None

    # -- entry point -------------------------------------------------------------------

    def handle(self, incoming: Incoming) -> Reply:
        path, _, raw_query = incoming.target.partition("?")
        try:
            route = match_route(incoming.method, path, self.path_prefix)
        except UnicodeDecodeError:
            route = None
        pairs = parse_qsl(raw_query, keep_blank_values=True)
        token = bearer_token(incoming)
        principal = self.authenticate(token)
        fault = None
        if incoming.origin == "main":
            fault = self.faults.take(token, route.kind if route else None)
        if fault is not None:
            reply = self._faulted(fault, incoming, route, pairs, principal)
        else:
            reply = self._serve(incoming, route, pairs, principal)
        self._record(incoming, path, pairs, principal, reply)
        return reply

    def authenticate(self, token: str | None) -> Principal | None:
        """A minted credential, else whatever the federation hook accepts (S2.3)."""
        if token is None:
            return None
        principal = self.state.authenticate(token)
        if principal is None and self.token_verifier is not None:
            try:
                principal = self.token_verifier(token)
            except Exception as exc:  # a broken verifier must look like a rejected token
                # Type only: verifier errors may quote the token they choke on.
                logger.warning("token verifier failed (%s)", type(exc).__name__)
                principal = None
            if principal and principal.expires_at and principal.expires_at <= self.clock():
                principal = None
        return principal

    def _record(
        self,
        incoming: Incoming,
        path: str,
        pairs: list[tuple[str, str]],
        principal: Principal | None,
        reply: Reply,
    ) -> None:
        # The cursor is dropped here, before anything is kept (S0.4.2).
        query = {name: value for name, value in pairs if name != "cursor"}
        acknowledged = query.get("acknowledged_keys")
        self.log.record(
            RecordedRequest(
                origin=incoming.origin,
                method=incoming.method,
                path=path,
                query=query,
                cursor_present=any(name == "cursor" for name, _ in pairs),
                authorization_present=incoming.authorization_headers > 0,
                credential_id=principal.credential_id if principal else None,
                status=reply.status,
                acknowledged_keys=tuple(acknowledged.split(",")) if acknowledged else (),
            )
        )

    # -- normal answers ----------------------------------------------------------------

    def _serve(
        self,
        incoming: Incoming,
        route: Route | None,
        pairs: list[tuple[str, str]],
        principal: Principal | None,
    ) -> Reply:
        if route is None:
            return not_found()
        if self.strict_ids:
            for label, value in zip(("org", "project", "environment"), route.scope, strict=True):
                if not is_valid_id(value):
                    return error_reply(400, detail=f"path: malformed {label} ID")
        if route.kind == "delivery":
            try:
                query = parse_delivery_query(pairs)
            except QueryInvalid as exc:
                return error_reply(400, detail=str(exc))
            return self._deliver(route.scope, query, principal)
        if route.kind == "values":
            return self._values(route.scope, principal)
        return self._report(incoming, route.scope, principal)

    def _delivery_body(
        self,
        scope: Scope,
        query: DeliveryQuery,
        principal: Principal | None,
        *,
        ignore_cursor: bool = False,
    ) -> dict[str, Any] | Reply:
        if principal is None:
            return error_reply(401)
        if principal.scope != scope or "read" not in principal.grants:
            return not_found()
        try:
            snapshot = self.state.served_snapshot(principal)
        except StateError as exc:
            return error_reply(exc.status, detail=exc.detail)
        request = DeliveryRequest(
            principal=principal,
            snapshot=snapshot,
            projection=query.projection,
            presented_cursor=query.cursor,
            capabilities=self.state.capabilities,
            now=self.clock(),
        )
        return build_delivery(request, self.keyring, ignore_cursor=ignore_cursor)

    def _deliver(self, scope: Scope, query: DeliveryQuery, principal: Principal | None) -> Reply:
        """fetchDelivery: 200, or 401 / uniform 404 / 409 / 400 (pinned refusal)."""
        body = self._delivery_body(scope, query, principal)
        return body if isinstance(body, Reply) else json_reply(200, body)

    def _values(self, scope: Scope, principal: Principal | None) -> Reply:
        """The devserver-only values route: 200 ``{"NAME": "value"}``, or what a full
        delivery without a cursor would refuse with (401 / uniform 404 / 409 / 400)."""
        body = self._delivery_body(scope, DeliveryQuery(None, "full", ()), principal)
        if isinstance(body, Reply):
            return body
        values = {key["name"]: key["value"] for key in body["keys"] if "value" in key}
        return json_reply(200, values)

    def _report(self, incoming: Incoming, scope: Scope, principal: Principal | None) -> Reply:
        """reportDeliveryStatus (S7.3): 204, or 400 / 401 / uniform 404."""
        capabilities = self.state.capabilities or ()
        if "status-report" not in capabilities:
            return not_found()  # a server that does not advertise it has no such route
        content_type = incoming.headers.get("content-type", "")
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            return error_reply(400, detail="content-type: application/json required")
        if incoming.body_too_large:
            return error_reply(400, detail="body: too large")
        try:
            report = validate_report(parse_body(incoming.body))
        except ReportInvalid as exc:
            return error_reply(400, detail=str(exc))
        if principal is None:
            return error_reply(401)
        if principal.scope != scope or "report-delivery-status" not in principal.grants:
            return not_found()
        self.log.record_report(report)
        return Reply(204)

    # -- faults ------------------------------------------------------------------------

    def _base_body(
        self, route: Route | None, pairs: list[tuple[str, str]], principal: Principal | None
    ) -> dict[str, Any]:
        """The full delivery the caller would get, for faults that bend a real answer."""
        if route is not None:
            try:
                query = parse_delivery_query(pairs)
            except QueryInvalid:
                query = DeliveryQuery(None, "full", ())
            body = self._delivery_body(route.scope, query, principal, ignore_cursor=True)
            if isinstance(body, dict):
                return body
        return synthetic_base()

    def _faulted(
        self,
        fault: Fault,
        incoming: Incoming,
        route: Route | None,
        pairs: list[tuple[str, str]],
        principal: Principal | None,
    ) -> Reply:
        kind = fault.kind
        if kind == "slow":
            return self._serve(incoming, route, pairs, principal).delayed(fault.seconds)
        if kind == "disconnect":
            return Reply(0, disconnect=True)
        if kind == "redirect":
            location = self.second_origin() + incoming.target
            return Reply(fault.http_status or 302, b"", (("Location", location),))
        if kind == "rate_limited":
            headers = () if fault.retry_after is None else (("Retry-After", fault.retry_after),)
            return error_reply(429, None, None, *headers)
        if kind == "unauthorized":
            return error_reply(401)
        if kind == "not_found":
            if fault.hikyo_body:
                return not_found()
            return Reply(404, PROXY_NOT_FOUND_HTML, (("Content-Type", "text/html"),))
        if kind == "status":
            status = fault.http_status or 500
            detail = "injected fault" if status == 400 else None
            if status == 429:
                return error_reply(429, fault.code, None, ("Retry-After", "1"))
            return error_reply(status, fault.code, detail)
        base = self._base_body(route, pairs, principal)
        if kind == "malformed":
            return malformed_reply(fault.variant or "", base)
        if kind == "tolerated":
            return tolerated_reply(fault.variant or "", base)
        if kind == "claim_current":
            return json_reply(200, dict(base, current=True, keys=[]))
        raise AssertionError(f"unhandled fault kind {kind}")
