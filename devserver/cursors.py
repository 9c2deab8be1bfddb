"""Change tokens and cursors: keyed digests the server recomputes and compares (S4.3).

A cursor is an HMAC, under a per-server secret, over everything a delivery depends on:
the change token (the manifest of the projection), the content actually served to this
caller (names, classifications, presences, delivered values), the projection, the
credential id, its grants, the project's machine-reveal opt-in and the pin state. Any change
to one of them yields a different cursor, hence a full delivery; nothing about the content
can be read back from it. Rotating the key is the server-side "token-key rotation" of S4.3.5.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from devserver.state import Pin, PublishedKey

CURSOR_PREFIX = "c1."
#: delivery-api.yaml `DeliveryCursor.maxLength`.
MAX_CURSOR_LENGTH = 128


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _canonical(label: str, payload: Any) -> bytes:
    # JSON of nested lists is injective for our inputs; the label separates the two uses.
    return json.dumps([label, payload], separators=(",", ":"), ensure_ascii=True).encode()


@dataclass(frozen=True)
class CursorBinding:
    """Everything a cursor's validity depends on."""

    change_token: str
    served: tuple[tuple[str, str, str, str | None], ...]
    projection: str
    credential_id: str
    grants: frozenset[str]
    machine_reveal: bool
    pin: Pin | None

    def payload(self) -> list[Any]:
        pin = None if self.pin is None else [self.pin.revision, self.pin.expired]
        return [
            self.change_token,
            [list(entry) for entry in self.served],
            self.projection,
            self.credential_id,
            sorted(self.grants),
            self.machine_reveal,
            pin,
        ]


class CursorKeyring:
    """The server secret behind change tokens and cursors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key = secrets.token_bytes(32)

    def rotate(self) -> None:
        """Every cursor issued so far stops matching (S4.3.5)."""
        with self._lock:
            self._key = secrets.token_bytes(32)

    def _mac(self, data: bytes) -> bytes:
        with self._lock:
            key = self._key
        return hmac.new(key, data, hashlib.sha256).digest()

    def change_token(self, manifest: Sequence[PublishedKey]) -> str:
        """Keyed ``v1:`` manifest token over the keys of the projection (values digested)."""
        entries = [
            [
                key.name,
                key.classification,
                key.presence,
                None if key.value is None else hashlib.sha256(key.value.encode()).hexdigest(),
            ]
            for key in manifest
        ]
        return "v1:" + _b64url(self._mac(_canonical("change-token", entries)))

    def cursor(self, binding: CursorBinding) -> str:
        cursor = CURSOR_PREFIX + _b64url(self._mac(_canonical("cursor", binding.payload())))
        assert len(cursor) <= MAX_CURSOR_LENGTH
        return cursor

    @staticmethod
    def matches(presented: str | None, expected: str) -> bool:
        if presented is None:
            return False
        return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))
