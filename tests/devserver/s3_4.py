"""A reference S3.4 decoder, used to prove the devserver's malformed and tolerated bodies
break (or keep) exactly the rules they claim to. It is test code, not the operator's."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_BODY = 8 * 1024 * 1024
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")
_CLASSIFICATIONS = {"secret", "config"}
_PRESENCES = {"required", "forbidden", "optional", "set"}


class Invalid(ValueError):
    pass


def _bool(value: Any) -> bool:
    return isinstance(value, bool)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def decode(raw: bytes) -> dict[str, Any]:
    """Returns the decoded answer plus a ``capabilities_set``; raises :class:`Invalid`."""
    if len(raw) > MAX_BODY:  # S3.4.1
        raise Invalid("oversize")
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Invalid("not json") from exc
    if not isinstance(body, dict):
        raise Invalid("not an object")
    # S3.4.2
    if not _bool(body.get("current")):
        raise Invalid("current")
    if not isinstance(body.get("cursor"), str) or len(body["cursor"]) > 128:
        raise Invalid("cursor")
    if not isinstance(body.get("change_token"), str):
        raise Invalid("change_token")
    if not _int(body.get("schema_revision")) or body["schema_revision"] < 0:
        raise Invalid("schema_revision")
    if not _bool(body.get("pin_expired")):
        raise Invalid("pin_expired")
    if not isinstance(body.get("keys"), list):
        raise Invalid("keys")
    names: set[str] = set()
    for key in body["keys"]:  # S3.4.3
        if not isinstance(key, dict):
            raise Invalid("key")
        name = key.get("name")
        if not isinstance(name, str) or not 0 < len(name) <= 256 or name in names:
            raise Invalid("key name")
        names.add(name)
        if key.get("classification") not in _CLASSIFICATIONS:
            raise Invalid("classification")
        if key.get("presence") not in _PRESENCES:
            raise Invalid("presence")
        if "value" in key:
            if not isinstance(key["value"], str):
                raise Invalid("value")
            if key["presence"] != "set":  # S3.4.5
                raise Invalid("value on unset presence")
    if body["current"] and body["keys"]:  # S3.4.4
        raise Invalid("current with keys")
    # S3.4.6
    if "credential_expires_at" in body:
        value = body["credential_expires_at"]
        if not isinstance(value, str) or not _RFC3339.fullmatch(value):
            raise Invalid("credential_expires_at")
    pinned = body.get("pinned_revision", 1)
    if not _int(pinned) or pinned < 1:
        raise Invalid("pinned_revision")
    capabilities = body.get("capabilities")
    if isinstance(capabilities, list) and all(isinstance(c, str) for c in capabilities):
        body["capabilities_set"] = set(capabilities)
    else:
        body["capabilities_set"] = None
    return body
