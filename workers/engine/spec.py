"""A HikyoSecret as plain data, re-validated at runtime (S1.3.9).

CRs admitted under an older CRD may break rules the current CRD enforces, so the reconcile
re-checks them before any fetch. Acknowledgement problems are left to the loader-control
pre-check (S4.6.2); everything else here is an R3 failure.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from .durations import InvalidDuration, resync_seconds
from .native_types import KNOWN_TYPES, OPAQUE

KEY_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
SCOPE_ID = re.compile(r"^[a-z]{2,8}_[0-9a-fA-F-]{36}$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
MAX_MAPPING = 256
PROJECTIONS = ("full", "config-only")
CREATION_POLICIES = ("Owner", "Orphan", "Merge")
FILE_FORMATS = ("dotenv", "json", "yaml", "properties")  # S11.3
MERGE_POLICIES = ("Replace", "Merge")  # S11.1 template.mergePolicy
MAX_TEMPLATES = 64
MAX_TEMPLATE_BYTES = 16 * 1024
MAX_TEMPLATES_BYTES = 64 * 1024


class SpecInvalid(ValueError):
    """The CR breaks an admission rule it was admitted without; the message names the field."""


def is_secret_data_key(name: str) -> bool:
    """Kubernetes Secret data-key grammar (S4.5, S1.3.11)."""
    return (
        0 < len(name) <= 253
        and bool(_DATA_KEY.match(name))
        and name not in (".", "..")
        and not name.startswith("..")
    )


@dataclass(frozen=True)
class MappingEntry:
    key: str
    secret_key: str  # effective: secretKey, else key (S1.2)


@dataclass(frozen=True)
class SecretSpec:
    namespace: str
    name: str
    uid: str
    generation: int
    instance_name: str
    credential_secret: str | None
    credential_service_account: str | None
    org: str
    project: str
    environment: str
    mapping: tuple[MappingEntry, ...]
    all_keys: bool
    target_name: str
    target_type: str
    creation_policy: str
    projection: str
    acknowledged: tuple[str, ...]
    resync_seconds: float
    # S11.1: destination key -> template text, sorted by key; empty without a template
    templates: tuple[tuple[str, str], ...] = ()
    template_merge: bool = False  # template.mergePolicy Merge: assembled keys stay too
    file_format: str | None = None
    format_key: str | None = None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


# One reconcile asks for the spec of the same CR dict about twenty times (each step, each
# read); the dicts the gateway reads are never changed in place, so the last one parsed in
# this thread answers again (issue 13: 3 % of the embedded operator's CPU).
_last_parsed = threading.local()


def parse_spec(cr: dict[str, Any]) -> SecretSpec:
    """Builds the SecretSpec of a CR or raises SpecInvalid naming the first broken rule."""
    last = getattr(_last_parsed, "pair", None)
    if last is not None and last[0] is cr:
        return last[1]
    parsed = _parse_spec(cr)
    _last_parsed.pair = (cr, parsed)
    return parsed


def _parse_spec(cr: dict[str, Any]) -> SecretSpec:
    metadata = cr.get("metadata") or {}
    spec = cr.get("spec") or {}
    auth = spec.get("auth") or {}
    scope = spec.get("scope") or {}
    target = spec.get("target") or {}

    try:
        interval = resync_seconds(spec.get("resyncInterval"))
    except InvalidDuration as error:
        raise SpecInvalid(f"invalid resyncInterval: {error}") from error  # S4.16

    secret_ref = _text((auth.get("secretRef") or {}).get("name")) or None
    sa_ref = _text((auth.get("serviceAccountRef") or {}).get("name")) or None
    if (secret_ref is None) == (sa_ref is None):
        raise SpecInvalid(
            "invalid spec: auth must set exactly one of secretRef or serviceAccountRef"
        )

    instance_name = _text((spec.get("instanceRef") or {}).get("name"))
    if not instance_name:
        raise SpecInvalid("invalid spec: instanceRef.name is required")

    for field in ("org", "project", "environment"):
        if not SCOPE_ID.match(_text(scope.get(field))):
            raise SpecInvalid(f"invalid spec: scope.{field} is not a Hikyo ID")

    target_name = _text(target.get("name"))
    if not DNS_LABEL.match(target_name) or len(target_name) > 63:
        raise SpecInvalid("invalid spec: target.name must be a DNS label of at most 63 characters")
    target_type = target.get("type") or OPAQUE
    if target_type not in KNOWN_TYPES:
        raise SpecInvalid(f"invalid spec: target.type {target_type!r} is not supported")
    creation_policy = target.get("creationPolicy") or "Owner"
    if creation_policy not in CREATION_POLICIES:
        raise SpecInvalid("invalid spec: target.creationPolicy must be Owner, Orphan or Merge")
    projection = spec.get("projection") or "full"
    if projection not in PROJECTIONS:
        raise SpecInvalid("invalid spec: projection must be full or config-only")

    all_keys = spec.get("allKeys") is True
    mapping = _parse_mapping(spec.get("mapping") or [])
    if all_keys == bool(mapping):
        raise SpecInvalid("invalid spec: set exactly one of allKeys=true or a non-empty mapping")
    if all_keys and target_type != OPAQUE:
        raise SpecInvalid("invalid spec: allKeys=true requires target.type Opaque")

    templates, template_merge = _parse_template(target.get("template"))
    file_format, format_key = _parse_format(target)
    if templates and file_format:  # S1.3.12
        raise SpecInvalid("invalid spec: target.template and target.format exclude each other")
    if (file_format or creation_policy == "Merge") and target_type != OPAQUE:  # S1.3.12, .14
        what = "target.format" if file_format else "creationPolicy Merge"
        raise SpecInvalid(f"invalid spec: {what} requires target.type Opaque")

    acknowledged = spec.get("acknowledgedLoaderKeys") or []
    return SecretSpec(
        namespace=_text(metadata.get("namespace")),
        name=_text(metadata.get("name")),
        uid=_text(metadata.get("uid")),
        generation=int(metadata.get("generation") or 0),
        instance_name=instance_name,
        credential_secret=secret_ref,
        credential_service_account=sa_ref,
        org=scope["org"],
        project=scope["project"],
        environment=scope["environment"],
        mapping=mapping,
        all_keys=all_keys,
        target_name=target_name,
        target_type=target_type,
        creation_policy=creation_policy,
        projection=projection,
        acknowledged=tuple(str(name) for name in acknowledged),
        resync_seconds=interval,
        templates=templates,
        template_merge=template_merge,
        file_format=file_format,
        format_key=format_key,
    )


def _parse_template(template: Any) -> tuple[tuple[tuple[str, str], ...], bool]:
    """S11.1, S1.3.15: 1-64 entries keyed by data keys, each text <= 16 KiB, <= 64 KiB in all."""
    if template is None:
        return (), False
    template = template if isinstance(template, dict) else {}
    data = template.get("data")
    if not isinstance(data, dict) or not 1 <= len(data) <= MAX_TEMPLATES:
        raise SpecInvalid(
            f"invalid spec: target.template.data must hold 1 to {MAX_TEMPLATES} entries"
        )
    total = 0
    for key, text in data.items():
        if not is_secret_data_key(_text(key)):
            raise SpecInvalid(f"invalid spec: target.template.data key {key!r} is not a data key")
        size = len(_text(text).encode("utf-8"))
        if not isinstance(text, str) or size > MAX_TEMPLATE_BYTES:
            raise SpecInvalid(
                f"invalid spec: target.template.data[{key}] must be text of at most 16 KiB"
            )
        total += size
    if total > MAX_TEMPLATES_BYTES:
        raise SpecInvalid("invalid spec: target.template.data holds more than 64 KiB in all")
    policy = template.get("mergePolicy") or "Replace"
    if policy not in MERGE_POLICIES:
        raise SpecInvalid("invalid spec: target.template.mergePolicy must be Replace or Merge")
    return tuple(sorted(data.items())), policy == "Merge"


def _parse_format(target: dict[str, Any]) -> tuple[str | None, str | None]:
    """S11.1, S1.3.13: formatKey exactly when format is set, and a data key."""
    file_format = target.get("format")
    format_key = target.get("formatKey")
    if file_format is None:
        if format_key is not None:
            raise SpecInvalid("invalid spec: target.formatKey is allowed only with target.format")
        return None, None
    if file_format not in FILE_FORMATS:
        raise SpecInvalid("invalid spec: target.format must be one of " + ", ".join(FILE_FORMATS))
    if not is_secret_data_key(_text(format_key)):
        raise SpecInvalid("invalid spec: target.format needs target.formatKey, a data key")
    return file_format, format_key


def _parse_mapping(items: list[Any]) -> tuple[MappingEntry, ...]:
    if len(items) > MAX_MAPPING:
        raise SpecInvalid(f"invalid spec: mapping has more than {MAX_MAPPING} entries")
    entries = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        item = item if isinstance(item, dict) else {}
        key = _text(item.get("key"))
        if not KEY_NAME.match(key) or len(key) > 128:
            raise SpecInvalid(f"invalid spec: mapping[{index}].key is not a Hikyo key name")
        secret_key = _text(item.get("secretKey")) or key
        if not is_secret_data_key(secret_key):
            raise SpecInvalid(
                f"invalid spec: mapping[{index}].secretKey {secret_key!r} is not a Secret data key"
            )
        if secret_key in seen:
            raise SpecInvalid(f"invalid spec: destination {secret_key!r} is mapped twice")
        seen.add(secret_key)
        entries.append(MappingEntry(key=key, secret_key=secret_key))
    return tuple(entries)
