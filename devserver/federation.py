"""ServiceAccount-token federation (S2.3): trusted issuers, JWKS, byte-exact bindings.

A Hikyo server configured for federation accepts a JWT as a bearer when an administrator
has trusted its issuer and bound the exact (issuer, subject, audience) triple to a scope::

    server.trust_issuer("https://127.0.0.1:6443", audience="https://hikyo.test/k8s",
                        discovery_ca_pem=cluster_ca_pem)
    credential_id = server.bind_subject(
        "https://127.0.0.1:6443",
        service_account_subject("payments", "payments-api"),
        org=org, project=project, environment=environment, grants={"read"},
    )

A token is accepted only when all of these hold, otherwise it is answered exactly like an
unknown machine bearer (401):

* compact JWS, ``alg`` RS256 or ES256, a ``kid``, no ``crit``; the signature verifies with
  the issuer's key of that ``kid`` and matching type (the JWKS is refetched once per token
  whose ``kid`` it does not know, in discovery mode);
* ``iss`` byte-equal to a trusted issuer;
* ``aud`` exactly one audience (a string or a one-element list, as Kubernetes issues it),
  byte-equal to the binding's and not one the issuer refuses;
* ``sub`` byte-equal to the binding's subject;
* ``exp`` present and in the future; ``nbf`` and ``iat``, when present, not in the future
  and not after ``exp`` (each with :data:`LEEWAY` for clock skew).

The JWT itself is never stored or logged; the request log gets the binding's credential
id like any machine bearer's. Only ``cryptography`` and the standard library are used.

Discovery mode fetches ``{issuer}/.well-known/openid-configuration`` and its ``jwks_uri``
over HTTPS trusting only the configured CA bundle (system roots when none), with hostname
verification. Redirects are followed only within the requesting URL's origin (at most
:data:`MAX_REDIRECTS`); the optional discovery bearer goes only to the issuer's origin.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import http.client
import json
import logging
import re
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from devserver.ids import new_id
from devserver.state import GRANTS, Principal, Scope

logger = logging.getLogger("devserver.federation")

#: Clock skew tolerated on ``exp``, ``nbf`` and ``iat``.
LEEWAY = dt.timedelta(seconds=30)
ALGORITHMS = ("RS256", "ES256")
MAX_TOKEN_LENGTH = 16 * 1024
MAX_DOCUMENT_BYTES = 256 * 1024
MAX_REDIRECTS = 3
FETCH_TIMEOUT = 5.0
MIN_RSA_BITS = 2048
_REDIRECT_STATUSES = (301, 302, 303, 307, 308)
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


def service_account_subject(namespace: str, name: str) -> str:
    """The ``sub`` Kubernetes puts in a ServiceAccount token."""
    return f"system:serviceaccount:{namespace}:{name}"


class Rejected(Exception):
    """Why a token was refused; never quotes the token."""


class DiscoveryError(Exception):
    """Discovery or JWKS retrieval failed; never quotes the discovery bearer."""


@dataclass(frozen=True)
class Binding:
    """An immutable (issuer, subject, audience) -> scope + grants binding."""

    credential_id: str
    issuer: str
    subject: str
    audience: str
    scope: Scope
    grants: frozenset[str]


# -- strict decoding ---------------------------------------------------------------------


def _b64url_decode(segment: str) -> bytes:
    if not _B64URL.fullmatch(segment) or len(segment) % 4 == 1:
        raise Rejected("segment is not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise Rejected("segment is not unpadded base64url") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise ValueError("duplicate member")
        result[name] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json(raw: bytes) -> Any:
    """JSON without duplicate members or NaN/Infinity; :class:`ValueError` otherwise."""
    return json.loads(
        raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constants
    )


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = strict_json(raw)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Rejected(f"{what} is not strict JSON") from None
    if not isinstance(value, dict):
        raise Rejected(f"{what} is not a JSON object")
    return value


def _b64url_int(value: Any, what: str) -> int:
    if not isinstance(value, str):
        raise ValueError(f"{what}: not a string")
    try:
        raw = _b64url_decode(value)
    except Rejected:
        raise ValueError(f"{what}: not base64url") from None
    return int.from_bytes(raw, "big")


# -- JWKS ----------------------------------------------------------------------------------


def _parse_jwk(jwk: Mapping[str, Any]) -> tuple[str, PublicKey]:
    """(alg, key) for one RS256/ES256 signing key; :class:`ValueError` otherwise."""
    use = jwk.get("use")
    if use is not None and use != "sig":
        raise ValueError("not a signing key")
    kty = jwk.get("kty")
    alg = jwk.get("alg")
    if kty == "RSA":
        if alg not in (None, "RS256"):
            raise ValueError(f"unsupported alg for RSA: {alg!r}")
        modulus = _b64url_int(jwk.get("n"), "n")
        exponent = _b64url_int(jwk.get("e"), "e")
        key = rsa.RSAPublicNumbers(exponent, modulus).public_key()
        if key.key_size < MIN_RSA_BITS:
            raise ValueError(f"RSA key shorter than {MIN_RSA_BITS} bits")
        return "RS256", key
    if kty == "EC":
        if alg not in (None, "ES256") or jwk.get("crv") != "P-256":
            raise ValueError("only P-256 / ES256 EC keys are supported")
        for coordinate in ("x", "y"):
            raw = jwk.get(coordinate)
            if not isinstance(raw, str) or len(_b64url_decode(raw)) != 32:
                raise ValueError(f"{coordinate}: not a 32-byte coordinate")
        numbers = ec.EllipticCurvePublicNumbers(
            _b64url_int(jwk["x"], "x"), _b64url_int(jwk["y"], "y"), ec.SECP256R1()
        )
        return "ES256", numbers.public_key()  # ValueError when the point is off the curve
    raise ValueError(f"unsupported kty {kty!r}")


def parse_jwks(document: Any) -> dict[str, tuple[str, PublicKey]]:
    """``kid`` -> (alg, key) for every usable key of a JWK Set.

    Keys without a ``kid``, of other types or uses are skipped; a ``kid`` that appears more
    than once is dropped altogether (ambiguous). A document that is not a JWK Set raises
    :class:`ValueError`.
    """
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise ValueError("a JWK Set is an object with a 'keys' list")
    keys: dict[str, tuple[str, PublicKey]] = {}
    ambiguous: set[str] = set()
    for jwk in document["keys"]:
        if not isinstance(jwk, Mapping):
            continue
        kid = jwk.get("kid")
        if not isinstance(kid, str) or not kid:
            continue
        try:
            parsed = _parse_jwk(jwk)
        except (ValueError, Rejected, TypeError) as exc:
            logger.debug("JWKS key skipped: %s", exc)
            continue
        if kid in keys or kid in ambiguous:
            ambiguous.add(kid)
            keys.pop(kid, None)
            continue
        keys[kid] = parsed
    return keys


def _verify_signature(alg: str, key: PublicKey, signing_input: bytes, signature: bytes) -> None:
    try:
        if alg == "RS256" and isinstance(key, rsa.RSAPublicKey):
            if len(signature) != (key.key_size + 7) // 8:
                raise Rejected("signature has the wrong length")
            key.verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
            return
        if alg == "ES256" and isinstance(key, ec.EllipticCurvePublicKey):
            if len(signature) != 64:
                raise Rejected("signature has the wrong length")
            der = encode_dss_signature(
                int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
            )
            key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
            return
    except InvalidSignature:
        raise Rejected("signature does not verify") from None
    raise Rejected("key type does not match alg")


# -- discovery -------------------------------------------------------------------------------


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise DiscoveryError("only https URLs are fetched")
    if parts.username is not None or parts.password is not None:
        raise DiscoveryError("URLs with credentials are refused")
    try:
        port = parts.port or 443
    except ValueError:
        raise DiscoveryError("URL has an invalid port") from None
    return parts.scheme, parts.hostname.lower(), port


def check_issuer_url(issuer: str) -> None:
    """An OIDC issuer for discovery: https, a host, no query, fragment or credentials."""
    parts = urlsplit(issuer)
    if parts.query or parts.fragment or "?" in issuer or "#" in issuer:
        raise ValueError("a discovery issuer has no query or fragment")
    try:
        _origin(issuer)
    except DiscoveryError as exc:
        raise ValueError(f"discovery issuer: {exc}") from None


def _pinned_context(ca_pem: bytes) -> ssl.SSLContext:
    """A client context trusting exactly the PEM CA certificates given (no system roots)."""
    try:
        text = ca_pem.decode("ascii")
    except (AttributeError, UnicodeDecodeError):
        raise ValueError("discovery_ca_pem is ASCII PEM bytes") from None
    # An empty cadata would make ``ssl`` fall back to the system roots.
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError("discovery_ca_pem holds no PEM certificate")
    try:
        return ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(f"discovery_ca_pem is not PEM certificates: {exc}") from None


class _Fetcher:
    """GETs JSON over HTTPS with one trust anchor set; redirects stay within an origin."""

    def __init__(
        self, context: ssl.SSLContext, bearer: str | None, bearer_origin: tuple[str, str, int]
    ) -> None:
        self.context = context
        self.bearer = bearer
        self.bearer_origin = bearer_origin

    def get_json(self, url: str) -> Any:
        for _ in range(MAX_REDIRECTS + 1):
            origin = _origin(url)
            parts = urlsplit(url)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            headers = {"Accept": "application/json, application/jwk-set+json"}
            if self.bearer is not None and origin == self.bearer_origin:
                headers["Authorization"] = f"Bearer {self.bearer}"
            connection = http.client.HTTPSConnection(
                origin[1], origin[2], context=self.context, timeout=FETCH_TIMEOUT
            )
            try:
                try:
                    connection.request("GET", target, headers=headers)
                    response = connection.getresponse()
                    location = response.getheader("Location")
                    body = response.read(MAX_DOCUMENT_BYTES + 1)
                except (OSError, http.client.HTTPException) as exc:
                    raise DiscoveryError(f"GET {parts.path}: {type(exc).__name__}") from None
            finally:
                connection.close()
            if response.status in _REDIRECT_STATUSES:
                if not location:
                    raise DiscoveryError(f"GET {parts.path}: redirect without Location")
                following = urljoin(url, location)
                if _origin(following) != origin:
                    raise DiscoveryError(f"GET {parts.path}: redirect to another origin refused")
                url = following
                continue
            if response.status != 200:
                raise DiscoveryError(f"GET {parts.path}: HTTP {response.status}")
            if len(body) > MAX_DOCUMENT_BYTES:
                raise DiscoveryError(f"GET {parts.path}: document too large")
            try:
                return strict_json(body)
            except (UnicodeDecodeError, ValueError, RecursionError):
                raise DiscoveryError(f"GET {parts.path}: not JSON") from None
        raise DiscoveryError("too many redirects")


def discover_jwks(
    issuer: str, context: ssl.SSLContext, bearer: str | None = None
) -> dict[str, tuple[str, PublicKey]]:
    """OIDC discovery: the configuration's ``issuer`` must equal ``issuer`` byte for byte."""
    fetcher = _Fetcher(context, bearer, _origin(issuer))
    configuration = fetcher.get_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
    if not isinstance(configuration, dict):
        raise DiscoveryError("discovery document is not an object")
    if configuration.get("issuer") != issuer:
        raise DiscoveryError("discovery document names another issuer")
    jwks_uri = configuration.get("jwks_uri")
    if not isinstance(jwks_uri, str):
        raise DiscoveryError("discovery document has no jwks_uri")
    _origin(jwks_uri)  # https only
    try:
        return parse_jwks(fetcher.get_json(jwks_uri))
    except ValueError as exc:
        raise DiscoveryError(f"jwks_uri: {exc}") from None


# -- issuers, bindings, verification ---------------------------------------------------------


class _Issuer:
    """One trusted issuer: its key source and the cached keys."""

    def __init__(
        self,
        issuer: str,
        audience: str,
        refused_audiences: frozenset[str],
        static_keys: dict[str, tuple[str, PublicKey]] | None,
        context: ssl.SSLContext | None,
        discovery_token: str | None,
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.refused_audiences = refused_audiences
        self.static = static_keys is not None
        self.context = context
        self.discovery_token = discovery_token
        self._keys = static_keys
        self._lock = threading.Lock()
        self.fetches = 0

    def _fetch(self) -> dict[str, tuple[str, PublicKey]]:
        assert self.context is not None
        self.fetches += 1
        keys = discover_jwks(self.issuer, self.context, self.discovery_token)
        self._keys = keys
        return keys

    def key(self, kid: str) -> tuple[str, PublicKey]:
        """The key for ``kid``; discovery mode fetches on first use and once on a miss."""
        with self._lock:
            keys = self._keys
            try:
                if keys is None or (kid not in keys and not self.static):
                    keys = self._fetch()
            except DiscoveryError as exc:
                logger.warning("federation issuer discovery failed: %s", exc)
                raise Rejected("issuer keys unavailable") from None
        if kid not in keys:
            raise Rejected("unknown kid")
        return keys[kid]


def _numeric_date(claims: Mapping[str, Any], name: str, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required or name in claims:
            raise Rejected(f"{name} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Rejected(f"{name} is not a NumericDate")
    if value != value or value in (float("inf"), float("-inf")):
        raise Rejected(f"{name} is not a NumericDate")
    return float(value)


def _single_audience(claims: Mapping[str, Any]) -> str:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return aud
    if isinstance(aud, list) and len(aud) == 1 and isinstance(aud[0], str):
        return aud[0]
    raise Rejected("aud is not exactly one audience")


def _check_grants(grants: Iterable[str]) -> frozenset[str]:
    result = frozenset(grants)
    unknown = result - GRANTS
    if unknown:
        raise ValueError(f"unknown grants: {sorted(unknown)}")
    return result


def _check_text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} is a non-empty string")
    return value


class Federation:
    """Trusted issuers and bindings; :meth:`verify` is a ``DevServer.token_verifier``."""

    def __init__(self, clock: Callable[[], dt.datetime]) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._issuers: dict[str, _Issuer] = {}
        self._bindings: dict[tuple[str, str, str], Binding] = {}

    # -- configuration -----------------------------------------------------------------

    def trust_issuer(
        self,
        issuer: str,
        *,
        audience: str,
        jwks: Mapping[str, Any] | None = None,
        discovery_ca_pem: bytes | None = None,
        discovery_token: str | None = None,
        refused_audiences: Iterable[str] = (),
    ) -> None:
        """Trusts ``issuer`` (replacing an earlier configuration and its cached keys)."""
        _check_text(issuer, "issuer")
        _check_text(audience, "audience")
        refused = frozenset(refused_audiences)
        if audience in refused:
            raise ValueError("the issuer's audience is one it refuses")
        static_keys: dict[str, tuple[str, PublicKey]] | None = None
        context: ssl.SSLContext | None = None
        if jwks is not None:
            if discovery_ca_pem is not None or discovery_token is not None:
                raise ValueError("a static JWKS takes no discovery CA or token")
            static_keys = parse_jwks(jwks)
            if not static_keys:
                raise ValueError("the JWKS has no usable RS256/ES256 key with a kid")
        else:
            check_issuer_url(issuer)
            if discovery_token is not None and not _VISIBLE_ASCII.fullmatch(discovery_token):
                raise ValueError("discovery_token is non-empty visible ASCII")
            if discovery_ca_pem is None:
                context = ssl.create_default_context()
            else:
                context = _pinned_context(discovery_ca_pem)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
        config = _Issuer(issuer, audience, refused, static_keys, context, discovery_token)
        with self._lock:
            self._issuers[issuer] = config

    def bind_subject(
        self,
        issuer: str,
        subject: str,
        *,
        org: str,
        project: str,
        environment: str,
        grants: Iterable[str] = ("read", "reveal"),
        audience: str | None = None,
    ) -> str:
        """Binds the exact triple to a scope; ``audience`` defaults to the issuer's."""
        _check_text(subject, "subject")
        checked = _check_grants(grants)
        scope = (
            _check_text(org, "org"),
            _check_text(project, "project"),
            _check_text(environment, "environment"),
        )
        with self._lock:
            config = self._issuers.get(issuer)
            if config is None:
                raise ValueError("bind_subject needs a trusted issuer (trust_issuer first)")
            bound_audience = _check_text(
                config.audience if audience is None else audience, "audience"
            )
            if bound_audience in config.refused_audiences:
                raise ValueError("the issuer refuses that audience")
            triple = (issuer, subject, bound_audience)
            if triple in self._bindings:
                raise ValueError("that issuer/subject/audience is already bound (immutable)")
            binding = Binding(new_id("fed"), issuer, subject, bound_audience, scope, checked)
            self._bindings[triple] = binding
        return binding.credential_id

    def unbind(self, credential_id: str) -> None:
        """Deletes a binding; its tokens answer 401 from the next request on."""
        with self._lock:
            for triple, binding in list(self._bindings.items()):
                if binding.credential_id == credential_id:
                    del self._bindings[triple]
                    return
        raise KeyError("no such binding")

    @property
    def bindings(self) -> list[Binding]:
        with self._lock:
            return list(self._bindings.values())

    def jwks_fetches(self, issuer: str) -> int:
        """How many discovery + JWKS fetches the issuer's current configuration made."""
        with self._lock:
            return self._issuers[issuer].fetches

    # -- verification ------------------------------------------------------------------

    def verify(self, token: str) -> Principal | None:
        """The binding's principal for an acceptable token, else ``None`` (401)."""
        try:
            principal = self._verify(token)
        except Rejected as exc:
            logger.debug("federated bearer refused: %s", exc)
            return None
        logger.debug("federated bearer accepted as %s", principal.credential_id)
        return principal

    def _verify(self, token: str) -> Principal:
        if len(token) > MAX_TOKEN_LENGTH:
            raise Rejected("too long for a JWT")
        segments = token.split(".")
        if len(segments) != 3:
            raise Rejected("not a compact JWS")
        header = _json_object(_b64url_decode(segments[0]), "header")
        claims = _json_object(_b64url_decode(segments[1]), "payload")
        signature = _b64url_decode(segments[2])
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise Rejected("alg is not RS256 or ES256")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Rejected("no kid")
        if "crit" in header:
            raise Rejected("crit is not supported")
        typ = header.get("typ")
        if typ is not None and (not isinstance(typ, str) or typ.upper() != "JWT"):
            raise Rejected("typ is not JWT")
        iss = claims.get("iss")
        with self._lock:
            config = self._issuers.get(iss) if isinstance(iss, str) else None
        if config is None:
            raise Rejected("untrusted issuer")
        key_alg, key = config.key(kid)
        if key_alg != alg:
            raise Rejected("alg does not match the key")
        _verify_signature(alg, key, f"{segments[0]}.{segments[1]}".encode("ascii"), signature)

        now = self._clock().timestamp()
        leeway = LEEWAY.total_seconds()
        exp = _numeric_date(claims, "exp", required=True)
        assert exp is not None
        if exp + leeway <= now:
            raise Rejected("expired")
        for name in ("nbf", "iat"):
            moment = _numeric_date(claims, name, required=False)
            if moment is not None and (moment > now + leeway or moment > exp):
                raise Rejected(f"{name} is in the future or after exp")
        audience = _single_audience(claims)
        if audience in config.refused_audiences:
            raise Rejected("audience refused by the issuer")
        sub = claims.get("sub")
        if not isinstance(sub, str):
            raise Rejected("no sub")
        with self._lock:
            if self._issuers.get(iss) is not config:
                raise Rejected("issuer configuration changed")
            binding = self._bindings.get((iss, sub, audience))
        if binding is None:
            raise Rejected("no binding for issuer/subject/audience")
        try:
            expires_at = dt.datetime.fromtimestamp(exp, dt.UTC) + LEEWAY
        except (OverflowError, OSError, ValueError):
            raise Rejected("exp is out of range") from None
        return Principal(binding.credential_id, binding.scope, binding.grants, expires_at)
