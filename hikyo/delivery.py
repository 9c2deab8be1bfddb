"""The S3 delivery wire mapping: the strict decoder of 200 bodies (S3.4), the error envelope
(S3.5.1), the fetch query (S3.3) and what an answer means (S3.5). No I/O of its own.

Strict on the members the operator uses, lenient otherwise: unknown members are
ignored (S3.4). Every violation raises :class:`InvalidResponse`, whose message names
the rule and never a value, a key name or the cursor (S0.4, S3.6). The error tree is
``workers.engine.errors``.

Parser exceptions are never chained: a ``JSONDecodeError`` carries the whole body in
``.doc`` and a ``UnicodeDecodeError`` its bytes, so keeping them as ``__cause__`` or
``__context__`` would carry values into tracebacks and error reporters.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

from workers.engine.errors import InvalidResponse
from workers.engine.fetched import DeliveredKey, Delivery, FetchOutcome, FetchResult

from .transport import Answer, retry_after

__all__ = [
    "decode_delivery",
    "error_code",
    "fetch_body_limit",
    "fetch_query",
    "interpret_fetch",
    "is_authoritative_not_found",
    "parse_rfc3339",
]

MAX_BODY_BYTES = 8 * 1024 * 1024  # S3.2 / S3.4.1
MAX_ERROR_BODY_BYTES = 64 * 1024  # S3.5.1
MAX_CURSOR_CHARS = 128  # S3.4.2
MAX_NAME_CHARS = 256  # S3.4.3
# The revisions are int64 on the wire and in Kubernetes status; larger never round-trips.
_INT64_MAX = 2**63 - 1

CLASSIFICATIONS = frozenset({"secret", "config"})  # S3.4.3, closed
PRESENCES = frozenset({"required", "forbidden", "optional", "set"})  # S3.4.3, closed

# S3.4.6: RFC 3339 date-time (section 5.6), 0-9 fractional digits. ASCII digits only
# (re.ASCII), and fullmatch so a trailing newline cannot slip past `$`.
_RFC3339 = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})[Tt]"
    r"(?P<h>[0-9]{2}):(?P<m>[0-9]{2}):(?P<s>[0-9]{2})(?:\.(?P<frac>[0-9]{1,9}))?"
    r"(?:(?P<z>[Zz])|(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))",
    re.ASCII,
)


def decode_delivery(body: bytes) -> Delivery:
    """Decode a 200 body under S3.4 items 1-7, or raise :class:`InvalidResponse`."""
    if len(body) > MAX_BODY_BYTES:
        raise InvalidResponse("S3.4.1: body exceeds 8 MiB")
    doc = _parse_json(body)
    if doc is _NOT_JSON:
        raise InvalidResponse("S3.4.1: body is not well-formed JSON")
    if not isinstance(doc, dict):
        raise InvalidResponse("S3.4.1: body is not a JSON object")
    current = _required_bool(doc, "current")
    cursor = _required_cursor(doc)
    if not isinstance(doc.get("change_token"), str):
        raise InvalidResponse("S3.4.2: change_token missing or not a string")
    schema_revision = _required_revision(doc)
    pin_expired = _required_bool(doc, "pin_expired")
    keys = _decode_keys(doc.get("keys"))
    if current and keys:
        raise InvalidResponse("S3.4.4: current is true but keys is not empty")
    return Delivery(
        current=current,
        cursor=cursor,
        schema_revision=schema_revision,
        pin_expired=pin_expired,
        keys=keys,
        credential_expires_at=_optional_timestamp(doc),
        pinned_revision=_optional_pinned_revision(doc),
        capabilities=_capabilities(doc.get("capabilities")),
    )


def error_code(body: bytes, *, limit: int = MAX_ERROR_BODY_BYTES) -> str | None:
    """The ``error.code`` string of an error envelope no larger than ``limit``, else None."""
    if len(body) > limit:
        return None
    doc = _parse_json(body)
    if not isinstance(doc, dict):
        return None
    error = doc.get("error")
    if not isinstance(error, dict):
        return None
    code = error.get("code")
    return code if isinstance(code, str) else None


def is_authoritative_not_found(body: bytes) -> bool:
    """S3.5.1: a body <= 64 KiB that is a JSON object whose ``error.code`` is ``not_found``.

    Content-Type and other members are ignored. Anything doubtful is not authoritative,
    because an authoritative 404 can end in a scrub (S4.10).
    """
    return error_code(body) == "not_found"


# --- JSON ------------------------------------------------------------------------------

_NOT_JSON = object()


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # RFC 8259 leaves duplicate names to the parser; first-wins and last-wins readers
    # would disagree on e.g. `current`, so a document with duplicates is not accepted.
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate member name")
    return result


def _reject_constant(_name: str) -> Any:
    raise ValueError("NaN and Infinity are not JSON")


def _parse_json(body: bytes) -> Any:
    """The parsed document, or ``_NOT_JSON``. Strict UTF-8, no NaN/Infinity, no duplicates.

    Returns a sentinel instead of raising from inside ``except`` so that no parser
    exception (which holds the body) is kept as ``__context__``.
    """
    try:
        text = bytes(body).decode("utf-8")
        return json.loads(text, object_pairs_hook=_unique_members, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, int limits
        return _NOT_JSON


def _is_unicode_text(text: str) -> bool:
    # JSON escapes can produce lone surrogates, which no Secret or header can carry.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --- members ---------------------------------------------------------------------------


def _required_bool(doc: dict[str, Any], member: str) -> bool:
    value = doc.get(member)
    if not isinstance(value, bool):
        raise InvalidResponse(f"S3.4.2: {member} missing or not a boolean")
    return value


def _required_cursor(doc: dict[str, Any]) -> str:
    cursor = doc.get("cursor")
    if not isinstance(cursor, str):
        raise InvalidResponse("S3.4.2: cursor missing or not a string")
    if len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidResponse("S3.4.2: cursor longer than 128 characters")
    if not _is_unicode_text(cursor):
        raise InvalidResponse("S3.4.2: cursor is not valid Unicode")
    return cursor


def _is_json_integer(value: Any) -> bool:
    # bool is an int subclass in Python but not a JSON integer; 1.0 is a JSON number.
    return type(value) is int


def _required_revision(doc: dict[str, Any]) -> int:
    value = doc.get("schema_revision")
    if not _is_json_integer(value) or not 0 <= value <= _INT64_MAX:
        raise InvalidResponse("S3.4.2: schema_revision missing or not an integer >= 0")
    return value


def _optional_pinned_revision(doc: dict[str, Any]) -> int | None:
    if "pinned_revision" not in doc:
        return None
    value = doc["pinned_revision"]
    if not _is_json_integer(value) or not 1 <= value <= _INT64_MAX:
        raise InvalidResponse("S3.4.6: pinned_revision is not an integer >= 1")
    return value


def _optional_timestamp(doc: dict[str, Any]) -> datetime | None:
    if "credential_expires_at" not in doc:
        return None
    value = doc["credential_expires_at"]
    parsed = parse_rfc3339(value) if isinstance(value, str) else None
    if parsed is None:
        raise InvalidResponse("S3.4.6: credential_expires_at is not an RFC 3339 timestamp")
    return parsed


def parse_rfc3339(text: str) -> datetime | None:
    """S3.4.6: an RFC 3339 date-time with 0-9 fractional digits, in UTC; None if not one.

    Digits past microseconds are truncated. Leap second 60 and instants outside
    ``datetime``'s range are not representable and count as invalid.
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    try:
        offset = timedelta(0)
        if match["z"] is None:
            minutes = int(match["om"])
            if minutes > 59:
                return None
            offset = timedelta(hours=int(match["oh"]), minutes=minutes)
            if match["sign"] == "-":
                offset = -offset
        micro = int((match["frac"] or "").ljust(6, "0")[:6])
        local = datetime(
            int(match["y"]),
            int(match["mo"]),
            int(match["d"]),
            hour=int(match["h"]),
            minute=int(match["m"]),
            second=int(match["s"]),
            microsecond=micro,
            tzinfo=timezone(offset),
        )
        return local.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _capabilities(value: Any) -> frozenset[str] | None:
    """S3.4.6 / S7.2: an array of strings gives its distinct values; any other shape is absent."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return None
    # Strings that are not valid Unicode cannot be a known capability; ignore them like
    # any other unknown value rather than carrying them into the keyed-queue store.
    return frozenset(item for item in value if _is_unicode_text(item))


# --- keys ------------------------------------------------------------------------------


def _decode_keys(value: Any) -> tuple[DeliveredKey, ...]:
    if not isinstance(value, list):
        raise InvalidResponse("S3.4.2: keys missing or not an array")
    keys = tuple(_decode_key(item) for item in value)
    if len({key.name for key in keys}) != len(keys):
        raise InvalidResponse("S3.4.3: duplicate key name")
    return keys


def _decode_key(item: Any) -> DeliveredKey:
    if not isinstance(item, dict):
        raise InvalidResponse("S3.4.3: key entry is not an object")
    name = item.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_CHARS:
        raise InvalidResponse("S3.4.3: key name missing, empty or longer than 256 characters")
    if not _is_unicode_text(name):
        raise InvalidResponse("S3.4.3: key name is not valid Unicode")
    classification = item.get("classification")
    if not isinstance(classification, str) or classification not in CLASSIFICATIONS:
        raise InvalidResponse("S3.4.3: key classification missing or not secret/config")
    presence = item.get("presence")
    if not isinstance(presence, str) or presence not in PRESENCES:
        raise InvalidResponse("S3.4.3: key presence missing or not required/forbidden/optional/set")
    return DeliveredKey(
        name=name,
        classification=classification,
        presence=presence,
        value=_key_value(item, presence),
    )


def _key_value(item: dict[str, Any], presence: str) -> str | None:
    if "value" not in item:
        return None  # S3.4.7: presence-only
    value = item["value"]
    if not isinstance(value, str):
        raise InvalidResponse("S3.4.3: key value is not a string")
    if presence != "set":
        raise InvalidResponse("S3.4.5: key with presence other than set carries a value")
    if not _is_unicode_text(value):
        raise InvalidResponse("S3.4.3: key value is not valid Unicode")
    return value


# --- the fetch exchange: S3.3 query, S3.5 meaning --------------------------------------

PROJECTIONS = frozenset({"full", "config-only"})  # delivery-api.yaml DeliveryProjection
RATE_LIMIT_MAX_S = 300.0  # S4.1.6


def fetch_query(projection: str, cursor: str | None, acknowledged_keys: Sequence[str]) -> str:
    """S3.3 query string. An empty ``cursor`` counts as none (S4.3.1(1))."""
    if projection not in PROJECTIONS:
        raise ValueError("projection must be 'full' or 'config-only'")
    acknowledged = _acknowledged(acknowledged_keys)
    query = [("projection", projection)]
    if cursor:
        query.append(("cursor", cursor))
    if acknowledged:
        query.append(("acknowledged_keys", acknowledged))
    return _encode_query(query)


def _encode_query(pairs: list[tuple[str, str]]) -> str:
    # Everything but unreserved characters is escaped: '+' in a cursor must not turn
    # into a space on the server. ',' becomes %2C, which S3.3 allows.
    return "&".join(f"{quote(name, safe='')}={quote(value, safe='')}" for name, value in pairs)


def _acknowledged(names: Sequence[str]) -> str:
    """S3.3: names joined by ',' (form, explode false); '' when the list is empty."""
    if isinstance(names, str):
        raise ValueError("acknowledged_keys must be a sequence of names, not a string")
    for name in names:
        if not isinstance(name, str) or not name or "," in name:
            raise ValueError("acknowledged key names must be non-empty and comma-free")
    return ",".join(names)


def fetch_body_limit(status: int) -> int | None:
    """How much of a fetch answer's body to read; None = none."""
    # 200 needs the delivery (S3.4.1); 404/409 only a small error envelope (S3.5.1).
    if status == 200:
        return MAX_BODY_BYTES
    if status in (404, 409):
        return MAX_ERROR_BODY_BYTES
    return None


def interpret_fetch(answer: Answer, *, cursor_presented: bool) -> FetchResult:
    """S3.5: status => outcome."""
    status = answer.status
    if answer.detail:
        return FetchResult(FetchOutcome.FAILED, status, detail=answer.detail)
    if status == 200:
        return _interpret_delivery(answer, cursor_presented)
    if status == 404:
        if answer.body is not None and is_authoritative_not_found(answer.body):
            return FetchResult(FetchOutcome.AUTHORITATIVE_NOT_FOUND, 404, detail="not found")
        return FetchResult(
            FetchOutcome.FAILED, 404, detail="status 404 (not an authoritative body)"
        )
    if status == 409:
        if answer.body is not None and error_code(answer.body) == "conflict":
            return FetchResult(FetchOutcome.NOT_MATERIALIZED, 409, detail="status 409 (conflict)")
        return FetchResult(FetchOutcome.FAILED, 409, detail="status 409")
    if status == 401:
        return FetchResult(FetchOutcome.FAILED, 401, detail="status 401 (credential rejected)")
    if status == 429:
        return FetchResult(
            FetchOutcome.RATE_LIMITED,
            429,
            retry_after=retry_after(answer.headers, RATE_LIMIT_MAX_S),
            detail="status 429 (rate limited)",
        )
    return FetchResult(FetchOutcome.FAILED, status, detail=f"status {status}")


def _interpret_delivery(answer: Answer, cursor_presented: bool) -> FetchResult:
    if answer.oversize or answer.body is None:
        return FetchResult(FetchOutcome.FAILED, 200, detail="response exceeds 8 MiB")
    try:
        delivery = decode_delivery(answer.body)
    except InvalidResponse as exc:
        # Our own fixed rule text (S3.4): safe to show.
        return FetchResult(FetchOutcome.FAILED, 200, detail=f"invalid response: {exc}")
    if delivery.current and not cursor_presented:  # S3.5 protocol violation
        return FetchResult(
            FetchOutcome.FAILED, 200, detail="server answered current to a cursor-less request"
        )
    return FetchResult(FetchOutcome.DELIVERY, 200, delivery=delivery)
