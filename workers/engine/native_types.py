"""Native Secret types (S4.7): required destinations and content checks."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

OPAQUE = "Opaque"
TLS = "kubernetes.io/tls"
DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CFG = "kubernetes.io/dockercfg"
BASIC_AUTH = "kubernetes.io/basic-auth"
SSH_AUTH = "kubernetes.io/ssh-auth"

KNOWN_TYPES: tuple[str, ...] = (OPAQUE, TLS, DOCKER_CONFIG_JSON, DOCKER_CFG, BASIC_AUTH, SSH_AUTH)

_REQUIRED: dict[str, tuple[str, ...]] = {
    TLS: ("tls.crt", "tls.key"),
    DOCKER_CONFIG_JSON: (".dockerconfigjson",),
    DOCKER_CFG: (".dockercfg",),
    SSH_AUTH: ("ssh-privatekey",),
}
_BASIC_AUTH_KEYS = ("username", "password")
_JSON_OBJECT_KEYS = {DOCKER_CONFIG_JSON: ".dockerconfigjson", DOCKER_CFG: ".dockercfg"}


def unmapped_required(secret_type: str, mapped: Collection[str]) -> list[str]:
    """R10: required destinations the mapping lacks (basic-auth: at least one of its two)."""
    if secret_type == BASIC_AUTH:
        return [] if any(k in mapped for k in _BASIC_AUTH_KEYS) else ["username or password"]
    return [key for key in _REQUIRED.get(secret_type, ()) if key not in mapped]


def required_destinations(secret_type: str, mapped: Collection[str]) -> tuple[str, ...]:
    """Destinations the converged data must hold (basic-auth: each mapped one of the two)."""
    if secret_type == BASIC_AUTH:
        return tuple(k for k in _BASIC_AUTH_KEYS if k in mapped)
    return _REQUIRED.get(secret_type, ())


def invalid_content(secret_type: str, data: Mapping[str, bytes]) -> str | None:
    """S4.7.3: the destination whose content the type forbids, or None. Never the value."""
    key = _JSON_OBJECT_KEYS.get(secret_type)
    if key is None or key not in data:
        return None
    try:
        parsed = json.loads(data[key].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return key
    return None if isinstance(parsed, dict) else key
