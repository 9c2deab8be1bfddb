"""S4.4, S4.5, S4.7: content assembly over plain data."""

from __future__ import annotations

import pytest

from tests.support.factories import make_hikyosecret
from workers.engine.content import Content, ContentRefusal, assemble
from workers.engine.fetched import DeliveredKey
from workers.engine.spec import parse_spec


def _spec(**overrides):
    cr = make_hikyosecret("app", namespace="ns", **overrides)
    cr["metadata"]["uid"] = "uid-1"
    return parse_spec(cr)


def key(name, value="v", *, presence="set", classification="config"):
    return DeliveredKey(name, classification, presence, value)


MAPPING = [{"key": "A"}, {"key": "B", "secretKey": "b-dest"}]


@pytest.mark.parametrize(
    ("overrides", "keys", "expected"),
    [
        pytest.param(
            {"mapping": MAPPING},
            [key("A", "1"), key("B", "2")],
            Content({"A": b"1", "b-dest": b"2"}),
            id="mapped-with-rename",
        ),
        pytest.param(
            {"mapping": MAPPING},
            [key("A", "1"), key("B", "2"), key("C", "3")],
            Content({"A": b"1", "b-dest": b"2"}),
            id="unmapped-ignored",
        ),
        pytest.param(
            {"mapping": MAPPING},
            [key("A", "")],
            Content({"A": b""}, missing=("B",)),
            id="empty-string-is-a-value",
        ),
        pytest.param(
            {"mapping": MAPPING},
            [key("A", "1"), key("B", None, presence="required")],
            Content({"A": b"1"}, missing=("B",)),
            id="non-set-presence-is-absent",
        ),
        pytest.param(
            {"mapping": [{"key": "A", "secretKey": "1a"}]},
            [key("A", "x")],
            Content({"1a": b"x"}, env_skip=("1a",)),
            id="env-skip-leading-digit",
        ),
        pytest.param(
            {"mapping": [{"key": "A", "secretKey": "é"}]}, [key("A", "ü")], None, id="utf8-bytes"
        ),
    ],
)
def test_mapping_mode(overrides, keys, expected):
    if expected is None:  # invalid data key in the spec: parse refuses it first
        with pytest.raises(ValueError):
            _spec(**overrides)
        return
    assert assemble(_spec(**overrides), keys) == expected


def test_values_are_utf8_bytes_exactly():
    result = assemble(_spec(mapping=[{"key": "A"}]), [key("A", "naïve ✓\n")])
    assert result.data == {"A": "naïve ✓\n".encode()}


def test_presence_only_refuses_everything():
    result = assemble(
        _spec(mapping=MAPPING),
        [key("A", "1"), key("B", None, classification="secret")],
    )
    assert isinstance(result, ContentRefusal)
    assert result.reason == "UndeliveredSecrets" and "B" in result.message
    assert not result.withdraw_typed


def test_presence_only_beats_missing_typed_sources():
    spec = _spec(
        target={"type": "kubernetes.io/tls"},
        mapping=[{"key": "C", "secretKey": "tls.crt"}, {"key": "K", "secretKey": "tls.key"}],
    )
    result = assemble(spec, [key("C", None)])
    assert result.reason == "UndeliveredSecrets"


@pytest.mark.parametrize(
    ("type_", "mapping", "keys", "reason"),
    [
        pytest.param(
            "kubernetes.io/tls",
            [{"key": "C", "secretKey": "tls.crt"}, {"key": "K", "secretKey": "tls.key"}],
            [key("C")],
            "KeysMissing",
            id="tls-key-withdrawn",
        ),
        pytest.param(
            "kubernetes.io/basic-auth",
            [{"key": "U", "secretKey": "username"}, {"key": "P", "secretKey": "password"}],
            [key("U")],
            "KeysMissing",
            id="basic-auth-mapped-password-withdrawn",
        ),
        pytest.param(
            "kubernetes.io/ssh-auth",
            [{"key": "S", "secretKey": "ssh-privatekey"}],
            [],
            "KeysMissing",
            id="ssh-withdrawn",
        ),
    ],
)
def test_typed_withdrawal(type_, mapping, keys, reason):
    result = assemble(_spec(target={"type": type_}, mapping=mapping), keys)
    assert isinstance(result, ContentRefusal)
    assert result.reason == reason and result.withdraw_typed


def test_typed_extra_keys_may_go_missing():
    spec = _spec(
        target={"type": "kubernetes.io/basic-auth"},
        mapping=[{"key": "U", "secretKey": "username"}, {"key": "X"}],
    )
    assert assemble(spec, [key("U", "me")]) == Content({"username": b"me"}, missing=("X",))


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ('{"auths": {}}', True),
        ("{}", True),
        ("[]", False),
        ('"s"', False),
        ("{", False),
        ("null", False),
    ],
)
def test_docker_config_json_object(value, valid):
    spec = _spec(
        target={"type": "kubernetes.io/dockerconfigjson"},
        mapping=[{"key": "D", "secretKey": ".dockerconfigjson"}],
    )
    result = assemble(spec, [key("D", value)])
    assert isinstance(result, Content) is valid
    if not valid:
        assert result.reason == "InvalidSecretData" and ".dockerconfigjson" in result.message


def test_tls_content_is_not_checked():
    spec = _spec(
        target={"type": "kubernetes.io/tls"},
        mapping=[{"key": "C", "secretKey": "tls.crt"}, {"key": "K", "secretKey": "tls.key"}],
    )
    assert isinstance(assemble(spec, [key("C", "not pem"), key("K", "x")]), Content)


def test_size_limit_counts_value_bytes():
    spec = _spec(mapping=[{"key": "A"}, {"key": "B"}])
    at_limit = assemble(spec, [key("A", "x" * 524_288), key("B", "y" * 524_288)])
    assert isinstance(at_limit, Content)
    over = assemble(spec, [key("A", "x" * 524_288), key("B", "y" * 524_289)])
    assert over.reason == "InvalidSecretData"
    assert "1048577 bytes exceeds 1048576" in over.message


ALL = {"allKeys": True, "mapping": None}


def test_all_keys_delivers_every_carried_key():
    result = assemble(
        _spec(**ALL), [key("A", "1"), key("B", "2"), key("C", None, presence="optional")]
    )
    assert result == Content({"A": b"1", "B": b"2"})


def test_all_keys_empty_manifest_is_empty_data():
    assert assemble(_spec(**ALL), []) == Content({})


@pytest.mark.parametrize(
    ("keys", "reason", "named"),
    [
        pytest.param([key("A", None)], "UndeliveredSecrets", "A", id="presence-only"),
        pytest.param([key("a/b", "1")], "InvalidSecretData", "a/b", id="not-a-data-key"),
        pytest.param([key("..x", "1")], "InvalidSecretData", "..x", id="dotdot-prefix"),
        pytest.param(
            [key("PATH", "/bin")],
            "LoaderControlUnacknowledged",
            "PATH",
            id="unacknowledged-loader-key",
        ),
    ],
)
def test_all_keys_refusals(keys, reason, named):
    result = assemble(_spec(**ALL), keys)
    assert isinstance(result, ContentRefusal)
    assert result.reason == reason and named in result.message


def test_all_keys_acknowledged_loader_key_and_absent_acknowledgements():
    spec = _spec(**ALL, acknowledgedLoaderKeys=["PATH", "LD_PRELOAD"])
    assert assemble(spec, [key("PATH", "/bin")]) == Content({"PATH": b"/bin"})


def test_refusal_messages_never_carry_values():
    secret_value = "CANARY-do-not-show"
    for keys in ([key("A", secret_value), key("B", None)], [key("PATH", secret_value)]):
        result = assemble(_spec(**ALL), keys)
        assert secret_value not in result.message
        assert secret_value not in repr(result)
