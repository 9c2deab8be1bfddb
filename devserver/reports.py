"""Validation of the proposed status report (delivery-api.yaml `DeliveryStatusReport`, S7.3).

The schema is closed everywhere (``additionalProperties: false``), so anything beyond the
allowlist is a 400. Problems are named by member path only; values are never echoed.
"""

from __future__ import annotations

import json
import re
from typing import Any

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_UID = re.compile(r"[0-9a-fA-F-]{36}")
_CONDITION_WORD = re.compile(r"[A-Z][A-Za-z]{0,63}")

LIFECYCLES = ("Synced", "Retained", "Scrubbed", "Refused", "Unreconciled")
CONDITION_STATUSES = ("True", "False", "Unknown")
MAX_CONDITIONS = 16

# member -> (pattern, minLength, maxLength); patterns are anchored by ``fullmatch``.
_STRINGS: dict[str, tuple[re.Pattern[str], int | None, int | None]] = {
    "cluster_id": (_UID, None, None),
    "namespace": (_DNS_LABEL, 1, 63),
    "name": (_DNS_SUBDOMAIN, 1, 253),
    "uid": (_UID, None, None),
    "target": (_DNS_LABEL, 1, 63),
}
_INTEGERS = ("generation", "observed_generation")
REQUIRED = (*_STRINGS, *_INTEGERS, "lifecycle", "conditions")
CONDITION_REQUIRED = ("type", "status", "reason")


class ReportInvalid(ValueError):
    """The body is not a DeliveryStatusReport; ``args[0]`` names the offending member."""


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise ReportInvalid("body: duplicate member")
        result[name] = value
    return result


def _reject_constant(_: str) -> Any:
    raise ReportInvalid("body: not JSON")


def parse_body(raw: bytes) -> Any:
    """Strict JSON: UTF-8, no duplicate members, no NaN/Infinity."""
    try:
        text = raw.decode("utf-8")
        return json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ReportInvalid("body: not JSON") from exc


def _is_integer(value: Any) -> bool:
    # JSON Schema `integer`: a number with no fractional part; booleans are not numbers.
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _check_string(path: str, value: Any, rule: tuple[re.Pattern[str], int | None, int | None]):
    pattern, min_length, max_length = rule
    if not isinstance(value, str):
        raise ReportInvalid(f"{path}: must be a string")
    if min_length is not None and len(value) < min_length:
        raise ReportInvalid(f"{path}: too short")
    if max_length is not None and len(value) > max_length:
        raise ReportInvalid(f"{path}: too long")
    if not pattern.fullmatch(value):
        raise ReportInvalid(f"{path}: does not match the pattern")


def _check_object(path: str, value: Any, required: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ReportInvalid(f"{path}: must be an object")
    extra = sorted(set(value) - set(required))
    if extra:
        # Names are not echoed: an unexpected member might itself be a leaked key name.
        raise ReportInvalid(f"{path}: unexpected member (additionalProperties is false)")
    for member in required:
        if member not in value:
            raise ReportInvalid(f"{path}.{member}: required")
    return value


def validate_report(document: Any) -> dict[str, Any]:
    """Returns the report unchanged when it matches the schema; :class:`ReportInvalid` else."""
    report = _check_object("body", document, REQUIRED)
    for member, rule in _STRINGS.items():
        _check_string(member, report[member], rule)
    for member in _INTEGERS:
        value = report[member]
        if not _is_integer(value):
            raise ReportInvalid(f"{member}: must be an integer")
        if value < 0:
            raise ReportInvalid(f"{member}: must be >= 0")
        if value >= 2**63:
            raise ReportInvalid(f"{member}: exceeds int64")
    if report["lifecycle"] not in LIFECYCLES:
        raise ReportInvalid("lifecycle: not in the enum")
    conditions = report["conditions"]
    if not isinstance(conditions, list):
        raise ReportInvalid("conditions: must be an array")
    if len(conditions) > MAX_CONDITIONS:
        raise ReportInvalid(f"conditions: at most {MAX_CONDITIONS} items")
    seen: set[str] = set()
    for index, condition in enumerate(conditions):
        path = f"conditions[{index}]"
        _check_object(path, condition, CONDITION_REQUIRED)
        _check_string(f"{path}.type", condition["type"], (_CONDITION_WORD, None, None))
        _check_string(f"{path}.reason", condition["reason"], (_CONDITION_WORD, None, None))
        if condition["status"] not in CONDITION_STATUSES:
            raise ReportInvalid(f"{path}.status: not in the enum")
        # The schema's description: one entry per condition type (types unique).
        if condition["type"] in seen:
            raise ReportInvalid(f"{path}.type: duplicate condition type")
        seen.add(condition["type"])
    return report
