"""What the devserver knows: published revisions, credentials, project opt-ins, pins.

All mutation goes through :class:`State` under one lock, because the HTTP handlers run on
their own threads while tests drive the control surface. Tokens are kept only as SHA-256
digests; values live here in memory (that is the point of a delivery server) and never
leave except in delivery bodies.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from devserver.ids import new_id

Scope = tuple[str, str, str]
"""(org, project, environment)."""

#: Grants the devserver understands (delivery-api.yaml `x-hikyo-formula` names).
GRANTS = frozenset({"read", "reveal", "reveal-history", "report-delivery-status"})
CLASSIFICATIONS = frozenset({"secret", "config"})
PRESENCES = frozenset({"set", "required", "optional", "forbidden"})
MAX_NAME_LENGTH = 256
MAX_VALUE_LENGTH = 65536
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


def token_digest(token: str) -> str:
    """The only form in which a bearer token is kept."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class PublishedKey:
    """One catalogue entry of a revision; ``value`` is set exactly when presence is ``set``."""

    key_id: str
    name: str
    classification: str
    presence: str
    value: str | None


@dataclass(frozen=True)
class Revision:
    number: int
    schema_revision: int
    keys: tuple[PublishedKey, ...]


@dataclass(frozen=True)
class Pin:
    """A durable workload pin (delivery-api.yaml `pinned_revision`, `pin_expired`)."""

    revision: int
    expired: bool = False
    collected: bool = False
    refused: bool = False


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: what every authorization decision is made from.

    ``token_verifier`` hooks (federation) return one of these for tokens the devserver did
    not mint; ``scope`` and ``grants`` then carry the authority of the federated binding.
    """

    credential_id: str
    scope: Scope
    grants: frozenset[str]
    expires_at: dt.datetime | None = None
    pin: Pin | None = None


@dataclass
class _Credential:
    principal: Principal
    revoked: bool = False


@dataclass
class _Environment:
    revisions: list[Revision] = field(default_factory=list)
    published: bool = False


@dataclass
class _Project:
    machine_reveal: bool = False
    schema_revision: int = 0
    key_ids: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ServedSnapshot:
    """The revision a principal would be served, and how it relates to the current one."""

    revision: Revision
    historical: bool
    machine_reveal: bool


class StateError(Exception):
    """A request the current state refuses; ``status`` is the HTTP answer."""

    def __init__(self, status: int, detail: str | None = None) -> None:
        super().__init__(detail or str(status))
        self.status = status
        self.detail = detail


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    if value is not None and value.tzinfo is None:
        raise ValueError("expires_at must be timezone-aware")
    return value


def _check_token(token: str) -> None:
    if not isinstance(token, str) or not _VISIBLE_ASCII.fullmatch(token):
        raise ValueError("a token is non-empty visible ASCII")


def _check_grants(grants: Iterable[str]) -> frozenset[str]:
    result = frozenset(grants)
    unknown = result - GRANTS
    if unknown:
        raise ValueError(f"unknown grants: {sorted(unknown)}")
    return result


def _parse_keys(keys: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str, str | None]]:
    parsed: list[tuple[str, str, str, str | None]] = []
    seen: set[str] = set()
    for index, key in enumerate(keys):
        unknown = set(key) - {"name", "classification", "value", "presence"}
        if unknown:
            raise ValueError(f"keys[{index}]: unknown members {sorted(unknown)}")
        name = key.get("name")
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LENGTH:
            raise ValueError(f"keys[{index}].name: a string of 1 to {MAX_NAME_LENGTH} characters")
        if name in seen:
            raise ValueError(f"keys[{index}].name: duplicate")
        seen.add(name)
        classification = key.get("classification")
        if classification not in CLASSIFICATIONS:
            raise ValueError(f"keys[{index}].classification: one of {sorted(CLASSIFICATIONS)}")
        value = key.get("value")
        presence = key.get("presence", "set" if value is not None else None)
        if presence not in PRESENCES:
            raise ValueError(f"keys[{index}].presence: one of {sorted(PRESENCES)}")
        if presence == "set":
            # A snapshot key always has a stored value; presence-only on the wire comes
            # from authorization, never from the catalogue.
            if not isinstance(value, str):
                raise ValueError(f"keys[{index}].value: a string is required for presence 'set'")
            if len(value) > MAX_VALUE_LENGTH:
                raise ValueError(f"keys[{index}].value: at most {MAX_VALUE_LENGTH} characters")
        elif value is not None:
            raise ValueError(f"keys[{index}].value: only keys with presence 'set' carry a value")
        parsed.append((name, classification, presence, value))
    return parsed


class State:
    """Thread-safe in-memory model behind both the HTTP API and the control surface."""

    def __init__(self, clock: Callable[[], dt.datetime]) -> None:
        self._lock = threading.RLock()
        self._clock = clock
        self._environments: dict[Scope, _Environment] = {}
        self._projects: dict[tuple[str, str], _Project] = {}
        self._credentials: dict[str, _Credential] = {}
        self._capabilities: tuple[str, ...] | None = ("status-report",)

    # -- catalogue ---------------------------------------------------------------------

    def publish(
        self, org: str, project: str, environment: str, keys: Iterable[Mapping[str, Any]]
    ) -> int:
        """Commits a new revision and makes it current; returns its number (1, 2, ...)."""
        parsed = _parse_keys(keys)
        with self._lock:
            proj = self._projects.setdefault((org, project), _Project())
            env = self._environments.setdefault((org, project, environment), _Environment())
            proj.schema_revision += 1
            published = tuple(
                PublishedKey(
                    key_id=proj.key_ids.setdefault(name, new_id("key")),
                    name=name,
                    classification=classification,
                    presence=presence,
                    value=value,
                )
                for name, classification, presence, value in parsed
            )
            number = len(env.revisions) + 1
            env.revisions.append(Revision(number, proj.schema_revision, published))
            env.published = True
            return number

    def unpublish(self, org: str, project: str, environment: str) -> None:
        """The environment answers 409 conflict until the next publish."""
        with self._lock:
            env = self._environments.setdefault((org, project, environment), _Environment())
            env.published = False

    def set_machine_reveal(self, org: str, project: str, enabled: bool) -> None:
        with self._lock:
            self._projects.setdefault((org, project), _Project()).machine_reveal = bool(enabled)

    def machine_reveal(self, org: str, project: str) -> bool:
        with self._lock:
            proj = self._projects.get((org, project))
            return bool(proj and proj.machine_reveal)

    @property
    def capabilities(self) -> tuple[str, ...] | None:
        with self._lock:
            return self._capabilities

    def set_capabilities(self, capabilities: Iterable[str] | None) -> None:
        with self._lock:
            self._capabilities = None if capabilities is None else tuple(capabilities)

    # -- credentials -------------------------------------------------------------------

    def add_credential(
        self,
        token: str,
        org: str,
        project: str,
        environment: str,
        grants: Iterable[str] = ("read", "reveal"),
        expires_at: dt.datetime | None = None,
    ) -> str:
        _check_token(token)
        principal = Principal(
            credential_id=new_id("mcr"),
            scope=(org, project, environment),
            grants=_check_grants(grants),
            expires_at=_aware(expires_at),
        )
        with self._lock:
            digest = token_digest(token)
            if digest in self._credentials:
                raise ValueError("that token is already registered")
            self._credentials[digest] = _Credential(principal)
        return principal.credential_id

    def _credential(self, token: str) -> _Credential:
        credential = self._credentials.get(token_digest(token))
        if credential is None:
            raise KeyError("unknown token")
        return credential

    def set_grants(self, token: str, grants: Iterable[str]) -> None:
        checked = _check_grants(grants)
        with self._lock:
            cred = self._credential(token)
            cred.principal = replace(cred.principal, grants=checked)

    def set_expiry(self, token: str, expires_at: dt.datetime | None) -> None:
        with self._lock:
            cred = self._credential(token)
            cred.principal = replace(cred.principal, expires_at=_aware(expires_at))

    def revoke(self, token: str) -> None:
        with self._lock:
            self._credential(token).revoked = True

    def pin(
        self,
        token: str,
        revision: int,
        *,
        expired: bool = False,
        collected: bool = False,
        refused: bool = False,
    ) -> None:
        with self._lock:
            cred = self._credential(token)
            env = self._environments.get(cred.principal.scope)
            if env is None or not 1 <= revision <= len(env.revisions):
                raise ValueError("no such revision in the credential's environment")
            pin = Pin(revision, expired=expired, collected=collected, refused=refused)
            cred.principal = replace(cred.principal, pin=pin)

    def unpin(self, token: str) -> None:
        with self._lock:
            cred = self._credential(token)
            cred.principal = replace(cred.principal, pin=None)

    def authenticate(self, token: str) -> Principal | None:
        """The live principal for a minted token; ``None`` for unknown, revoked or expired."""
        with self._lock:
            cred = self._credentials.get(token_digest(token))
            if cred is None or cred.revoked:
                return None
            principal = cred.principal
        if principal.expires_at is not None and principal.expires_at <= self._clock():
            return None
        return principal

    # -- serving -----------------------------------------------------------------------

    def served_snapshot(self, principal: Principal) -> ServedSnapshot:
        """The revision this principal gets now; :class:`StateError` 409/400 otherwise."""
        org, project, _ = principal.scope
        with self._lock:
            env = self._environments.get(principal.scope)
            if env is None or not env.published or not env.revisions:
                raise StateError(409)
            current = env.revisions[-1]
            pin = principal.pin
            if pin is None:
                return ServedSnapshot(current, False, self.machine_reveal(org, project))
            if pin.refused:
                raise StateError(400, "pinned delivery refused: recorded authority changed")
            if pin.collected or pin.revision > len(env.revisions):
                raise StateError(409, "pinned revision was collected by retention")
            revision = env.revisions[pin.revision - 1]
            return ServedSnapshot(
                revision, revision.number != current.number, self.machine_reveal(org, project)
            )
