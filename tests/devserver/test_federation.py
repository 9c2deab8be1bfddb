"""ServiceAccount-token federation in the devserver (S2.3): trusted issuers, JWKS (static and
by OIDC discovery), byte-exact issuer/subject/audience bindings, and the 401 for the rest.

Tokens are signed here with locally generated keys; discovery runs against a tiny local
HTTPS server with its own throw-away CA.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from devserver import DevServer, Principal, new_id, pki, service_account_subject
from devserver.federation import LEEWAY, parse_jwks
from tests.devserver.helpers import CONFIG_VALUE, Scope, client, fetch

ISSUER = "https://issuer.cluster.test"
AUDIENCE = "https://hikyo.test/k8s/primary"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
SUBJECT = service_account_subject("payments", "payments-api")
KID = "rsa-key-1"
EC_KID = "ec-key-1"
NOW = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


# -- keys, JWKS and tokens ---------------------------------------------------------------


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _int(value: int, length: int | None = None) -> str:
    return b64url(value.to_bytes(length or (value.bit_length() + 7) // 8, "big"))


def rsa_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, str]:
    numbers = key.public_key().public_numbers()
    return {
        "kty": "RSA",
        "kid": kid,
        "use": "sig",
        "alg": "RS256",
        "n": _int(numbers.n),
        "e": _int(numbers.e),
    }


def ec_jwk(key: ec.EllipticCurvePrivateKey, kid: str) -> dict[str, str]:
    numbers = key.public_key().public_numbers()
    return {
        "kty": "EC",
        "kid": kid,
        "crv": "P-256",
        "x": _int(numbers.x, 32),
        "y": _int(numbers.y, 32),
    }


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def jwks(rsa_key, ec_key) -> dict[str, Any]:
    return {"keys": [rsa_jwk(rsa_key, KID), ec_jwk(ec_key, EC_KID)]}


def _segment(part: dict[str, Any] | bytes) -> str:
    return b64url(part if isinstance(part, bytes) else json.dumps(part).encode())


def sign(header: dict[str, Any] | bytes, claims: dict[str, Any] | bytes, key: Any) -> str:
    """A compact JWS with exactly these header and payload bytes, signed per header alg."""
    alg = header.get("alg") if isinstance(header, dict) else "RS256"
    signing_input = f"{_segment(header)}.{_segment(claims)}"
    data = signing_input.encode()
    if alg == "none" or key is None:
        signature = b""
    elif isinstance(key, bytes):  # HS256 with a "secret" (the alg-confusion attack)
        signature = hmac.new(key, data, hashlib.sha256).digest()
    elif isinstance(key, rsa.RSAPrivateKey):
        signature = key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    else:
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    return f"{signing_input}.{b64url(signature)}"


def claims_at(now: dt.datetime, **overrides: Any) -> dict[str, Any]:
    """Claims shaped like a Kubernetes TokenRequest token; ``None`` removes a claim."""
    t = int(now.timestamp())
    claims: dict[str, Any] = {
        "aud": [AUDIENCE],
        "exp": t + 600,
        "iat": t,
        "iss": ISSUER,
        "nbf": t,
        "sub": SUBJECT,
        "kubernetes.io": {"namespace": "payments", "serviceaccount": {"name": "payments-api"}},
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


# -- fixtures ----------------------------------------------------------------------------


@dataclass
class Fed:
    """A devserver trusting ISSUER (static JWKS) with SUBJECT bound to ``scope``."""

    server: DevServer
    clock: Clock
    scope: Scope
    credential_id: str
    rsa_key: rsa.RSAPrivateKey
    http: Any

    def token(self, key: Any = None, header: dict[str, Any] | None = None, **claims: Any) -> str:
        return sign(
            header or {"alg": "RS256", "kid": KID},
            claims_at(self.clock.now, **claims),
            key or self.rsa_key,
        )

    def fetch(self, token: str, scope: Scope | None = None):
        return fetch(self.http, self.server, scope or self.scope, token=token)


@pytest.fixture
def fed(rsa_key, jwks) -> Iterator[Fed]:
    clock = Clock(NOW)
    scope = Scope(new_id("org"), new_id("prj"), new_id("env"))
    with DevServer(clock=clock) as server, client(server) as http:
        server.publish(
            *scope.args(), [{"name": "APP_MODE", "classification": "config", "value": CONFIG_VALUE}]
        )
        server.trust_issuer(ISSUER, audience=AUDIENCE, jwks=jwks, refused_audiences=[API_AUDIENCE])
        credential_id = server.bind_subject(
            ISSUER,
            SUBJECT,
            org=scope.org,
            project=scope.project,
            environment=scope.environment,
            grants={"read"},
        )
        yield Fed(server, clock, scope, credential_id, rsa_key, http)


def _values(response) -> dict[str, str]:
    return {key["name"]: key.get("value") for key in response.json()["keys"]}


# -- acceptance --------------------------------------------------------------------------


def test_bound_token_is_served_and_logged_by_binding_id_never_by_token(fed):
    token = fed.token()
    response = fed.fetch(token)
    assert response.status_code == 200
    assert _values(response) == {"APP_MODE": CONFIG_VALUE}
    (request,) = fed.server.requests
    assert request.credential_id == fed.credential_id
    assert request.credential_id.startswith("fed_")
    assert request.authorization_present is True
    assert token not in repr(request.to_dict())
    (binding,) = fed.server.federation_bindings
    assert (binding.issuer, binding.subject, binding.audience) == (ISSUER, SUBJECT, AUDIENCE)
    assert token not in repr(binding)


def test_es256_and_a_plain_string_audience_are_accepted(fed, ec_key):
    token = fed.token(ec_key, {"alg": "ES256", "kid": EC_KID, "typ": "JWT"}, aud=AUDIENCE)
    assert fed.fetch(token).status_code == 200


def test_tokens_minted_by_pyjwt_interoperate(fed, rsa_key):
    token = jwt.encode(claims_at(fed.clock.now), rsa_key, algorithm="RS256", headers={"kid": KID})
    assert fed.fetch(token).status_code == 200
    assert fed.server.requests[-1].credential_id == fed.credential_id


def test_machine_bearers_are_unchanged_beside_federation(fed):
    machine = fed.server.add_credential("hik_machine_1", *fed.scope.args(), grants={"read"})
    assert fed.fetch("hik_machine_1").status_code == 200
    assert fed.fetch(fed.token()).status_code == 200
    assert [r.credential_id for r in fed.server.requests] == [machine, fed.credential_id]


# -- refusals: every one is the unknown-bearer 401 ---------------------------------------

REFUSALS: list[Any] = [
    pytest.param({"iss": ISSUER + "/"}, id="iss-trailing-slash"),
    pytest.param({"iss": ISSUER.upper()}, id="iss-case"),
    pytest.param({"iss": None}, id="iss-missing"),
    pytest.param({"sub": service_account_subject("payments", "other")}, id="sub-other-sa"),
    pytest.param({"sub": service_account_subject("other", "payments-api")}, id="sub-other-ns"),
    pytest.param({"sub": SUBJECT + " "}, id="sub-trailing-space"),
    pytest.param({"sub": SUBJECT.upper()}, id="sub-case"),
    pytest.param({"sub": None}, id="sub-missing"),
    pytest.param({"aud": ["https://hikyo.test/k8s/other"]}, id="aud-other"),
    pytest.param({"aud": [AUDIENCE + "/"]}, id="aud-trailing-slash"),
    pytest.param({"aud": [AUDIENCE, API_AUDIENCE]}, id="aud-two-incl-bound"),
    pytest.param({"aud": [API_AUDIENCE]}, id="aud-apiserver-default"),
    pytest.param({"aud": []}, id="aud-empty"),
    pytest.param({"aud": None}, id="aud-missing"),
    pytest.param({"exp": None}, id="exp-missing"),
    pytest.param({"exp": str(int(NOW.timestamp()) + 600)}, id="exp-string"),
    pytest.param({"exp": True}, id="exp-bool"),
    pytest.param({"exp": 10**30}, id="exp-out-of-range"),
    pytest.param(
        {"exp": int(NOW.timestamp()) - 31, "iat": int(NOW.timestamp()) - 631, "nbf": None},
        id="exp-past-leeway",
    ),
    pytest.param({"nbf": int(NOW.timestamp()) + 60}, id="nbf-future"),
    pytest.param({"iat": int(NOW.timestamp()) + 60}, id="iat-future"),
    pytest.param(
        {"exp": int(NOW.timestamp()) - 5, "iat": int(NOW.timestamp()) - 1, "nbf": None},
        id="iat-after-exp",
    ),
    pytest.param({"nbf": "now"}, id="nbf-string"),
]


def _assert_unknown_bearer(fed: Fed, response) -> None:
    baseline = fed.fetch("hik_not_a_credential")
    assert response.status_code == 401
    assert response.content == baseline.content
    assert response.headers.get("Content-Type") == baseline.headers.get("Content-Type")
    assert [r.credential_id for r in fed.server.requests] == [None, None]


@pytest.mark.parametrize("claims", REFUSALS)
def test_claims_outside_the_binding_are_refused(fed, claims):
    _assert_unknown_bearer(fed, fed.fetch(fed.token(**claims)))


def _tampered(fed: Fed) -> str:
    header, _, signature = fed.token().split(".")
    forged = _segment(claims_at(fed.clock.now, sub=service_account_subject("payments", "x")))
    return f"{header}.{forged}.{signature}"


def _duplicate_sub(fed: Fed) -> str:
    body = json.dumps(claims_at(fed.clock.now))[:-1] + f', "sub": "{SUBJECT}"}}'
    return sign({"alg": "RS256", "kid": KID}, body.encode(), fed.rsa_key)


def _public_pem(fed: Fed) -> bytes:
    return fed.rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _padded(fed: Fed) -> str:
    header, payload, signature = fed.token().split(".")
    return f"{header}.{payload}{'=' * (-len(payload) % 4) or '=='}.{signature}"


FORGERIES: list[Any] = [
    pytest.param(lambda f, k: f.token(k), id="other-key-same-kid"),
    pytest.param(lambda f, k: f.token(header={"alg": "RS256", "kid": "nope"}), id="unknown-kid"),
    pytest.param(lambda f, k: f.token(header={"alg": "RS256"}), id="no-kid"),
    pytest.param(lambda f, k: _tampered(f), id="tampered-payload"),
    pytest.param(lambda f, k: f.token(None, {"alg": "none", "kid": KID}), id="alg-none"),
    pytest.param(
        lambda f, k: f.token(_public_pem(f), {"alg": "HS256", "kid": KID}), id="hs256-confusion"
    ),
    pytest.param(lambda f, k: f.token(header={"alg": "RS512", "kid": KID}), id="alg-rs512"),
    pytest.param(lambda f, k: f.token(header={"alg": "ES256", "kid": KID}), id="es256-rsa-kid"),
    pytest.param(
        lambda f, k: f.token(header={"alg": "RS256", "kid": KID, "crit": ["exp"]}), id="crit"
    ),
    pytest.param(
        lambda f, k: f.token(header={"alg": "RS256", "kid": KID, "typ": "at+jwt"}), id="typ"
    ),
    pytest.param(lambda f, k: _duplicate_sub(f), id="duplicate-member"),
    pytest.param(lambda f, k: _padded(f), id="padded-base64"),
    pytest.param(lambda f, k: f.token() + ".x", id="four-segments"),
    pytest.param(lambda f, k: "a" * 20000, id="oversized"),
    pytest.param(lambda f, k: "hik_not_a_credential_either", id="opaque"),
]


@pytest.mark.parametrize("make", FORGERIES)
def test_forged_or_malformed_tokens_are_refused(fed, other_rsa_key, make, caplog):
    token = make(fed, other_rsa_key)
    _assert_unknown_bearer(fed, fed.fetch(token))
    assert "token verifier failed" not in caplog.text  # refused, not crashed
    assert token not in caplog.text


def test_leeway_and_principal_expiry_follow_the_server_clock(fed):
    token = fed.token(exp=int(NOW.timestamp()) - 10, iat=int(NOW.timestamp()) - 610, nbf=None)
    assert fed.fetch(token).status_code == 200  # within the clock-skew leeway
    fed.clock.now = NOW + LEEWAY - dt.timedelta(seconds=10)
    assert fed.fetch(token).status_code == 401
    fresh = fed.token()  # exp = now + 600
    minted = fed.clock.now
    fed.clock.now = minted + dt.timedelta(seconds=600) + LEEWAY - dt.timedelta(seconds=1)
    assert fed.fetch(fresh).status_code == 200
    fed.clock.now = minted + dt.timedelta(seconds=600) + LEEWAY
    assert fed.fetch(fresh).status_code == 401


def test_binding_scope_and_grants_decide_authorization(fed):
    other = Scope(fed.scope.org, fed.scope.project, new_id("env"))
    assert fed.fetch(fed.token(), other).status_code == 404  # authenticated, other scope
    subject = service_account_subject("payments", "no-read")
    fed.server.bind_subject(ISSUER, subject, grants={"reveal"}, **_scope_kwargs(fed.scope))
    assert fed.fetch(fed.token(sub=subject)).status_code == 404


def _scope_kwargs(scope: Scope) -> dict[str, str]:
    return {"org": scope.org, "project": scope.project, "environment": scope.environment}


def test_each_audience_is_its_own_immutable_binding(fed):
    with pytest.raises(ValueError, match="already bound"):
        fed.server.bind_subject(ISSUER, SUBJECT, **_scope_kwargs(fed.scope))
    second = fed.server.bind_subject(
        ISSUER, SUBJECT, audience="https://hikyo.test/k8s/second", **_scope_kwargs(fed.scope)
    )
    assert fed.fetch(fed.token(aud=["https://hikyo.test/k8s/second"])).status_code == 200
    assert fed.server.requests[-1].credential_id == second != fed.credential_id
    fed.server.unbind_subject(second)
    assert fed.fetch(fed.token(aud=["https://hikyo.test/k8s/second"])).status_code == 401
    assert fed.fetch(fed.token()).status_code == 200


@pytest.mark.parametrize(
    ("issuer", "options", "message"),
    [
        ("https://unknown.test", {}, "trusted issuer"),
        (ISSUER, {"grants": {"read", "admin"}}, "unknown grants"),
        (ISSUER, {"audience": API_AUDIENCE}, "refuses"),
        (ISSUER, {"audience": ""}, "non-empty"),
    ],
)
def test_bad_bindings_are_refused(fed, issuer, options, message):
    with pytest.raises(ValueError, match=message):
        fed.server.bind_subject(
            issuer, "system:serviceaccount:a:b", **(_scope_kwargs(fed.scope) | options)
        )


def test_retrusting_an_issuer_replaces_its_keys(fed, other_rsa_key):
    token = fed.token()
    fed.server.trust_issuer(ISSUER, audience=AUDIENCE, jwks={"keys": [rsa_jwk(other_rsa_key, KID)]})
    assert fed.fetch(token).status_code == 401
    assert fed.fetch(fed.token(other_rsa_key)).status_code == 200  # bindings stay


def test_federation_refuses_to_replace_a_custom_verifier(rsa_key, jwks):
    with DevServer() as server:
        server.token_verifier = lambda token: None
        with pytest.raises(RuntimeError, match="custom token_verifier"):
            server.trust_issuer(ISSUER, audience=AUDIENCE, jwks=jwks)
        server.token_verifier = None
        server.trust_issuer(ISSUER, audience=AUDIENCE, jwks=jwks)
        server.trust_issuer(ISSUER, audience=AUDIENCE, jwks=jwks)  # idempotent
        assert server.token_verifier is not None


def test_jwks_parsing_keeps_only_usable_unambiguous_keys(rsa_key, other_rsa_key, ec_key):
    short = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    document = {
        "keys": [
            rsa_jwk(rsa_key, "good"),
            rsa_jwk(short, "short"),
            rsa_jwk(rsa_key, "twice"),
            rsa_jwk(other_rsa_key, "twice"),
            {k: v for k, v in rsa_jwk(rsa_key, "x").items() if k != "kid"},
            rsa_jwk(rsa_key, "enc") | {"use": "enc"},
            rsa_jwk(rsa_key, "ps256") | {"alg": "PS256"},
            ec_jwk(ec_key, "ec"),
            ec_jwk(ec_key, "p384") | {"crv": "P-384"},
            ec_jwk(ec_key, "off-curve") | {"y": _int(1, 32)},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            "not a key",
        ]
    }
    assert sorted(parse_jwks(document)) == ["ec", "good"]
    with pytest.raises(ValueError, match="JWK Set"):
        parse_jwks({"keys": "none"})


@pytest.mark.parametrize(
    ("issuer", "options", "message"),
    [
        ("http://issuer.test", {}, "https"),
        ("https://issuer.test?x=1", {}, "query"),
        ("https://user:pw@issuer.test", {}, "credentials"),
        (ISSUER, {"discovery_ca_pem": b""}, "no PEM certificate"),
        (ISSUER, {"discovery_ca_pem": b"-----BEGIN CERTIFICATE-----\nAAAA\n"}, "PEM"),
        (ISSUER, {"discovery_token": "has space"}, "visible ASCII"),
        (ISSUER, {"jwks": {"keys": []}}, "no usable"),
        (ISSUER, {"jwks": {"keys": []}, "discovery_token": "t"}, "static JWKS"),
        (ISSUER, {"audience": ""}, "non-empty"),
    ],
)
def test_bad_issuer_configurations_are_refused(issuer, options, message):
    with DevServer() as server, pytest.raises(ValueError, match=message):
        server.trust_issuer(issuer, **({"audience": AUDIENCE} | options))


# -- OIDC discovery against a local HTTPS issuer -----------------------------------------


@dataclass
class Route:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class OidcIssuer:
    """A loopback HTTPS server answering configured routes and recording what it was asked."""

    def __init__(self, serving: pki.ServingPki, directory: Path) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[tuple[str, str | None]] = []
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.seen.append((self.path, self.headers.get("Authorization")))
                route = issuer.routes.get(self.path, Route(404, {"error": "not found"}))
                body = b"" if route.body is None else json.dumps(route.body).encode()
                self.send_response(route.status)
                for name, value in route.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = pki.server_context(serving, directory)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def publish(self, jwks: dict[str, Any], jwks_uri: str | None = None) -> None:
        self.routes["/.well-known/openid-configuration"] = Route(
            body={"issuer": self.url, "jwks_uri": jwks_uri or f"{self.url}/openid/v1/jwks"}
        )
        self.routes["/openid/v1/jwks"] = Route(body=jwks)

    def paths(self) -> list[str]:
        return [path for path, _ in self.seen]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def serving() -> pki.ServingPki:
    return pki.generate()


@pytest.fixture
def oidc(serving, tmp_path) -> Iterator[OidcIssuer]:
    issuer = OidcIssuer(serving, tmp_path)
    yield issuer
    issuer.close()


@pytest.fixture
def other_origin(serving, tmp_path) -> Iterator[OidcIssuer]:
    issuer = OidcIssuer(serving, tmp_path)
    yield issuer
    issuer.close()


@dataclass
class Discovery:
    server: DevServer
    oidc: OidcIssuer
    scope: Scope
    credential_id: str
    http: Any
    trust: Callable[..., None]

    def token(self, key: Any, kid: str = KID, **claims: Any) -> str:
        now = dt.datetime.now(dt.UTC)
        return sign({"alg": "RS256", "kid": kid}, claims_at(now, iss=self.oidc.url, **claims), key)

    def fetch(self, token: str):
        return fetch(self.http, self.server, self.scope, token=token)


@pytest.fixture
def discovery(oidc, serving) -> Iterator[Discovery]:
    scope = Scope(new_id("org"), new_id("prj"), new_id("env"))
    with DevServer() as server, client(server) as http:
        server.publish(
            *scope.args(), [{"name": "APP_MODE", "classification": "config", "value": CONFIG_VALUE}]
        )

        def trust(**options: Any) -> None:
            options.setdefault("discovery_ca_pem", serving.ca_pem)
            server.trust_issuer(oidc.url, audience=AUDIENCE, **options)

        trust(discovery_token="discovery-bearer")
        credential_id = server.bind_subject(oidc.url, SUBJECT, **_scope_kwargs(scope))
        yield Discovery(server, oidc, scope, credential_id, http, trust)


def test_discovery_fetches_keys_once_with_the_discovery_bearer(discovery, rsa_key):
    discovery.oidc.publish({"keys": [rsa_jwk(rsa_key, KID)]})
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 200
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 200
    assert discovery.server.requests[-1].credential_id == discovery.credential_id
    assert discovery.oidc.seen == [
        ("/.well-known/openid-configuration", "Bearer discovery-bearer"),
        ("/openid/v1/jwks", "Bearer discovery-bearer"),
    ]
    assert discovery.server.jwks_fetches(discovery.oidc.url) == 1


def test_key_rotation_refetches_once_per_unknown_kid(discovery, rsa_key, other_rsa_key):
    discovery.oidc.publish({"keys": [rsa_jwk(rsa_key, KID)]})
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 200
    discovery.oidc.publish({"keys": [rsa_jwk(other_rsa_key, "rotated")]})
    assert discovery.fetch(discovery.token(other_rsa_key, kid="rotated")).status_code == 200
    assert discovery.server.jwks_fetches(discovery.oidc.url) == 2
    assert discovery.fetch(discovery.token(other_rsa_key, kid="unknown")).status_code == 401
    assert discovery.server.jwks_fetches(discovery.oidc.url) == 3
    # The old key is gone from the issuer, so its tokens stop working.
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 401


def test_discovery_trusts_only_the_configured_ca(discovery, rsa_key):
    discovery.oidc.publish({"keys": [rsa_jwk(rsa_key, KID)]})
    discovery.trust(discovery_ca_pem=pki.generate().ca_pem)
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 401
    assert discovery.oidc.seen == []  # the handshake failed before any request


def test_discovery_document_must_name_the_issuer_byte_exactly(discovery, rsa_key):
    discovery.oidc.publish({"keys": [rsa_jwk(rsa_key, KID)]})
    discovery.oidc.routes["/.well-known/openid-configuration"].body["issuer"] += "/"
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 401
    assert discovery.oidc.paths() == ["/.well-known/openid-configuration"]


def test_redirects_are_followed_only_within_the_origin(discovery, other_origin, rsa_key):
    discovery.oidc.publish({"keys": [rsa_jwk(rsa_key, KID)]})
    other_origin.publish({"keys": [rsa_jwk(rsa_key, KID)]})
    discovery.oidc.routes["/openid/v1/jwks"] = Route(
        302, headers={"Location": f"{other_origin.url}/openid/v1/jwks"}
    )
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 401
    assert other_origin.seen == []

    discovery.oidc.routes["/openid/v1/jwks"] = Route(307, headers={"Location": "/keys"})
    discovery.oidc.routes["/keys"] = Route(body={"keys": [rsa_jwk(rsa_key, KID)]})
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 200
    assert discovery.oidc.seen[-1] == ("/keys", "Bearer discovery-bearer")


def test_jwks_on_another_origin_never_gets_the_discovery_bearer(discovery, other_origin, rsa_key):
    other_origin.publish({"keys": [rsa_jwk(rsa_key, KID)]})
    discovery.oidc.publish({}, jwks_uri=f"{other_origin.url}/openid/v1/jwks")
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 200
    assert other_origin.seen == [("/openid/v1/jwks", None)]


def test_plain_http_jwks_uri_is_refused(discovery, rsa_key):
    discovery.oidc.publish({}, jwks_uri=discovery.oidc.url.replace("https", "http") + "/jwks")
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 401
    assert discovery.oidc.paths() == ["/.well-known/openid-configuration"]


def test_discovery_without_the_bearer_is_what_the_issuer_decides(discovery, rsa_key):
    """No bearer configured: none is sent (the apiserver then needs anonymous discovery)."""
    discovery.oidc.publish({"keys": [rsa_jwk(rsa_key, KID)]})
    discovery.trust()
    assert discovery.fetch(discovery.token(rsa_key)).status_code == 200
    assert [auth for _, auth in discovery.oidc.seen] == [None, None]


def test_verifier_principal_matches_the_binding(discovery, rsa_key):
    """What the hook returns: the binding's id, scope and grants, expiry from ``exp``."""
    discovery.oidc.publish({"keys": [rsa_jwk(rsa_key, KID)]})
    verifier = discovery.server.token_verifier
    assert verifier is not None
    token = discovery.token(rsa_key)
    principal = verifier(token)
    assert isinstance(principal, Principal)
    assert principal.credential_id == discovery.credential_id
    assert principal.scope == discovery.scope.args()
    assert principal.grants == frozenset({"read", "reveal"})
    exp = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["exp"]
    assert principal.expires_at == dt.datetime.fromtimestamp(exp, dt.UTC) + LEEWAY
