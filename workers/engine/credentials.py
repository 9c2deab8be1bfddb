"""Credential designation (S2.1, S2.2, S2.4): naming is not permission. Pure: the objects read
and the TokenRequest's answer come in, a Credential or the S2.4 outcome goes out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .binding import CredentialIdentity
from .conditions import DESIGNATION, Condition
from .facts import Cause
from .outcome import Outcome, failure, refusal
from .ports import SecretObject
from .settings import OperatorSettings
from .spec import SecretSpec

DELIVERY_LABEL = "hikyo.dev/delivery"
INSTANCE_LABEL = "hikyo.dev/instance"
TOKEN_KEY = "hikyo-token"

SECRET_NOT_DESIGNATED = "SecretNotDesignated"
SERVICE_ACCOUNT_NOT_DESIGNATED = "ServiceAccountNotDesignated"


class TokenMalformed(ValueError):
    """The bootstrap Secret's token is absent, empty or not visible ASCII; never shows it."""


def designation_problem(
    kind: str, name: str, labels: Mapping[str, str] | None, instance: str, not_designated: str
) -> Condition | None:
    """S2.1: both labels, exact. None when the object is designated for this instance."""
    labels = labels or {}
    if labels.get(DELIVERY_LABEL) != "true":
        return Condition(
            DESIGNATION,
            "False",
            not_designated,
            f'{kind} {name} is not designated: it needs label {DELIVERY_LABEL}="true"',
        )
    labelled = labels.get(INSTANCE_LABEL)
    if labelled is None:
        return Condition(
            DESIGNATION,
            "False",
            not_designated,
            f"{kind} {name} is not designated: it needs label {INSTANCE_LABEL}={instance}",
        )
    if labelled != instance:
        return Condition(
            DESIGNATION,
            "False",
            "InstanceMismatch",
            f"{kind} {name} is designated for instance {labelled}, not {instance}: relabel it "
            f"{INSTANCE_LABEL}={instance} or point instanceRef at {labelled}",
            {"labelled_instance": labelled},
        )
    return None


def bootstrap_token(data: Mapping[str, bytes]) -> str:
    """S2.2.3: ``hikyo-token`` minus exactly one trailing LF or CRLF; visible ASCII only."""
    raw = data.get(TOKEN_KEY)
    if raw is None:
        raise TokenMalformed(f"data key {TOKEN_KEY} is missing")
    if raw.endswith(b"\r\n"):
        raw = raw[:-2]
    elif raw.endswith(b"\n"):
        raw = raw[:-1]
    if not raw:
        raise TokenMalformed(f"data key {TOKEN_KEY} is empty")
    if any(byte < 0x21 or byte > 0x7E for byte in raw):
        raise TokenMalformed(
            f"data key {TOKEN_KEY} holds characters other than visible ASCII (one trailing "
            "newline is allowed)"
        )
    return raw.decode("ascii")


@dataclass(frozen=True)
class Credential:
    """The bearer a CR's requests present (a fetch, or a report, S7.1), in memory for one run;
    ``identity`` is what the cursor binding hashes (S4.3.2)."""

    token: str = field(repr=False)
    identity: CredentialIdentity


def _not_designated(reason: str, message: str) -> Outcome:
    return refusal(Condition(DESIGNATION, "False", reason, message))


def from_secret(spec: SecretSpec, secret: SecretObject | None) -> Credential | Outcome:
    """S2.2.3: the bootstrap Secret, designated for the CR's instance (S2.1)."""
    if secret is None:
        return _not_designated(SECRET_NOT_DESIGNATED, f"Secret {spec.credential_secret} not found")
    problem = designation_problem(
        "Secret", secret.name, secret.labels, spec.instance_name, SECRET_NOT_DESIGNATED
    )
    if problem:
        return refusal(problem)
    try:
        token = bootstrap_token(secret.data)
    except TokenMalformed as error:
        return _not_designated(SECRET_NOT_DESIGNATED, f"Secret {secret.name}: {error}")
    return Credential(token, CredentialIdentity(secret.uid, secret.resource_version))


def account_refusal(
    spec: SecretSpec,
    account: Mapping[str, Any] | None,
    settings: OperatorSettings,
    instance: Mapping[str, Any],
) -> Outcome | None:
    """S2.3 steps 1-3, before the TokenRequest: a designated, listed ServiceAccount and an
    audience."""
    name = spec.credential_service_account or ""
    if account is None:
        return _not_designated(SERVICE_ACCOUNT_NOT_DESIGNATED, f"ServiceAccount {name} not found")
    problem = designation_problem(
        "ServiceAccount",
        name,
        (account.get("metadata") or {}).get("labels"),
        spec.instance_name,
        SERVICE_ACCOUNT_NOT_DESIGNATED,
    )
    if problem:
        return refusal(problem)
    designated = settings.designated_service_accounts
    if designated is not None and name not in designated.get(spec.namespace, ()):
        return _not_designated(
            SERVICE_ACCOUNT_NOT_DESIGNATED,
            f"ServiceAccount {name} is not listed for namespace {spec.namespace} in the "
            "operator's designatedServiceAccounts",
        )
    if not audience_of(instance):
        return _not_designated(
            "AudienceMissing",
            f"HikyoInstance {spec.instance_name} has no spec.audience, which federation "
            "needs; create a new instance with one",
        )
    return None


def audience_of(instance: Mapping[str, Any]) -> str:
    return (instance.get("spec") or {}).get("audience") or ""


def from_token(
    spec: SecretSpec, account: Mapping[str, Any], token: str | None, token_error: str
) -> Credential | Outcome:
    """S2.3 steps 4-5, after the TokenRequest; its failure (Forbidden by resourceNames
    included) is S2.4."""
    if token is None:
        name = spec.credential_service_account
        return failure(
            f"TokenRequest for ServiceAccount {name} failed: {token_error}",
            cause=Cause.TOKEN_REQUEST,
        )
    meta = account.get("metadata") or {}
    return Credential(
        token, CredentialIdentity(meta.get("uid", ""), meta.get("resourceVersion", ""))
    )
