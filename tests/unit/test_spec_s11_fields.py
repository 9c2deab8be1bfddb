"""The run-time re-check of the S11.1 fields (S1.3.9 over S1.3.12-S1.3.15 and the S11.1 bounds)
for CRs an older CRD admitted, one case per rule and bound, and the CRD's enums and bounds tied
to the engine's so admission and the re-check cannot drift apart."""

from __future__ import annotations

import pytest

from k8s.crd_manifests import load_crd_manifests
from tests.support.factories import make_hikyosecret
from workers.engine import file_formats
from workers.engine.spec import (
    CREATION_POLICIES,
    FILE_FORMATS,
    MAX_TEMPLATE_BYTES,
    MAX_TEMPLATES,
    MAX_TEMPLATES_BYTES,
    MERGE_POLICIES,
    SpecInvalid,
    parse_spec,
)

TLS = "kubernetes.io/tls"


def _cr(**target):
    return make_hikyosecret("app", namespace="ns", target=target)


def _refusal(**target) -> str:
    with pytest.raises(SpecInvalid) as caught:
        parse_spec(_cr(**target))
    message = str(caught.value)
    assert message.startswith("invalid spec: ") and "\n" not in message
    return message


def _entries(count: int, text: str = "x") -> dict[str, str]:
    return {f"k{i}": text for i in range(count)}


def test_a_cr_without_s11_fields_has_none():
    spec = parse_spec(_cr())
    assert (spec.templates, spec.template_merge, spec.file_format, spec.format_key) == (
        (),
        False,
        None,
        None,
    )


def test_the_s11_fields_are_exposed():
    spec = parse_spec(_cr(template={"data": {"url": "u", "a.conf": "a"}, "mergePolicy": "Merge"}))
    assert spec.templates == (("a.conf", "a"), ("url", "u"))
    assert spec.template_merge is True
    spec = parse_spec(_cr(format="dotenv", formatKey=".env", creationPolicy="Merge"))
    assert (spec.file_format, spec.format_key, spec.creation_policy) == ("dotenv", ".env", "Merge")


def test_s1_3_12_template_and_format_together_are_refused():
    message = _refusal(template={"data": {"a": "x"}}, format="json", formatKey="a.json")
    assert "exclude each other" in message


def test_s1_3_12_format_on_a_typed_target_is_refused():
    assert "target.format requires target.type Opaque" in _refusal(
        type=TLS, format="yaml", formatKey="app.yaml"
    )


def test_s1_3_13_format_without_format_key_is_refused():
    assert "formatKey" in _refusal(format="json")


def test_s1_3_13_format_key_without_format_is_refused():
    assert "only with target.format" in _refusal(formatKey="app.json")


def test_s1_3_14_merge_on_a_typed_target_is_refused():
    assert "creationPolicy Merge requires target.type Opaque" in _refusal(
        type=TLS, creationPolicy="Merge"
    )


@pytest.mark.parametrize("key", [".", "..", "..data", "a/b", "", "k" * 254])
def test_s1_3_15_template_keys_follow_s1_3_11(key):
    assert "not a data key" in _refusal(template={"data": {key: "x"}})


@pytest.mark.parametrize("key", ["..", "a/b", ""])
def test_format_key_is_a_data_key(key):
    assert "formatKey" in _refusal(format="json", formatKey=key)


@pytest.mark.parametrize(
    ("data", "phrase"),
    [
        pytest.param({}, "1 to 64 entries", id="empty"),
        pytest.param(_entries(MAX_TEMPLATES + 1), "1 to 64 entries", id="65-entries"),
        pytest.param({"big": "x" * (MAX_TEMPLATE_BYTES + 1)}, "16 KiB", id="16KiB-plus-1"),
        # 8193 two-byte characters: under 16 Ki characters, over 16 KiB, as admission counts
        pytest.param({"big": "é" * (MAX_TEMPLATE_BYTES // 2 + 1)}, "16 KiB", id="utf8-bytes"),
        pytest.param(
            {**_entries(4, "x" * MAX_TEMPLATE_BYTES), "last": "x"}, "64 KiB", id="over-64KiB"
        ),
        pytest.param({"a": 3}, "16 KiB", id="not-text"),
    ],
)
def test_template_bounds_are_re_checked(data, phrase):
    assert phrase in _refusal(template={"data": data})


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_entries(MAX_TEMPLATES), id="64-entries"),
        pytest.param({"big": "x" * MAX_TEMPLATE_BYTES}, id="16KiB"),
        pytest.param(_entries(4, "é" * (MAX_TEMPLATE_BYTES // 2)), id="64KiB-in-utf8"),
        pytest.param({"a..b": "x", "._b": "y", ".env": "z"}, id="dots-inside-keys"),
    ],
)
def test_templates_at_their_bounds_are_accepted(data):
    assert len(parse_spec(_cr(template={"data": data})).templates) == len(data)


def test_unknown_enums_are_refused():
    assert "mergePolicy" in _refusal(template={"data": {"a": "x"}, "mergePolicy": "Union"})
    assert "target.format must be one of" in _refusal(format="toml", formatKey="a.toml")
    assert "Owner, Orphan or Merge" in _refusal(creationPolicy="Adopt")


# -- one source: the CRD's enums and bounds are the engine's ------------------------------------


def _target_schema() -> dict:
    crd = next(c for c in load_crd_manifests() if c["spec"]["names"]["kind"] == "HikyoSecret")
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root["properties"]["spec"]["properties"]["target"]["properties"]


def test_crd_enums_match_the_engine():
    target = _target_schema()
    assert tuple(target["creationPolicy"]["enum"]) == CREATION_POLICIES
    assert tuple(target["format"]["enum"]) == FILE_FORMATS == file_formats.FORMATS
    assert tuple(target["template"]["properties"]["mergePolicy"]["enum"]) == MERGE_POLICIES


def test_crd_template_bounds_match_the_engine_in_utf8_bytes():
    data = _target_schema()["template"]["properties"]["data"]
    assert (data["minProperties"], data["maxProperties"]) == (1, MAX_TEMPLATES)
    value = data["additionalProperties"]
    assert value["maxLength"] == MAX_TEMPLATE_BYTES
    assert [v["rule"] for v in value["x-kubernetes-validations"]] == [
        f"size(bytes(self)) <= {MAX_TEMPLATE_BYTES}"
    ]
    rules = [v["rule"] for v in data["x-kubernetes-validations"]]
    assert f"self.map(k, size(bytes(self[k]))).sum() <= {MAX_TEMPLATES_BYTES}" in rules
