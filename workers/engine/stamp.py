"""The keyed per-target rollout stamp (S6.2), byte-compatible with the reference operator.

A stamp reveals only content equality under a per-target key derived from the stamp root; it is
never a bare hash and never the server's change token.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from .framing import length_prefixed, uvarint

STAMP_ROOT_BYTES = 32
_MESSAGE_LABEL = b"hikyo-k8s-stamp-v1"
_KEY_INFO_PREFIX = "hikyo/k8s-stamp/v1|"


def target_key(root: bytes, instance_uid: str, cr_uid: str, target_name: str) -> bytes:
    """K = HKDF-SHA256(root, no salt, info = label|instance|cr|target), 32 bytes (S6.2)."""
    if len(root) != STAMP_ROOT_BYTES:
        raise ValueError(f"stamp root must be {STAMP_ROOT_BYTES} bytes, got {len(root)}")
    info = f"{_KEY_INFO_PREFIX}{instance_uid}|{cr_uid}|{target_name}".encode()
    return hkdf_sha256(root, info, 32)


def hkdf_sha256(secret: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869 HKDF-SHA256 without salt (a zero-filled one), by hmac alone: the
    ``cryptography`` package would cost the operator ~6 MiB of RSS for this one derivation
    (issue 13, S9.6)."""
    if not 0 < length <= 255 * hashlib.sha256().digest_size:
        raise ValueError(f"HKDF-SHA256 cannot derive {length} bytes")
    prk = hmac.new(bytes(hashlib.sha256().digest_size), secret, hashlib.sha256).digest()
    okm, block, counter = b"", b"", 1
    while len(okm) < length:
        block = hmac.new(prk, block + info + bytes([counter]), hashlib.sha256).digest()
        okm += block
        counter += 1
    return okm[:length]


def compute_stamp(key: bytes, pairs: Mapping[str, bytes]) -> str:
    """``"v1:"`` + hex of the first 16 bytes of HMAC-SHA256(K, canonical message)."""
    items = sorted((name.encode(), value) for name, value in pairs.items())
    message = bytearray(length_prefixed(_MESSAGE_LABEL))
    message += uvarint(len(items))
    for name, value in items:
        message += length_prefixed(name)
        message += length_prefixed(value)
    return "v1:" + hmac.new(key, bytes(message), hashlib.sha256).digest()[:16].hex()


def empty_content_stamp(key: bytes) -> str:
    """The stamp of no content (n = 0), written when authorization is withdrawn (S4.10)."""
    return compute_stamp(key, {})
