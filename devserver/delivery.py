"""The delivery answer (delivery-api.yaml `DeliveryResponse`), built from plain data.

Per key (fetchDelivery description): a ``config`` key carries its plaintext under ``read``;
a ``secret`` key carries it under ``read`` plus ``reveal`` (``reveal-history`` for a pinned,
no-longer-current revision) and only when the project opted in to machine reveal; otherwise
it is presence-only. ``config-only`` drops secret keys from the answer and from the manifest.
Keys whose presence is not ``set`` are catalogue rules and never carry a value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from devserver.cursors import CursorBinding, CursorKeyring
from devserver.state import Principal, PublishedKey, ServedSnapshot

PROJECTIONS = ("full", "config-only")
SNAPSHOT_LIFETIME = dt.timedelta(minutes=5)


def rfc3339(moment: dt.datetime) -> str:
    """UTC, microseconds, ``Z`` (delivery-api.yaml `Timestamp`)."""
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class DeliveryRequest:
    principal: Principal
    snapshot: ServedSnapshot
    projection: str
    presented_cursor: str | None
    capabilities: tuple[str, ...] | None
    now: dt.datetime


def _projected(keys: Sequence[PublishedKey], projection: str) -> list[PublishedKey]:
    if projection == "config-only":
        return [key for key in keys if key.classification != "secret"]
    return list(keys)


def _delivers_value(key: PublishedKey, request: DeliveryRequest) -> bool:
    if key.presence != "set":
        return False
    if key.classification == "config":
        return True
    needed = "reveal-history" if request.snapshot.historical else "reveal"
    return request.snapshot.machine_reveal and needed in request.principal.grants


def _wire_key(key: PublishedKey, delivered: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "key_id": key.key_id,
        "name": key.name,
        "classification": key.classification,
        "presence": key.presence,
    }
    if delivered:
        entry["value"] = key.value
    return entry


def build_delivery(
    request: DeliveryRequest, keyring: CursorKeyring, *, ignore_cursor: bool = False
) -> dict[str, Any]:
    """The 200 body; ``current`` when the presented cursor equals the one computed now."""
    principal = request.principal
    keys = _projected(request.snapshot.revision.keys, request.projection)
    delivered = [(key, _delivers_value(key, request)) for key in keys]
    change_token = keyring.change_token(keys)
    binding = CursorBinding(
        change_token=change_token,
        served=tuple(
            (key.name, key.classification, key.presence, key.value if ok else None)
            for key, ok in delivered
        ),
        projection=request.projection,
        credential_id=principal.credential_id,
        grants=principal.grants,
        machine_reveal=request.snapshot.machine_reveal,
        pin=principal.pin,
    )
    cursor = keyring.cursor(binding)
    current = not ignore_cursor and keyring.matches(request.presented_cursor, cursor)
    body: dict[str, Any] = {
        "credential_id": principal.credential_id,
        "current": current,
        "cursor": cursor,
        "change_token": change_token,
        "schema_revision": request.snapshot.revision.schema_revision,
        "pin_expired": bool(principal.pin and principal.pin.expired),
        "keys": [] if current else [_wire_key(key, ok) for key, ok in delivered],
        "issued_at": rfc3339(request.now),
        "snapshot_expires_at": rfc3339(request.now + SNAPSHOT_LIFETIME),
    }
    if principal.expires_at is not None:
        body["credential_expires_at"] = rfc3339(principal.expires_at)
    if principal.pin is not None:
        body["pinned_revision"] = principal.pin.revision
    if request.capabilities is not None:
        body["capabilities"] = list(request.capabilities)
    return body
