"""Prefixed UUIDv7 identifiers, the shape of every Hikyo ID (delivery-api.yaml `ID`)."""

from __future__ import annotations

import re
import secrets
import time
import uuid

#: delivery-api.yaml `components.schemas.ID` (anchors dropped: callers use ``fullmatch``).
ID_PATTERN = re.compile(r"[a-z]{2,8}_[0-9a-fA-F-]{36}")
_PREFIX = re.compile(r"[a-z]{2,8}")


def uuid7() -> uuid.UUID:
    """A time-ordered UUIDv7 (RFC 9562); Python 3.11's ``uuid`` module has none."""
    millis = time.time_ns() // 1_000_000 & ((1 << 48) - 1)
    rand_a = secrets.randbits(12)
    rand_b = secrets.randbits(62)
    value = millis << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return uuid.UUID(int=value)


def new_id(prefix: str) -> str:
    """A fresh ID such as ``org_0198...``; ``prefix`` is 2-8 lowercase letters."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError("an ID prefix is 2 to 8 lowercase ASCII letters")
    return f"{prefix}_{uuid7()}"


def is_valid_id(value: str) -> bool:
    return ID_PATTERN.fullmatch(value) is not None
