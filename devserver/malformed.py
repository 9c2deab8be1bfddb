"""Delivery bodies that break S3.4 (one kind per rule) and bodies S3.4 must tolerate.

Every :data:`MALFORMED_KINDS` entry violates exactly one S3.4 decoding rule, so a client
that implements S3.4 must treat the answer as invalid (``Synced=False/FetchFailed``, retain,
cursor unchanged). Every :data:`TOLERATED_KINDS` entry is a valid answer that exercises the
lenient side of S3.4 (unknown members, odd ``capabilities`` shapes, members the operator
does not use). Both start from the delivery the caller would otherwise get.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from devserver.replies import Reply

#: S3.2 / S3.4.1 body cap.
MAX_BODY_BYTES = 8 * 1024 * 1024

REQUIRED_MEMBERS = ("current", "cursor", "change_token", "schema_revision", "pin_expired", "keys")
_WRONG_TYPE: dict[str, Any] = {
    "current": "true",
    "cursor": 12345,
    "change_token": 7,
    "schema_revision": "3",
    "pin_expired": "false",
    "keys": {},
}
KEY_MEMBERS = ("name", "classification", "presence")

Body = dict[str, Any]
_SYNTHETIC_KEY = {
    "key_id": "key_00000000-0000-7000-8000-000000000000",
    "name": "DEVSERVER_SYNTHETIC",
    "classification": "config",
    "presence": "set",
    "value": "synthetic",
}


_UTF8_PLACEHOLDER = "@@devserver-invalid-utf8@@"


def synthetic_base() -> Body:
    """A plausible full delivery, for faults on requests that would not get a 200."""
    return {
        "credential_id": "mcr_00000000-0000-7000-8000-000000000000",
        "current": False,
        "cursor": "c1.synthetic",
        "change_token": "v1:synthetic",
        "schema_revision": 1,
        "pin_expired": False,
        "keys": [dict(_SYNTHETIC_KEY)],
        "issued_at": "2030-01-01T00:00:00Z",
        "snapshot_expires_at": "2030-01-01T00:05:00Z",
    }


def _with_key(body: Body) -> Body:
    """A full (``current: false``) copy with at least one key carrying a value."""
    body = copy.deepcopy(body)
    body["current"] = False
    if not body.get("keys"):
        body["keys"] = [dict(_SYNTHETIC_KEY)]
    return body


def _first_key(body: Body) -> dict[str, Any]:
    return body["keys"][0]


def _set(member: str, value: Any) -> Callable[[Body], Body]:
    def mutate(body: Body) -> Body:
        body[member] = value
        return body

    return mutate


def _drop(member: str) -> Callable[[Body], Body]:
    def mutate(body: Body) -> Body:
        body.pop(member, None)
        return body

    return mutate


def _set_key(member: str, value: Any) -> Callable[[Body], Body]:
    def mutate(body: Body) -> Body:
        _first_key(body)[member] = value
        return body

    return mutate


def _drop_key(member: str) -> Callable[[Body], Body]:
    def mutate(body: Body) -> Body:
        _first_key(body).pop(member, None)
        return body

    return mutate


def _duplicate_names(body: Body) -> Body:
    twin = dict(_first_key(body))
    twin["key_id"] = "key_00000000-0000-7000-8000-0000000000ff"
    body["keys"].append(twin)
    return body


def _unset_presence_value(body: Body) -> Body:
    key = _first_key(body)
    key["presence"] = "optional"
    key.setdefault("value", "x")
    return body


def _current_with_keys(body: Body) -> Body:
    body["current"] = True
    return body


def _value_null(body: Body) -> Body:
    key = _first_key(body)
    key["presence"] = "set"
    key["value"] = None
    return body


# Body-level mutations, applied to a full delivery with at least one key.
_BODY_MUTATIONS: dict[str, Callable[[Body], Body]] = {}
for _member in REQUIRED_MEMBERS:  # S3.4.2: missing, null or wrongly typed required members
    _BODY_MUTATIONS[f"missing_{_member}"] = _drop(_member)
    _BODY_MUTATIONS[f"null_{_member}"] = _set(_member, None)
    _BODY_MUTATIONS[f"wrong_type_{_member}"] = _set(_member, _WRONG_TYPE[_member])
_BODY_MUTATIONS.update(
    {
        # S3.4.2: bounds, and JSON types that Python would blur (bool is an int there)
        "current_as_integer": _set("current", 1),
        "pin_expired_as_integer": _set("pin_expired", 0),
        "schema_revision_bool": _set("schema_revision", True),
        "schema_revision_float": _set("schema_revision", 2.5),
        "negative_schema_revision": _set("schema_revision", -1),
        "cursor_too_long": _set("cursor", "c" * 129),
        # S3.4.3: per key
        "key_not_object": _set("keys", ["DEVSERVER_SYNTHETIC"]),
        "missing_key_name": _drop_key("name"),
        "null_key_name": _set_key("name", None),
        "wrong_type_key_name": _set_key("name", 42),
        "empty_key_name": _set_key("name", ""),
        "key_name_too_long": _set_key("name", "K" * 257),
        "duplicate_key_names": _duplicate_names,
        "missing_key_classification": _drop_key("classification"),
        "null_key_classification": _set_key("classification", None),
        "bad_classification": _set_key("classification", "public"),
        "missing_key_presence": _drop_key("presence"),
        "null_key_presence": _set_key("presence", None),
        "bad_presence": _set_key("presence", "maybe"),
        "value_null": _value_null,
        "value_wrong_type": _set_key("value", 123),
        # S3.4.4
        "current_true_with_keys": _current_with_keys,
        # S3.4.5
        "value_on_unset_presence": _unset_presence_value,
        # S3.4.6: optional members, when present
        "bad_credential_expires_at": _set("credential_expires_at", "tomorrow"),
        "credential_expires_at_no_offset": _set("credential_expires_at", "2099-01-01T00:00:00"),
        "credential_expires_at_too_many_fraction_digits": _set(
            "credential_expires_at", "2099-01-01T00:00:00.1234567890Z"
        ),
        "credential_expires_at_wrong_type": _set("credential_expires_at", 4070908800),
        "pinned_revision_zero": _set("pinned_revision", 0),
        "pinned_revision_wrong_type": _set("pinned_revision", "1"),
        "pinned_revision_float": _set("pinned_revision", 1.5),
    }
)

# S3.4.1: not a JSON object of at most 8 MiB.
_RAW_KINDS = (
    "not_json",
    "json_array",
    "json_string",
    "json_null",
    "invalid_utf8",
    "truncated_json",
    "oversize",
    "oversize_chunked",
)

MALFORMED_KINDS: tuple[str, ...] = _RAW_KINDS + tuple(_BODY_MUTATIONS)
"""One name per S3.4 violation (items 1-6); see the module docstring."""


def _json(status: int, payload: bytes, *, chunked: bool = False) -> Reply:
    return Reply(
        status,
        payload,
        (("Content-Type", "application/json"), ("Cache-Control", "no-store")),
        chunked=chunked,
    )


def _encode(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _oversize(body: Body) -> bytes:
    # A well-formed object whose only fault is its size: a client must not parse a prefix.
    body = dict(body, padding="")
    filler = MAX_BODY_BYTES + 1 - len(_encode(body))
    body["padding"] = "x" * max(filler, 1)
    return _encode(body)


def malformed_reply(kind: str, base: Body) -> Reply:
    """A 200 whose body breaks the S3.4 rule named by ``kind``."""
    body = _with_key(base)
    if kind == "not_json":
        return _json(200, b"this is not json")
    if kind == "json_array":
        return _json(200, _encode([body]))
    if kind == "json_string":
        return _json(200, b'"delivery"')
    if kind == "json_null":
        return _json(200, b"null")
    if kind == "invalid_utf8":
        # In a delivered value, where a client decoding with errors="replace" (as
        # requests' ``Response.json()`` falls back to) would write corrupted plaintext.
        _first_key(body).update(presence="set", value=_UTF8_PLACEHOLDER)
        return _json(200, _encode(body).replace(_UTF8_PLACEHOLDER.encode(), b"\xff\xfe"))
    if kind == "truncated_json":
        encoded = _encode(body)
        return _json(200, encoded[: len(encoded) // 2])
    if kind == "oversize":
        return _json(200, _oversize(body))
    if kind == "oversize_chunked":
        return _json(200, _oversize(body), chunked=True)
    mutate = _BODY_MUTATIONS.get(kind)
    if mutate is None:
        raise ValueError(f"unknown malformed kind {kind!r}; see MALFORMED_KINDS")
    return _json(200, _encode(mutate(body)))


def _unknown_members(body: Body) -> Body:
    body["x_future_member"] = {"nested": [1, 2, 3]}
    for key in body["keys"]:
        key["x_future_key_member"] = True
    return body


def _drop_server_only(body: Body) -> Body:
    for member in ("credential_id", "issued_at", "snapshot_expires_at"):
        body.pop(member, None)
    for key in body["keys"]:
        key.pop("key_id", None)
    return body


_TOLERATED: dict[str, Callable[[Body], Body]] = {
    # S3.4 preamble: unknown members are ignored, top level and per key.
    "unknown_members": _unknown_members,
    # S3.4.6: any non-array-of-strings shape counts as absent, never invalid.
    "capabilities_not_array": _set("capabilities", "status-report"),
    "capabilities_with_non_strings": _set("capabilities", ["status-report", 7, None]),
    "capabilities_absent": _drop("capabilities"),
    # S3.4.6: an array of strings is a set; unknown values, order and duplicates ignored.
    "capabilities_duplicates_and_unknown": _set(
        "capabilities", ["future-capability", "status-report", "status-report"]
    ),
    # S3.4.6: sent by servers, unused and unchecked by the operator.
    "missing_server_only_members": _drop_server_only,
    # S3.4.2: change_token length is not checked.
    "long_change_token": _set("change_token", "v1:" + "A" * 1000),
    # S3.4.6: 0-9 fractional digits and any offset.
    "credential_expires_at_nine_digits_offset": _set(
        "credential_expires_at", "2099-01-01T02:00:00.123456789+02:00"
    ),
}

TOLERATED_KINDS: tuple[str, ...] = tuple(_TOLERATED)
"""Valid answers a strict-but-lenient S3.4 client must accept."""


def tolerated_reply(kind: str, base: Body) -> Reply:
    """A valid 200 built from the caller's real delivery, varied as ``kind`` says."""
    mutate = _TOLERATED.get(kind)
    if mutate is None:
        raise ValueError(f"unknown tolerated kind {kind!r}; see TOLERATED_KINDS")
    return _json(200, _encode(mutate(copy.deepcopy(base))))
