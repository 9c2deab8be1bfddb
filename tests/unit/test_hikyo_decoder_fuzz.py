"""S3.4 under fuzzing: the decoder raises only InvalidResponse and never returns a Delivery
that breaks S3.4, whatever bytes or near-valid objects the server sends."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from hikyo.delivery import CLASSIFICATIONS, PRESENCES, decode_delivery
from workers.engine.errors import InvalidResponse
from workers.engine.fetched import DeliveredKey, Delivery

FUZZ = settings(
    max_examples=1000,
    deadline=None,
    database=None,  # no .hypothesis directory in the work tree
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

KNOWN_MEMBERS = (
    "current",
    "cursor",
    "change_token",
    "schema_revision",
    "pin_expired",
    "keys",
    "credential_expires_at",
    "pinned_revision",
    "capabilities",
)
KNOWN_KEY_MEMBERS = ("name", "classification", "presence", "value")

# --- building blocks -----------------------------------------------------------------

# Strings that sit on S3.4's edges: empty, bounds +-1, surrogates, controls, near-enums.
weird_text = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(exclude_categories=()), max_size=8),  # lone surrogates too
    st.sampled_from(
        ["", " ", "set", "SET", "secret ", "config", "null", "true", "0", "\x00", "\u202e"]
    ),
    st.integers(0, 3).map(lambda n: "c" * (127 + n)),  # cursor 127..130
    st.integers(0, 3).map(lambda n: "N" * (255 + n)),  # name 255..258
    st.sampled_from(
        [
            "2026-05-01T10:00:00Z",
            "2026-05-01T10:00:00.1234567891Z",
            "2026-02-30T10:00:00Z",
            "2016-12-31T23:59:60Z",
            "2026-05-01T10:00:00+24:00",
            "9999-12-31T23:59:59-23:59",
        ]
    ),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, 2**64]),
    st.floats(allow_nan=False, allow_infinity=False),
    weird_text,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(weird_text, inner, max_size=3),
    max_leaves=6,
)

valid_name = st.text(min_size=1, max_size=20).filter(
    lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)
)


@st.composite
def valid_key(draw: st.DrawFn, name: str) -> dict[str, Any]:
    presence = draw(st.sampled_from(sorted(PRESENCES)))
    entry = {
        "key_id": "key_x",
        "name": name,
        "classification": draw(st.sampled_from(sorted(CLASSIFICATIONS))),
        "presence": presence,
    }
    if presence == "set" and draw(st.booleans()):
        entry["value"] = draw(st.text(max_size=20))
    return entry


@st.composite
def valid_delivery(draw: st.DrawFn) -> dict[str, Any]:
    current = draw(st.booleans())
    names = [] if current else draw(st.lists(valid_name, unique=True, max_size=4))
    doc: dict[str, Any] = {
        "current": current,
        "cursor": draw(st.text(alphabet=st.characters(codec="utf-8"), max_size=128)),
        "change_token": draw(st.text(max_size=10)),
        "schema_revision": draw(st.integers(0, 2**63 - 1)),
        "pin_expired": draw(st.booleans()),
        "keys": [draw(valid_key(name)) for name in names],
    }
    if draw(st.booleans()):
        doc["pinned_revision"] = draw(st.integers(1, 2**63 - 1))
    if draw(st.booleans()):
        doc["credential_expires_at"] = "2026-05-01T10:00:00.123Z"
    if draw(st.booleans()):
        doc["capabilities"] = draw(st.lists(st.sampled_from(["status-report", "x"]), max_size=3))
    return doc


ACTIONS = ("delete", "null", "replace", "add-key", "retarget-presence", "copy-key", "set-current")


@st.composite
def perturbed_delivery(draw: st.DrawFn) -> dict[str, Any]:
    """A valid delivery with a few members deleted, nulled, retyped or added, plus
    targeted moves towards S3.4.3-5 (a value on a declared key, a repeated name,
    current with keys) so those rules are exercised on every run."""
    doc = draw(valid_delivery())
    for _ in range(draw(st.integers(1, 4))):
        keys = doc.get("keys")
        entries = [k for k in keys if isinstance(k, dict)] if isinstance(keys, list) else []
        target = draw(st.sampled_from([doc, *entries]))
        members = KNOWN_MEMBERS if target is doc else KNOWN_KEY_MEMBERS
        member = draw(st.sampled_from(members) | weird_text)
        action = draw(st.sampled_from(ACTIONS))
        if action == "delete":
            target.pop(member, None)
        elif action == "null":
            target[member] = None
        elif action == "replace":
            target[member] = draw(st.one_of(weird_text, json_values))
        elif action == "add-key" and isinstance(keys, list):
            keys.append(draw(st.one_of(json_values, valid_key(draw(valid_name)))))
        elif action == "retarget-presence" and target is not doc:
            target["presence"] = draw(st.sampled_from(sorted(PRESENCES)))
            target["value"] = draw(st.text(max_size=5))
        elif action == "copy-key" and entries:
            keys.append(dict(draw(st.sampled_from(entries))))
        elif action == "set-current":
            doc["current"] = True
    return doc


def encode(doc: Any) -> bytes:
    return json.dumps(doc).encode()  # ensure_ascii: lone surrogates become \\ud800 escapes


def mutate_bytes(body: bytes, data: st.DataObject) -> bytes:
    edits = data.draw(st.lists(st.tuples(st.integers(0, len(body)), st.binary(max_size=3))))
    for position, insert in edits:
        drop = data.draw(st.integers(0, 2))
        body = body[:position] + insert + body[position + drop :]
    return body


# --- the invariant -------------------------------------------------------------------


def assert_satisfies_s34(delivery: Delivery) -> None:
    """What every returned Delivery guarantees to the reconcile (S3.4 items 2-7)."""
    assert type(delivery.current) is bool
    assert type(delivery.pin_expired) is bool
    assert isinstance(delivery.cursor, str) and len(delivery.cursor) <= 128
    delivery.cursor.encode("utf-8")
    assert type(delivery.schema_revision) is int and delivery.schema_revision >= 0
    assert isinstance(delivery.keys, tuple)
    if delivery.current:
        assert delivery.keys == ()
    names = [key.name for key in delivery.keys]
    assert len(set(names)) == len(names)
    for key in delivery.keys:
        assert isinstance(key, DeliveredKey)
        assert isinstance(key.name, str) and 1 <= len(key.name) <= 256
        key.name.encode("utf-8")
        assert key.classification in CLASSIFICATIONS
        assert key.presence in PRESENCES
        assert key.value is None or isinstance(key.value, str)
        if key.presence != "set":
            assert key.value is None
            assert not key.carried
    if delivery.pinned_revision is not None:
        assert type(delivery.pinned_revision) is int and delivery.pinned_revision >= 1
    if delivery.credential_expires_at is not None:
        assert delivery.credential_expires_at.utcoffset() == timedelta(0)
    if delivery.capabilities is not None:
        assert isinstance(delivery.capabilities, frozenset)
        assert all(isinstance(item, str) for item in delivery.capabilities)


def decode_or_invalid(body: bytes) -> Delivery | None:
    """Only InvalidResponse may escape; a returned Delivery must satisfy S3.4."""
    try:
        delivery = decode_delivery(body)
    except InvalidResponse as error:
        assert str(error).startswith("S3.4")
        event(str(error).partition(":")[0])  # which rule fired (--hypothesis-show-statistics)
        return None
    event("decoded")
    assert_satisfies_s34(delivery)
    return delivery


# --- properties ----------------------------------------------------------------------


@FUZZ
@given(body=st.binary(max_size=512))
def test_arbitrary_bytes(body):
    decode_or_invalid(body)


@FUZZ
@given(doc=st.one_of(perturbed_delivery(), json_values))
def test_perturbed_objects(doc):
    decode_or_invalid(encode(doc))


@FUZZ
@given(doc=valid_delivery(), data=st.data())
def test_mutated_valid_bodies(doc, data):
    decode_or_invalid(mutate_bytes(encode(doc), data))


@FUZZ
@given(
    doc=valid_delivery(),
    extra=st.dictionaries(
        weird_text.filter(lambda name: name not in KNOWN_MEMBERS), json_values, max_size=3
    ),
    key_extra=st.dictionaries(
        weird_text.filter(lambda name: name not in KNOWN_KEY_MEMBERS), json_values, max_size=3
    ),
)
def test_valid_answers_decode_faithfully_and_ignore_unknown_members(doc, extra, key_extra):
    """S3.4: a valid answer decodes to its own members; unknown members change nothing."""
    plain = decode_delivery(encode(doc))
    assert_satisfies_s34(plain)
    assert plain.current == doc["current"]
    assert plain.cursor == doc["cursor"]
    assert plain.schema_revision == doc["schema_revision"]
    assert [(k.name, k.presence, k.value) for k in plain.keys] == [
        (k["name"], k["presence"], k.get("value")) for k in doc["keys"]
    ]
    noisy = {**extra, **doc, "keys": [{**key_extra, **k} for k in doc["keys"]]}
    assert decode_delivery(encode(noisy)) == plain
