"""Admission of HikyoSecret and HikyoInstance by the real kube-apiserver (S1.1, S1.3).

Every invalid manifest must be rejected with HTTP 422 and a message that names the offending
field; every valid one must be accepted with the schema defaults of S1.2 applied.
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.factories import (
    DELETE,
    GROUP,
    VERSION,
    make_hikyoinstance,
    make_hikyosecret,
)
from workers.engine.loader_control import PROTECTED_NAMES, PROTECTED_PREFIXES

pytestmark = pytest.mark.usefixtures("crds")


def _create_secret(api_client: client.ApiClient, namespace: str, body: dict) -> dict:
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", body
    )


def _rejection(call) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        call()
    body = json.loads(caught.value.body)
    return caught.value.status, body["message"]


def _mapping(count: int) -> list[dict]:
    return [{"key": f"KEY_{i}"} for i in range(count)]


def _templates(count: int, text: str) -> dict[str, str]:
    """S11.1 template.data: ``count`` entries holding ``text``."""
    return {f"k{i}": text for i in range(count)}


INVALID_SECRETS = [
    # S1.3.1 auth: exactly one of secretRef / serviceAccountRef
    pytest.param(
        {"auth": {"serviceAccountRef": {"name": "builder"}}}, "spec.auth", id="auth-both-refs"
    ),
    pytest.param({"auth": {"secretRef": DELETE}}, "spec.auth", id="auth-no-ref"),
    pytest.param({"auth": DELETE}, "spec.auth", id="auth-missing"),
    pytest.param(
        {"auth": {"secretRef": {"name": ""}}},
        "spec.auth.secretRef.name",
        id="auth-secretref-empty-name",
    ),
    pytest.param(
        {"auth": {"secretRef": DELETE, "serviceAccountRef": {"name": "x" * 254}}},
        "spec.auth.serviceAccountRef.name",
        id="auth-saref-name-too-long",
    ),
    # S1.2 instanceRef
    pytest.param({"instanceRef": DELETE}, "spec.instanceRef", id="instance-missing"),
    pytest.param({"instanceRef": {"name": ""}}, "spec.instanceRef.name", id="instance-empty"),
    pytest.param(
        {"instanceRef": {"name": "i" * 254}}, "spec.instanceRef.name", id="instance-too-long"
    ),
    # S1.3.8 scope grammar
    pytest.param({"scope": {"org": "org-01900000"}}, "spec.scope.org", id="scope-org-grammar"),
    pytest.param({"scope": {"project": DELETE}}, "spec.scope.project", id="scope-project-missing"),
    pytest.param(
        {"scope": {"environment": "ENV_01900000-0000-7000-8000-000000000003"}},
        "spec.scope.environment",
        id="scope-environment-uppercase-prefix",
    ),
    pytest.param(
        {"scope": {"org": "o_01900000-0000-7000-8000-000000000001"}},
        "spec.scope.org",
        id="scope-prefix-too-short",
    ),
    # S1.3.3 allKeys XOR non-empty mapping
    pytest.param({"mapping": []}, "spec.mapping", id="mapping-empty-no-allkeys"),
    pytest.param({"mapping": DELETE}, "spec.mapping", id="neither-mapping-nor-allkeys"),
    pytest.param({"allKeys": True}, "spec.mapping", id="allkeys-and-mapping"),
    pytest.param({"allKeys": False, "mapping": DELETE}, "spec.mapping", id="allkeys-false-alone"),
    # S1.3.4 allKeys only with Opaque
    pytest.param(
        {"allKeys": True, "mapping": DELETE, "target": {"type": "kubernetes.io/tls"}},
        "spec.target.type",
        id="allkeys-typed-target",
    ),
    # S1.3.5 known types only
    pytest.param(
        {"target": {"type": "kubernetes.io/service-account-token"}},
        "spec.target.type",
        id="type-service-account-token",
    ),
    pytest.param(
        {"target": {"type": "bootstrap.kubernetes.io/token"}},
        "spec.target.type",
        id="type-bootstrap-token",
    ),
    pytest.param({"target": {"type": "opaque"}}, "spec.target.type", id="type-wrong-case"),
    # S1.2 target
    pytest.param({"target": {"name": "App-Env"}}, "spec.target.name", id="target-uppercase"),
    pytest.param({"target": {"name": "a" * 64}}, "spec.target.name", id="target-too-long"),
    pytest.param({"target": {"name": "app_env"}}, "spec.target.name", id="target-underscore"),
    pytest.param({"target": {"name": DELETE}}, "spec.target.name", id="target-name-missing"),
    pytest.param(
        {"target": {"creationPolicy": "Delete"}},
        "spec.target.creationPolicy",
        id="creation-policy-unknown",
    ),
    pytest.param({"projection": "partial"}, "spec.projection", id="projection-unknown"),
    pytest.param({"allKeys": "yes"}, "spec.allKeys", id="allkeys-not-boolean"),
    # S1.3.8 mapping item grammar
    pytest.param(
        {"mapping": [{"key": "database_url"}]}, "spec.mapping[0].key", id="mapping-key-lowercase"
    ),
    pytest.param(
        {"mapping": [{"key": "1KEY"}]}, "spec.mapping[0].key", id="mapping-key-leading-digit"
    ),
    pytest.param(
        {"mapping": [{"key": "K" * 129}]}, "spec.mapping[0].key", id="mapping-key-too-long"
    ),
    pytest.param(
        {"mapping": [{"secretKey": "orphan"}]}, "spec.mapping[0].key", id="mapping-key-missing"
    ),
    pytest.param(
        {"mapping": [{"key": "A", "secretKey": "a/b"}]},
        "spec.mapping[0].secretKey",
        id="secretkey-slash",
    ),
    pytest.param(
        {"mapping": [{"key": "A", "secretKey": "x" * 254}]},
        "spec.mapping[0].secretKey",
        id="secretkey-too-long",
    ),
    # S1.3.11
    pytest.param(
        {"mapping": [{"key": "A", "secretKey": "."}]},
        "spec.mapping[0].secretKey",
        id="secretkey-dot",
    ),
    pytest.param(
        {"mapping": [{"key": "A", "secretKey": ".."}]},
        "spec.mapping[0].secretKey",
        id="secretkey-dotdot",
    ),
    pytest.param(
        {"mapping": [{"key": "A", "secretKey": "..data"}]},
        "spec.mapping[0].secretKey",
        id="secretkey-dotdot-prefix",
    ),
    # S1.3.6 effective secretKey unique
    pytest.param(
        {"mapping": [{"key": "A"}, {"key": "A"}]}, "spec.mapping", id="duplicate-effective-key"
    ),
    pytest.param(
        {"mapping": [{"key": "A"}, {"key": "B", "secretKey": "A"}]},
        "spec.mapping",
        id="secretkey-collides-with-key",
    ),
    pytest.param({"mapping": _mapping(257)}, "spec.mapping", id="mapping-too-many"),
    # S1.3.7 acknowledgements
    pytest.param(
        {"acknowledgedLoaderKeys": ["LD_*"]}, "spec.acknowledgedLoaderKeys[0]", id="ack-wildcard"
    ),
    pytest.param(
        {"acknowledgedLoaderKeys": ["DATABASE_URL"]},
        "spec.acknowledgedLoaderKeys[0]",
        id="ack-unprotected",
    ),
    pytest.param(
        {"acknowledgedLoaderKeys": ["LDAP_URL"]},
        "spec.acknowledgedLoaderKeys[0]",
        id="ack-ld-without-underscore",
    ),
    pytest.param(
        {"acknowledgedLoaderKeys": ["PATH", "PATH"]},
        "spec.acknowledgedLoaderKeys[1]",
        id="ack-duplicate",
    ),
    pytest.param(
        {"acknowledgedLoaderKeys": [f"LD_X{i}" for i in range(65)]},
        "spec.acknowledgedLoaderKeys",
        id="ack-too-many",
    ),
    # S1.3.10 resyncInterval
    pytest.param({"resyncInterval": "5s"}, "spec.resyncInterval", id="resync-below-10s"),
    pytest.param({"resyncInterval": "0s"}, "spec.resyncInterval", id="resync-zero"),
    pytest.param({"resyncInterval": "5 minutes"}, "spec.resyncInterval", id="resync-grammar"),
    pytest.param({"resyncInterval": "9999999999h"}, "spec.resyncInterval", id="resync-overflow"),
    pytest.param({"resyncInterval": "-1m"}, "spec.resyncInterval", id="resync-negative"),
    # S1.3.12-S1.3.15 (S11.1)
    pytest.param(
        {"target": {"template": {"data": {"a": "x"}}, "format": "json", "formatKey": "f"}},
        "exclude each other",
        id="template-and-format",
    ),
    pytest.param(
        {
            "target": {"type": "kubernetes.io/tls", "format": "yaml", "formatKey": "f"},
            "mapping": [{"key": "C", "secretKey": "tls.crt"}, {"key": "K", "secretKey": "tls.key"}],
        },
        "target.format requires target.type Opaque",
        id="format-typed",
    ),
    pytest.param({"target": {"format": "json"}}, "formatKey is required", id="format-no-key"),
    pytest.param({"target": {"formatKey": "f"}}, "formatKey is required", id="formatkey-alone"),
    pytest.param(
        {"target": {"format": "toml", "formatKey": "f"}}, "spec.target.format", id="format-unknown"
    ),
    pytest.param(
        {
            "target": {"type": "kubernetes.io/tls", "creationPolicy": "Merge"},
            "mapping": [{"key": "C", "secretKey": "tls.crt"}, {"key": "K", "secretKey": "tls.key"}],
        },
        "creationPolicy Merge requires target.type Opaque",
        id="merge-typed",
    ),
    pytest.param(
        {"target": {"template": {"data": {"..x": "y"}}}},
        "template keys must be Secret data keys",
        id="template-key-dotdot",
    ),
    pytest.param(
        {"target": {"template": {"data": {}}}}, "spec.target.template.data", id="template-empty"
    ),
    pytest.param(
        {"target": {"template": {"data": {f"k{i}": "x" for i in range(65)}}}},
        "spec.target.template.data",
        id="template-65-entries",
    ),
    pytest.param(
        {"target": {"template": {"data": {"k": "x" * 16385}}}},
        "spec.target.template.data",
        id="template-over-16k",
    ),
    pytest.param(
        {"target": {"template": {"data": {f"k{i}": "x" * 16384 for i in range(5)}}}},
        "at most 64 KiB together",
        id="templates-over-64k",
    ),
    pytest.param(
        {"target": {"template": {"data": {"a": "x"}, "mergePolicy": "Append"}}},
        "spec.target.template.mergePolicy",
        id="template-merge-policy",
    ),
    pytest.param(
        {"target": {"template": {"data": {"..": "y"}}}},
        "template keys must be Secret data keys",
        id="template-key-dotdot-exact",
    ),
    pytest.param(
        {"target": {"template": {"data": {".": "y"}}}},
        "template keys must be Secret data keys",
        id="template-key-dot",
    ),
    pytest.param(
        {"target": {"template": {"data": {"a/b": "y"}}}},
        "template keys must be Secret data keys",
        id="template-key-slash",
    ),
    pytest.param(
        {"target": {"template": {"data": {"k" * 254: "y"}}}},
        "template keys must be Secret data keys",
        id="template-key-too-long",
    ),
    pytest.param({"target": {"template": {}}}, "spec.target.template.data", id="template-no-data"),
    # 16 KiB and 64 KiB are UTF-8 bytes, as the run-time re-check counts them: 'é' is two
    pytest.param(
        {"target": {"template": {"data": {"k": "\u00e9" * 8193}}}},
        "at most 16 KiB (UTF-8 bytes)",
        id="template-over-16KiB-in-utf8",
    ),
    pytest.param(
        {"target": {"template": {"data": {**_templates(4, "\u00e9" * 8192), "last": "x"}}}},
        "at most 64 KiB together",
        id="templates-over-64KiB-in-utf8",
    ),
    pytest.param(
        {"target": {"format": "json", "formatKey": ".."}},
        "formatKey must not be",
        id="formatkey-dotdot",
    ),
    pytest.param(
        {"target": {"format": "json", "formatKey": "a/b"}},
        "spec.target.formatKey",
        id="formatkey-slash",
    ),
]


@pytest.mark.parametrize(("spec", "field"), INVALID_SECRETS)
def test_invalid_hikyosecret_is_rejected_naming_the_field(api_client, namespace, spec, field):
    """S1.3: each invalid manifest gets 422 with the offending field in the message."""
    status, message = _rejection(
        lambda: _create_secret(api_client, namespace, make_hikyosecret("bad", **spec))
    )
    assert status == 422, message
    assert field in message, message


def test_missing_spec_is_rejected(api_client, namespace):
    body = make_hikyosecret("bad")
    del body["spec"]
    status, message = _rejection(lambda: _create_secret(api_client, namespace, body))
    assert status == 422
    assert "spec" in message


VALID_SECRETS = [
    pytest.param({}, id="minimal-mapping"),
    pytest.param({"allKeys": True, "mapping": DELETE}, id="all-keys"),
    pytest.param({"allKeys": False}, id="explicit-allkeys-false"),
    pytest.param(
        {"auth": {"secretRef": DELETE, "serviceAccountRef": {"name": "builder"}}},
        id="service-account-federation",
    ),
    pytest.param(
        {
            "target": {"type": "kubernetes.io/tls"},
            "mapping": [
                {"key": "CERT", "secretKey": "tls.crt"},
                {"key": "KEY", "secretKey": "tls.key"},
            ],
        },
        id="tls",
    ),
    pytest.param(
        {
            "target": {"type": "kubernetes.io/dockerconfigjson"},
            "mapping": [{"key": "DOCKER", "secretKey": ".dockerconfigjson"}],
        },
        id="dockerconfigjson",
    ),
    pytest.param(
        {
            "target": {"type": "kubernetes.io/dockercfg"},
            "mapping": [{"key": "DOCKER", "secretKey": ".dockercfg"}],
        },
        id="dockercfg",
    ),
    pytest.param(
        {
            "target": {"type": "kubernetes.io/basic-auth"},
            "mapping": [{"key": "USER", "secretKey": "username"}],
        },
        id="basic-auth",
    ),
    pytest.param(
        {
            "target": {"type": "kubernetes.io/ssh-auth"},
            "mapping": [{"key": "SSH", "secretKey": "ssh-privatekey"}],
        },
        id="ssh-auth",
    ),
    pytest.param(
        {
            "mapping": [{"key": "PATH"}, {"key": "LD_PRELOAD"}, {"key": "GIT_SSH"}],
            "acknowledgedLoaderKeys": ["PATH", "LD_PRELOAD", "GIT_SSH"],
        },
        id="acknowledged-loader-keys",
    ),
    pytest.param({"acknowledgedLoaderKeys": sorted(PROTECTED_NAMES)}, id="every-baseline-name"),
    pytest.param({"resyncInterval": "10s"}, id="resync-minimum"),
    pytest.param({"resyncInterval": "1h30m"}, id="resync-compound"),
    pytest.param({"resyncInterval": "10000ms"}, id="resync-milliseconds"),
    pytest.param({"resyncInterval": "0.5h"}, id="resync-fraction"),
    pytest.param(
        {"projection": "config-only", "target": {"creationPolicy": "Orphan"}},
        id="config-only-orphan",
    ),
    pytest.param({"mapping": _mapping(256)}, id="mapping-256"),
    pytest.param(
        {"mapping": [{"key": "A", "secretKey": "a..b"}, {"key": "B", "secretKey": "._b"}]},
        id="secretkey-dots-inside",
    ),
    pytest.param({"acknowledgedLoaderKeys": [f"LD_X{i}" for i in range(64)]}, id="ack-64"),
    pytest.param(
        {"target": {"template": {"data": {f"k{i}": "x" * 1024 for i in range(64)}}}},
        id="template-64-entries",
    ),
    pytest.param(
        {"target": {"template": {"data": {"url": "{{ A }}"}, "mergePolicy": "Merge"}}},
        id="template-merge",
    ),
    pytest.param({"target": {"format": "dotenv", "formatKey": ".env"}}, id="format-dotenv"),
    pytest.param({"target": {"creationPolicy": "Merge"}}, id="creation-policy-merge"),
    pytest.param(
        {"target": {"template": {"data": {"a..b": "x", "._b": "y", ".env": "z"}}}},
        id="template-keys-dots-inside",
    ),
    pytest.param(
        {"target": {"template": {"data": _templates(4, "\u00e9" * 8192)}}},
        id="templates-64KiB-in-utf8",
    ),
    pytest.param(
        {
            "target": {
                "type": "kubernetes.io/dockerconfigjson",
                "template": {"data": {".dockerconfigjson": "{{ dockerconfigjson(R, U, P) }}"}},
            }
        },
        id="template-typed-target",
    ),
    pytest.param(
        {"allKeys": True, "mapping": DELETE, "target": {"format": "yaml", "formatKey": "a.yaml"}},
        id="all-keys-format",
    ),
    pytest.param(
        {
            "target": {
                "creationPolicy": "Merge",
                "format": "properties",
                "formatKey": "app.properties",
            }
        },
        id="merge-format",
    ),
    # every S11.1 bound at once stays within the CEL cost limits
    pytest.param(
        {
            "target": {
                "template": {
                    "data": {f"{i:02d}".rjust(253, "k"): "x" * 1024 for i in range(64)},
                    "mergePolicy": "Merge",
                }
            }
        },
        id="template-maximal",
    ),
]

DEFAULTS = {
    ("projection",): "full",
    ("target", "creationPolicy"): "Owner",
    ("target", "type"): "Opaque",
    ("resyncInterval",): "5m",
    ("allKeys",): False,
}
TEMPLATE_DEFAULTS = {("target", "template", "mergePolicy"): "Replace"}


@pytest.mark.parametrize("spec", VALID_SECRETS)
def test_valid_hikyosecret_is_accepted_with_defaults(api_client, namespace, spec):
    """S1.2: valid manifests are admitted; omitted fields get the schema defaults."""
    body = make_hikyosecret("good", **spec)
    created = _create_secret(api_client, namespace, body)["spec"]
    defaults = {**DEFAULTS, **(TEMPLATE_DEFAULTS if "template" in created["target"] else {})}
    for path, default in defaults.items():
        sent = body["spec"]
        for part in path:
            sent = sent.get(part, {}) if isinstance(sent, dict) else {}
        got = created
        for part in path:
            got = got[part]
        expected = default if sent == {} else sent
        assert got == expected, (path, got)
    # S11.1 fields are kept as sent, not pruned.
    sent_target, created_target = body["spec"]["target"], created["target"]
    for field in ("format", "formatKey"):
        assert created_target.get(field) == sent_target.get(field), field
    if "template" in sent_target:
        assert created_target["template"]["data"] == sent_target["template"]["data"]
    # The operator applies secretKey = key itself (S1.2); the API server must not.
    if "mapping" in created:
        sent_mapping = body["spec"]["mapping"]
        assert [("secretKey" in m) for m in created["mapping"]] == [
            ("secretKey" in m) for m in sent_mapping
        ]


def _maximal_spec() -> dict:
    """Every S1.2 field at its bound: 256 mapping entries with 128-char keys and 253-char
    secretKeys, 253-char names, 45-char scope IDs, a 63-char target, 64 128-char acks."""

    def scope_id(n: int) -> str:
        return f"abcdefgh_01900000-0000-7000-8000-00000000000{n}"

    return {
        "instanceRef": {"name": "i" * 253},
        "auth": {"secretRef": {"name": "s" * 253}},
        "scope": {"org": scope_id(1), "project": scope_id(2), "environment": scope_id(3)},
        "mapping": [
            {"key": f"K{i:03d}".ljust(128, "_"), "secretKey": f"{i:03d}".rjust(253, "x")}
            for i in range(256)
        ],
        "allKeys": False,
        "target": {
            "name": "t" * 63,
            "type": "kubernetes.io/dockerconfigjson",  # the longest known type
            "creationPolicy": "Orphan",
        },
        "projection": "config-only",
        "acknowledgedLoaderKeys": [f"LD_{i:03d}".ljust(128, "_") for i in range(64)],
        "resyncInterval": "1h" + "0s" * 31,  # 64 characters, the pattern's bound
    }


def test_maximal_hikyosecret_is_admitted(api_client, namespace):
    """S1.2/S1.3: the largest valid manifest stays within the CEL cost limits (the pairwise
    S1.3.6 rule failed here with "operation cancelled: actual cost limit exceeded")."""
    spec = _maximal_spec()
    assert len(spec["resyncInterval"]) == 64
    body = make_hikyosecret("maximal", **spec)
    created = _create_secret(api_client, namespace, body)["spec"]
    assert created == body["spec"]


@pytest.mark.parametrize(
    ("first", "second"),
    [(0, 1), (0, 255), (63, 64), (100, 140), (127, 128), (191, 192), (254, 255)],
)
def test_duplicate_destination_anywhere_in_a_maximal_mapping_is_rejected(
    api_client, namespace, first, second
):
    """S1.3.6 holds at every position, across the rules that split the check."""
    spec = _maximal_spec()
    spec["mapping"][second]["secretKey"] = spec["mapping"][first]["secretKey"]
    status, message = _rejection(
        lambda: _create_secret(api_client, namespace, make_hikyosecret("bad", **spec))
    )
    assert status == 422, message
    assert "spec.mapping" in message and "must be unique" in message, message


def test_key_colliding_with_a_secretkey_far_away_is_rejected(api_client, namespace):
    """S1.3.6: an entry without secretKey delivers under its key, which may collide."""
    spec = _maximal_spec()
    spec["mapping"][250] = {"key": "SHARED"}
    spec["mapping"][3]["secretKey"] = "SHARED"
    status, message = _rejection(
        lambda: _create_secret(api_client, namespace, make_hikyosecret("bad", **spec))
    )
    assert status == 422, message
    assert "spec.mapping" in message and "must be unique" in message, message


def test_target_name_is_immutable(api_client, namespace):
    """S1.3.2: target.name cannot change; instanceRef.name can (S2.5)."""
    api = client.CustomObjectsApi(api_client)
    _create_secret(api_client, namespace, make_hikyosecret("app"))
    api.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "hikyosecrets", "app", {"spec": {"instanceRef": {"name": "b"}}}
    )
    status, message = _rejection(
        lambda: api.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "hikyosecrets", "app", {"spec": {"target": {"name": "x"}}}
        )
    )
    assert status == 422
    assert "spec.target.name" in message and "immutable" in message


def test_acknowledgement_rule_covers_every_protected_name():
    """S8.7: the CRD's S1.3.7 rule and the engine's protected set come from one list."""
    from k8s.crd_manifests import load_crd_manifests

    crd = next(c for c in load_crd_manifests() if c["spec"]["names"]["kind"] == "HikyoSecret")
    items = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["acknowledgedLoaderKeys"]["items"]
    rule = items["x-kubernetes-validations"][0]["rule"]
    for name in PROTECTED_NAMES:
        assert f"'{name}'" in rule
    for prefix in PROTECTED_PREFIXES:
        assert f"self.startsWith('{prefix}')" in rule


# --- HikyoInstance (S1.1) ---------------------------------------------------------------------

CA_BUNDLE = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")


def _instances(api_client):
    return client.CustomObjectsApi(api_client)


def _create_instance(api_client, body: dict) -> dict:
    return _instances(api_client).create_cluster_custom_object(
        GROUP, VERSION, "hikyoinstances", body
    )


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


INVALID_INSTANCES = [
    pytest.param({"url": "http://hikyo.example.test"}, "spec.url", id="url-http"),
    pytest.param({"url": "hikyo.example.test"}, "spec.url", id="url-no-scheme"),
    pytest.param({"url": "HTTPS://hikyo.example.test"}, "spec.url", id="url-uppercase-scheme"),
    pytest.param({"url": ""}, "spec.url", id="url-empty"),
    pytest.param({"url": "https://" + "h" * 2041}, "spec.url", id="url-too-long"),
    pytest.param({"url": DELETE}, "spec.url", id="url-missing"),
    pytest.param({"caBundle": "not base64!"}, "spec.caBundle", id="cabundle-not-base64"),
    pytest.param({"audience": "a" * 513}, "spec.audience", id="audience-too-long"),
]


@pytest.mark.parametrize(("spec", "field"), INVALID_INSTANCES)
def test_invalid_hikyoinstance_is_rejected_naming_the_field(api_client, spec, field):
    status, message = _rejection(
        lambda: _create_instance(api_client, make_hikyoinstance(_unique("bad"), **spec))
    )
    assert status == 422, message
    assert field in message, message


def test_valid_hikyoinstance_is_accepted(api_client):
    name = _unique("good")
    created = _create_instance(
        api_client,
        make_hikyoinstance(
            name,
            caBundle=CA_BUNDLE.decode(),
            audience="https://hikyo.example.test/kubernetes/primary",
        ),
    )
    assert created["spec"]["caBundle"] == CA_BUNDLE.decode()
    # Labels and annotations stay editable; only the spec is frozen.
    _instances(api_client).patch_cluster_custom_object(
        GROUP, VERSION, "hikyoinstances", name, {"metadata": {"labels": {"team": "payments"}}}
    )


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"url": "https://other.example.test"}, id="url"),
        pytest.param({"caBundle": base64.b64encode(b"other").decode()}, id="cabundle-changed"),
        pytest.param({"caBundle": None}, id="cabundle-removed"),
        pytest.param({"audience": "https://other/aud"}, id="audience-changed"),
        pytest.param({"audience": None}, id="audience-removed"),
    ],
)
def test_hikyoinstance_spec_is_immutable(api_client, change):
    """S1.1.1: any spec change is rejected; a new instance is the way to change it."""
    name = _unique("frozen")
    _create_instance(
        api_client, make_hikyoinstance(name, caBundle=CA_BUNDLE.decode(), audience="https://a/b")
    )
    status, message = _rejection(
        lambda: _instances(api_client).patch_cluster_custom_object(
            GROUP, VERSION, "hikyoinstances", name, {"spec": change}
        )
    )
    assert status == 422, message
    assert "spec" in message and "immutable" in message


def test_hikyoinstance_adding_a_field_is_rejected(api_client):
    name = _unique("frozen")
    _create_instance(api_client, make_hikyoinstance(name))
    status, message = _rejection(
        lambda: _instances(api_client).patch_cluster_custom_object(
            GROUP, VERSION, "hikyoinstances", name, {"spec": {"audience": "https://a/b"}}
        )
    )
    assert status == 422
    assert "immutable" in message
