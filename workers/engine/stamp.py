"""The keyed per-target rollout stamp (S6.2), byte-compatible with the reference operator.

A stamp reveals only content equality under a per-target key derived from the stamp root; it is
never a bare hash and never the server's change token.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .framing import length_prefixed, uvarint

STAMP_ROOT_BYTES = 32
_MESSAGE_LABEL = b"hikyo-k8s-stamp-v1"
_KEY_INFO_PREFIX = "hikyo/k8s-stamp/v1|"


def target_key(root: bytes, instance_uid: str, cr_uid: str, target_name: str) -> bytes:
    """K = HKDF-SHA256(root, no salt, info = label|instance|cr|target), 32 bytes (S6.2)."""
    if len(root) != STAMP_ROOT_BYTES:
        raise ValueError(f"stamp root must be {STAMP_ROOT_BYTES} bytes, got {len(root)}")
    info = f"{_KEY_INFO_PREFIX}{instance_uid}|{cr_uid}|{target_name}".encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(root)


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
