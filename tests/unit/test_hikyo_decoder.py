"""S3.4 / S3.5.1: decoding delivery answers and recognising the authoritative 404."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from hikyo.delivery import (
    MAX_BODY_BYTES,
    decode_delivery,
    error_code,
    is_authoritative_not_found,
    parse_rfc3339,
)
from tests.support.factories import DELETE, merge
from workers.engine.errors import HikyoClientError, InvalidResponse
from workers.engine.fetched import DeliveredKey, Delivery

CANARY_VALUE = "canary-value-7f3a"
CANARY_CURSOR = "canary-cursor-91bd"


def key(**overrides: Any) -> dict[str, Any]:
    """A delivered ``set`` key with a value; DELETE removes a member."""
    base = {
        "key_id": "key_01900000-0000-7000-8000-00000000000a",
        "name": "DATABASE_URL",
        "classification": "config",
        "presence": "set",
        "value": CANARY_VALUE,
    }
    return merge(base, overrides)


def answer(**overrides: Any) -> dict[str, Any]:
    """A valid full delivery as the server sends it; DELETE removes a member."""
    base = {
        "credential_id": "cred_01900000-0000-7000-8000-000000000001",
        "current": False,
        "cursor": CANARY_CURSOR,
        "change_token": "v1:abc",
        "schema_revision": 3,
        "pin_expired": False,
        "keys": [key()],
        "issued_at": "2026-05-01T10:00:00Z",
        "snapshot_expires_at": "2026-05-01T11:00:00Z",
    }
    return merge(base, overrides)


def encode(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def invalid(doc_or_body: Any) -> str:
    body = doc_or_body if isinstance(doc_or_body, bytes) else encode(doc_or_body)
    with pytest.raises(InvalidResponse) as caught:
        decode_delivery(body)
    return str(caught.value)


# --- valid answers -------------------------------------------------------------------


def test_full_delivery_decodes_members_the_operator_uses():
    """S3.4.2/3: required members and each key."""
    delivery = decode_delivery(encode(answer()))
    assert delivery == Delivery(
        current=False,
        cursor=CANARY_CURSOR,
        schema_revision=3,
        pin_expired=False,
        keys=(DeliveredKey("DATABASE_URL", "config", "set", CANARY_VALUE),),
    )
    assert delivery.keys[0].carried
    assert delivery.keys[0].delivered


def test_current_answer_with_no_keys_is_valid():
    """S3.4.4: current:true comes with an empty keys array."""
    delivery = decode_delivery(encode(answer(current=True, keys=[])))
    assert delivery.current
    assert delivery.keys == ()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param({}, DeliveredKey("DATABASE_URL", "config", "set", CANARY_VALUE), id="value"),
        pytest.param({"value": ""}, DeliveredKey("DATABASE_URL", "config", "set", ""), id="empty"),
        pytest.param(
            {"value": DELETE, "classification": "secret"},
            DeliveredKey("DATABASE_URL", "secret", "set", None),
            id="presence-only-secret",
        ),
        pytest.param(
            {"value": DELETE, "presence": "required"},
            DeliveredKey("DATABASE_URL", "config", "required", None),
            id="declared-required",
        ),
        pytest.param(
            {"value": DELETE, "presence": "forbidden"},
            DeliveredKey("DATABASE_URL", "config", "forbidden", None),
            id="declared-forbidden",
        ),
        pytest.param(
            {"value": DELETE, "presence": "optional"},
            DeliveredKey("DATABASE_URL", "config", "optional", None),
            id="declared-optional",
        ),
        pytest.param(
            {"key_id": DELETE, "extra": {"nested": [1, None]}},
            DeliveredKey("DATABASE_URL", "config", "set", CANARY_VALUE),
            id="key-id-unused-unknown-ignored",
        ),
        pytest.param(
            {"name": "N" * 256},
            DeliveredKey("N" * 256, "config", "set", CANARY_VALUE),
            id="name-256",
        ),
        pytest.param(
            {"name": "clé.ü"},
            DeliveredKey("clé.ü", "config", "set", CANARY_VALUE),
            id="name-grammar-not-checked",
        ),
    ],
)
def test_key_shapes(overrides, expected):
    """S3.4.3/5/7: a value member (even "") is delivered; declared presences are not carried."""
    (decoded,) = decode_delivery(encode(answer(keys=[key(**overrides)]))).keys
    assert decoded == expected
    assert decoded.carried is (expected.presence == "set")
    assert decoded.delivered is (expected.value is not None)


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"unknown_member": {"x": [1, 2]}}, id="unknown-member"),
        pytest.param({"change_token": "x" * 1000}, id="change-token-length-unchecked"),
        pytest.param({"cursor": ""}, id="empty-cursor"),
        pytest.param({"cursor": "c" * 128}, id="cursor-128"),
        pytest.param({"schema_revision": 0}, id="schema-revision-zero"),
        pytest.param({"schema_revision": 2**63 - 1}, id="schema-revision-int64-max"),
        pytest.param({"pin_expired": True}, id="pin-expired"),
        pytest.param({"keys": []}, id="no-keys"),
        pytest.param({"issued_at": None, "snapshot_expires_at": 7}, id="unused-unchecked"),
        pytest.param({"credential_id": DELETE, "issued_at": DELETE}, id="unused-missing"),
        pytest.param({"key_id": [1]}, id="unused-top-level-key-id"),
    ],
)
def test_lenient_on_members_not_used(overrides):
    """S3.4: unknown and unused members are ignored."""
    assert isinstance(decode_delivery(encode(answer(**overrides))), Delivery)


def test_several_keys_keep_server_order():
    names = ["B", "A", "C"]
    delivery = decode_delivery(encode(answer(keys=[key(name=n) for n in names])))
    assert [k.name for k in delivery.keys] == names


# --- invalid answers -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "rule"),
    [
        pytest.param(b"", "S3.4.1", id="empty"),
        pytest.param(b"not json", "S3.4.1", id="not-json"),
        pytest.param(b"[]", "S3.4.1", id="array"),
        pytest.param(b'"text"', "S3.4.1", id="string"),
        pytest.param(b"null", "S3.4.1", id="null"),
        pytest.param(b"\xff\xfe{}", "S3.4.1", id="not-utf8"),
        pytest.param(b"\xef\xbb\xbf{}", "S3.4.1", id="utf8-bom"),
        pytest.param(json.dumps(answer()).encode("utf-16"), "S3.4.1", id="utf16"),
        pytest.param(encode(answer())[:-1], "S3.4.1", id="truncated"),
        pytest.param(encode(answer()) + b"x", "S3.4.1", id="trailing-garbage"),
        pytest.param(b'{"a": NaN}', "S3.4.1", id="nan"),
        pytest.param(b'{"a": -Infinity}', "S3.4.1", id="infinity"),
        pytest.param(b'{"current": false, "current": true}', "S3.4.1", id="duplicate-member"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, "S3.4.1", id="deep-nesting"),
        pytest.param(b'{"a": ' + b"1" * 5000 + b"}", "S3.4.1", id="huge-integer-literal"),
        pytest.param(b" " * (MAX_BODY_BYTES - 1) + b"{}", "S3.4.1", id="over-8-mib"),
    ],
)
def test_body_must_be_a_json_object(body, rule):
    """S3.4.1: a JSON object <= 8 MiB; strict UTF-8, no NaN, no duplicate member names."""
    assert invalid(body).startswith(rule)


@pytest.mark.parametrize(
    ("overrides", "member"),
    [
        pytest.param({"current": DELETE}, "current", id="current-missing"),
        pytest.param({"current": None}, "current", id="current-null"),
        pytest.param({"current": "false"}, "current", id="current-string"),
        pytest.param({"current": 0}, "current", id="current-int"),
        pytest.param({"cursor": DELETE}, "cursor", id="cursor-missing"),
        pytest.param({"cursor": None}, "cursor", id="cursor-null"),
        pytest.param({"cursor": 5}, "cursor", id="cursor-int"),
        pytest.param({"cursor": "c" * 129}, "cursor", id="cursor-129"),
        pytest.param({"change_token": DELETE}, "change_token", id="change-token-missing"),
        pytest.param({"change_token": None}, "change_token", id="change-token-null"),
        pytest.param({"change_token": 1}, "change_token", id="change-token-int"),
        pytest.param({"schema_revision": DELETE}, "schema_revision", id="revision-missing"),
        pytest.param({"schema_revision": None}, "schema_revision", id="revision-null"),
        pytest.param({"schema_revision": -1}, "schema_revision", id="revision-negative"),
        pytest.param({"schema_revision": 1.0}, "schema_revision", id="revision-float"),
        pytest.param({"schema_revision": 1.5}, "schema_revision", id="revision-fraction"),
        pytest.param({"schema_revision": True}, "schema_revision", id="revision-bool"),
        pytest.param({"schema_revision": "3"}, "schema_revision", id="revision-string"),
        pytest.param({"schema_revision": 2**63}, "schema_revision", id="revision-over-int64"),
        pytest.param({"pin_expired": DELETE}, "pin_expired", id="pin-expired-missing"),
        pytest.param({"pin_expired": None}, "pin_expired", id="pin-expired-null"),
        pytest.param({"pin_expired": "true"}, "pin_expired", id="pin-expired-string"),
        pytest.param({"keys": DELETE}, "keys", id="keys-missing"),
        pytest.param({"keys": None}, "keys", id="keys-null"),
        pytest.param({"keys": {}}, "keys", id="keys-object"),
        pytest.param({"keys": "DATABASE_URL"}, "keys", id="keys-string"),
    ],
)
def test_required_members(overrides, member):
    """S3.4.2: missing, null or wrong type => invalid."""
    message = invalid(answer(**overrides))
    assert message.startswith("S3.4.2")
    assert member in message


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        pytest.param("DATABASE_URL", "S3.4.3", id="entry-string"),
        pytest.param(None, "S3.4.3", id="entry-null"),
        pytest.param(key(name=DELETE), "S3.4.3", id="name-missing"),
        pytest.param(key(name=None), "S3.4.3", id="name-null"),
        pytest.param(key(name=""), "S3.4.3", id="name-empty"),
        pytest.param(key(name="N" * 257), "S3.4.3", id="name-257"),
        pytest.param(key(name=7), "S3.4.3", id="name-int"),
        pytest.param(key(name="\ud800"), "S3.4.3", id="name-lone-surrogate"),
        pytest.param(key(classification=DELETE), "S3.4.3", id="classification-missing"),
        pytest.param(key(classification=None), "S3.4.3", id="classification-null"),
        pytest.param(key(classification="Secret"), "S3.4.3", id="classification-case"),
        pytest.param(key(classification="public"), "S3.4.3", id="classification-unknown"),
        pytest.param(key(classification=["secret"]), "S3.4.3", id="classification-list"),
        pytest.param(key(presence=DELETE), "S3.4.3", id="presence-missing"),
        pytest.param(key(presence=None), "S3.4.3", id="presence-null"),
        pytest.param(key(presence="SET"), "S3.4.3", id="presence-case"),
        pytest.param(key(presence="absent"), "S3.4.3", id="presence-unknown"),
        pytest.param(key(presence={"set": 1}), "S3.4.3", id="presence-object"),
        pytest.param(key(value=None), "S3.4.3", id="value-null"),
        pytest.param(key(value=5), "S3.4.3", id="value-int"),
        pytest.param(key(value=["x"]), "S3.4.3", id="value-list"),
        pytest.param(key(value="\udc00x"), "S3.4.3", id="value-lone-surrogate"),
        pytest.param(key(presence="required"), "S3.4.5", id="required-with-value"),
        pytest.param(key(presence="optional", value=""), "S3.4.5", id="optional-with-empty"),
        pytest.param(key(presence="forbidden"), "S3.4.5", id="forbidden-with-value"),
    ],
)
def test_key_rules(entry, rule):
    """S3.4.3 member rules and S3.4.5 (a value needs presence set)."""
    assert invalid(answer(keys=[entry])).startswith(rule)


def test_duplicate_key_names_are_invalid():
    """S3.4.3: names are unique in the array (case-sensitive)."""
    assert invalid(answer(keys=[key(), key(value=DELETE)])).startswith("S3.4.3")
    distinct = answer(keys=[key(name="a"), key(name="A")])
    assert len(decode_delivery(encode(distinct)).keys) == 2


@pytest.mark.parametrize(
    "keys",
    [
        pytest.param([key()], id="delivered-key"),
        pytest.param([key(value=DELETE, presence="required")], id="declared-key"),
    ],
)
def test_current_with_keys_is_invalid(keys):
    """S3.4.4: current:true with non-empty keys."""
    assert invalid(answer(current=True, keys=keys)).startswith("S3.4.4")


# --- optional members (S3.4.6) -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2026-05-01T10:00:00Z", datetime(2026, 5, 1, 10, tzinfo=UTC), id="utc"),
        pytest.param("2026-05-01t10:00:00z", datetime(2026, 5, 1, 10, tzinfo=UTC), id="lower"),
        pytest.param(
            "2026-05-01T10:00:00.5Z",
            datetime(2026, 5, 1, 10, 0, 0, 500_000, tzinfo=UTC),
            id="one-digit",
        ),
        pytest.param(
            "2026-05-01T10:00:00.123456789Z",
            datetime(2026, 5, 1, 10, 0, 0, 123_456, tzinfo=UTC),
            id="nine-digits-truncated",
        ),
        pytest.param(
            "2026-05-01T12:30:00+02:30", datetime(2026, 5, 1, 10, tzinfo=UTC), id="plus-offset"
        ),
        pytest.param(
            "2026-05-01T05:00:00-05:00", datetime(2026, 5, 1, 10, tzinfo=UTC), id="minus-offset"
        ),
        pytest.param(
            "2026-05-01T10:00:00-00:00", datetime(2026, 5, 1, 10, tzinfo=UTC), id="unknown-offset"
        ),
        pytest.param(
            "2024-02-29T23:59:59+23:59",
            datetime(2024, 2, 29, 0, 0, 59, tzinfo=UTC),
            id="leap-day-max-offset",
        ),
    ],
)
def test_rfc3339_accepts(text, expected):
    """S3.4.6: RFC 3339 with 0-9 fractional digits, normalised to UTC."""
    parsed = parse_rfc3339(text)
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("2026-05-01", id="date-only"),
        pytest.param("2026-05-01T10:00:00", id="no-offset"),
        pytest.param("2026-05-01 10:00:00Z", id="space-separator"),
        pytest.param("2026-05-01T10:00Z", id="no-seconds"),
        pytest.param("2026-05-01T10:00:00.Z", id="dot-without-digits"),
        pytest.param("2026-05-01T10:00:00.1234567891Z", id="ten-digits"),
        pytest.param("2026-05-01T10:00:00+0200", id="offset-without-colon"),
        pytest.param("2026-05-01T10:00:00+02", id="offset-hours-only"),
        pytest.param("2026-05-01T10:00:00+24:00", id="offset-24h"),
        pytest.param("2026-05-01T10:00:00+02:60", id="offset-minute-60"),
        pytest.param("2026-13-01T10:00:00Z", id="month-13"),
        pytest.param("2026-02-29T10:00:00Z", id="not-a-leap-year"),
        pytest.param("2026-05-01T24:00:00Z", id="hour-24"),
        pytest.param("2026-05-01T10:60:00Z", id="minute-60"),
        pytest.param("2016-12-31T23:59:60Z", id="leap-second"),
        pytest.param("0000-01-01T00:00:00Z", id="year-zero"),
        pytest.param("0001-01-01T00:00:00+01:00", id="before-datetime-min"),
        pytest.param("2026-05-01T10:00:00Z\n", id="trailing-newline"),
        pytest.param(" 2026-05-01T10:00:00Z", id="leading-space"),
        pytest.param("\uff12\uff10\uff12\uff16-05-01T10:00:00Z", id="non-ascii-digits"),
        pytest.param("+2026-05-01T10:00:00Z", id="signed-year"),
    ],
)
def test_rfc3339_rejects(text):
    assert parse_rfc3339(text) is None


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="null"),
        pytest.param(1767225600, id="epoch-number"),
        pytest.param("tomorrow", id="prose"),
        pytest.param("2026-05-01T10:00:00", id="no-offset"),
    ],
)
def test_credential_expiry_when_present_must_be_rfc3339(value):
    """S3.4.6: present => RFC 3339; null counts as present and invalid."""
    assert invalid(answer(credential_expires_at=value)).startswith("S3.4.6")


def test_credential_expiry_decoded_when_present():
    delivery = decode_delivery(encode(answer(credential_expires_at="2026-05-01T10:00:00.25Z")))
    assert delivery.credential_expires_at == datetime(2026, 5, 1, 10, 0, 0, 250_000, tzinfo=UTC)
    assert decode_delivery(encode(answer())).credential_expires_at is None


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="null"),
        pytest.param(0, id="zero"),
        pytest.param(-3, id="negative"),
        pytest.param(2.0, id="float"),
        pytest.param(True, id="bool"),
        pytest.param("4", id="string"),
        pytest.param(2**63, id="over-int64"),
    ],
)
def test_pinned_revision_when_present_must_be_integer_from_one(value):
    """S3.4.6: integer >= 1; bool is not an integer."""
    assert invalid(answer(pinned_revision=value)).startswith("S3.4.6")


@pytest.mark.parametrize("value", [1, 42, 2**63 - 1])
def test_pinned_revision_decoded(value):
    assert decode_delivery(encode(answer(pinned_revision=value))).pinned_revision == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(DELETE, None, id="absent"),
        pytest.param(None, None, id="null"),
        pytest.param("status-report", None, id="string"),
        pytest.param({"status-report": True}, None, id="object"),
        pytest.param(["status-report", 1], None, id="mixed-array"),
        pytest.param(["status-report", None], None, id="array-with-null"),
        pytest.param([], frozenset(), id="empty-array"),
        pytest.param(["status-report"], frozenset({"status-report"}), id="known"),
        pytest.param(
            ["future", "status-report", "status-report"],
            frozenset({"future", "status-report"}),
            id="unknown-and-duplicates",
        ),
        pytest.param(["\ud800", "status-report"], frozenset({"status-report"}), id="surrogate"),
    ],
)
def test_capabilities_any_other_shape_is_absent(value, expected):
    """S3.4.6/S7.2: an array of strings is a set; any other shape is absent, never invalid."""
    assert decode_delivery(encode(answer(capabilities=value))).capabilities == expected


# --- hygiene (S0.4, S3.6) ------------------------------------------------------------


def test_repr_shows_neither_values_nor_cursor():
    """S0.4: a logged Delivery or key never carries a value or the cursor."""
    delivery = decode_delivery(encode(answer()))
    for text in (repr(delivery), str(delivery), repr(delivery.keys[0])):
        assert CANARY_VALUE not in text
        assert CANARY_CURSOR not in text
    assert "DATABASE_URL" in repr(delivery)


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(answer(keys=[key(presence="optional")]), id="value-on-declared"),
        pytest.param(answer(cursor=CANARY_CURSOR * 10), id="long-cursor"),
        pytest.param(answer(current=True), id="current-with-keys"),
        pytest.param(answer(keys=[key(name=CANARY_VALUE * 40)]), id="long-name"),
        pytest.param(answer(keys=[key(), key(value=CANARY_VALUE)]), id="duplicate"),
        pytest.param(answer(credential_expires_at=CANARY_VALUE), id="bad-timestamp"),
    ],
)
def test_invalid_response_text_and_chain_carry_no_values(doc):
    """S3.6: the message names the rule; no parser exception with the body is chained."""
    with pytest.raises(InvalidResponse) as caught:
        decode_delivery(encode(doc))
    error = caught.value
    assert isinstance(error, HikyoClientError)
    for text in (str(error), repr(error)):
        assert CANARY_VALUE not in text
        assert CANARY_CURSOR not in text
        assert "DATABASE_URL" not in text
    assert error.__cause__ is None


def test_parser_errors_are_not_kept_as_context():
    """A JSONDecodeError holds the whole body in .doc; it must not ride along."""
    body = b'{"cursor": "' + CANARY_CURSOR.encode() + b'", oops}'
    with pytest.raises(InvalidResponse) as caught:
        decode_delivery(body)
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None


# --- S3.5.1 --------------------------------------------------------------------------

NOT_FOUND = {"error": {"code": "not_found", "message": "not found"}}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(encode(NOT_FOUND), True, id="uniform-body"),
        pytest.param(encode({"error": {"code": "not_found"}, "x": 1}), True, id="minimal"),
        pytest.param(
            encode(NOT_FOUND) + b" " * (64 * 1024 - len(encode(NOT_FOUND))), True, id="64-kib"
        ),
        pytest.param(
            encode(NOT_FOUND) + b" " * (64 * 1024 + 1 - len(encode(NOT_FOUND))),
            False,
            id="over-64-kib",
        ),
        pytest.param(b"<html>404 Not Found</html>", False, id="proxy-page"),
        pytest.param(b"", False, id="empty"),
        pytest.param(encode([NOT_FOUND]), False, id="array"),
        pytest.param(encode({"error": "not_found"}), False, id="error-string"),
        pytest.param(encode({"error": {"code": "NOT_FOUND"}}), False, id="code-case"),
        pytest.param(encode({"error": {"code": ["not_found"]}}), False, id="code-list"),
        pytest.param(encode({"error": {"code": "conflict"}}), False, id="other-code"),
        pytest.param(encode({"code": "not_found"}), False, id="no-envelope"),
        pytest.param(
            b'{"error": {"code": "not_found"}, "error": {"code": "x"}}', False, id="duplicate"
        ),
        pytest.param(b"\xff" + encode(NOT_FOUND), False, id="not-utf8"),
    ],
)
def test_authoritative_not_found(body, expected):
    """S3.5.1: <= 64 KiB JSON object with error.code == "not_found"; anything doubtful is not."""
    assert is_authoritative_not_found(body) is expected


def test_error_code_reads_the_envelope():
    assert error_code(encode({"error": {"code": "conflict", "detail": None}})) == "conflict"
    assert error_code(b"nope") is None


def test_offset_timestamps_keep_their_instant():
    """S3.4.6: 10:00+01:00 is the same instant as 09:00Z."""
    tz = timezone(timedelta(hours=1))
    assert parse_rfc3339("2026-05-01T10:00:00+01:00") == datetime(2026, 5, 1, 10, tzinfo=tz)
