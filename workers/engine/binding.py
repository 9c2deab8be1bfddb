"""Cursor eligibility and binding (S4.3): when the stored cursor may be presented."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .framing import length_prefixed, uvarint
from .spec import SecretSpec

_LABEL = "hikyo/k8s-cursor-binding/v1"
_STAMP_KEY_VERSION = "v1"


@dataclass(frozen=True)
class CredentialIdentity:
    """The credential object whose identity feeds the binding (S2.4): rotating it forces a full
    fetch."""

    uid: str
    resource_version: str


def binding_digest(spec: SecretSpec, credential: CredentialIdentity, instance_uid: str) -> str:
    """S4.3.2: SHA-256 hex over an injective encoding of everything the cursor depends on."""
    fields: list[str] = [
        _LABEL,
        credential.uid,
        credential.resource_version,
        spec.org,
        spec.project,
        spec.environment,
        spec.projection,
        spec.target_name,
        instance_uid,
        _STAMP_KEY_VERSION,
        "allKeys=true" if spec.all_keys else "allKeys=false",
        spec.target_type,
    ]
    pairs = sorted((entry.secret_key, entry.key) for entry in spec.mapping)
    acknowledged = sorted(spec.acknowledged)
    encoded = bytearray()
    for text in fields:
        encoded += length_prefixed(text.encode())
    encoded += uvarint(len(pairs))
    for secret_key, key in pairs:
        encoded += length_prefixed(secret_key.encode()) + length_prefixed(key.encode())
    encoded += uvarint(len(acknowledged))
    for name in acknowledged:
        encoded += length_prefixed(name.encode())
    encoded += _shape(spec)
    return hashlib.sha256(bytes(encoded)).hexdigest()


def _shape(spec: SecretSpec) -> bytes:
    """S11: a template or format edit changes the Secret's bytes with the same sources, so it
    must not let a cursor answer "current" (the spec's S4.3.2 list predates S11; a CR without
    either encodes nothing here, so its binding is unchanged)."""
    if not spec.templates and spec.file_format is None:
        return b""
    encoded = bytearray(length_prefixed(b"shape/v1"))
    encoded += length_prefixed(b"merge" if spec.template_merge else b"replace")
    encoded += uvarint(len(spec.templates))
    for key, text in spec.templates:
        encoded += length_prefixed(key.encode()) + length_prefixed(text.encode())
    for text in (spec.file_format or "", spec.format_key or ""):
        encoded += length_prefixed(text.encode())
    return bytes(encoded)


def cursor_to_present(
    *,
    stored_cursor: str | None,
    target_controlled: bool,
    target_stamp: str | None,
    stored_stamp: str | None,
    binding: str,
    stored_binding: str | None,
    forced_full: bool,
) -> str | None:
    """S4.3.1: the cursor only when all five conditions hold, else None (cursor-less fetch)."""
    if not stored_cursor or forced_full or not target_controlled:
        return None
    if target_stamp is None or target_stamp != stored_stamp:
        return None
    if binding != stored_binding:
        return None
    return stored_cursor
