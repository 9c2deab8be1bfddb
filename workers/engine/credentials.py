"""Credential designation (S2.1, S2.2, S2.4): naming is not permission. Pure checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from k8s.errors import KubeError

from .binding import CredentialIdentity
from .conditions import DESIGNATION, Condition
from .outcome import Outcome, failure, refusal
from .ports import Cluster
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


class CredentialRefused(Exception):  # a decision, carried as an Outcome
    """R6 stopped: ``outcome`` says why (S2.4)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


def _not_designated(reason: str, message: str) -> Outcome:
    return refusal(Condition(DESIGNATION, "False", reason, message))


def acquire_credential(
    cluster: Cluster, settings: OperatorSettings, spec: SecretSpec, instance: dict[str, Any]
) -> tuple[str, CredentialIdentity]:
    """S2.2, S2.3: the bearer a CR's requests present (a fetch, or a report, S7.1), read uncached
    every time and kept in memory only. Raises CredentialRefused with the S2.4 outcome."""
    if spec.credential_secret:
        secret = cluster.get_secret(spec.namespace, spec.credential_secret)
        if secret is None:
            raise CredentialRefused(
                _not_designated(SECRET_NOT_DESIGNATED, f"Secret {spec.credential_secret} not found")
            )
        problem = designation_problem(
            "Secret", secret.name, secret.labels, spec.instance_name, SECRET_NOT_DESIGNATED
        )
        if problem:
            raise CredentialRefused(refusal(problem))
        try:
            token = bootstrap_token(secret.data)
        except TokenMalformed as error:
            raise CredentialRefused(
                _not_designated(SECRET_NOT_DESIGNATED, f"Secret {secret.name}: {error}")
            ) from None
        return token, CredentialIdentity(secret.uid, secret.resource_version)

    name = spec.credential_service_account or ""
    account = cluster.get_service_account(spec.namespace, name)
    if account is None:
        raise CredentialRefused(
            _not_designated(SERVICE_ACCOUNT_NOT_DESIGNATED, f"ServiceAccount {name} not found")
        )
    account_meta = account.get("metadata") or {}
    problem = designation_problem(
        "ServiceAccount",
        name,
        account_meta.get("labels"),
        spec.instance_name,
        SERVICE_ACCOUNT_NOT_DESIGNATED,
    )
    if problem:
        raise CredentialRefused(refusal(problem))
    designated = settings.designated_service_accounts
    if designated is not None and name not in designated.get(spec.namespace, ()):
        raise CredentialRefused(
            _not_designated(
                SERVICE_ACCOUNT_NOT_DESIGNATED,
                f"ServiceAccount {name} is not listed for namespace {spec.namespace} in the "
                "operator's designatedServiceAccounts",
            )
        )
    audience = (instance.get("spec") or {}).get("audience") or ""
    if not audience:
        raise CredentialRefused(
            _not_designated(
                "AudienceMissing",
                f"HikyoInstance {spec.instance_name} has no spec.audience, which federation "
                "needs; create a new instance with one",
            )
        )
    try:
        token = cluster.request_token(spec.namespace, name, audience, settings.token_seconds)
    except KubeError as error:  # S2.4: incl. Forbidden by resourceNames
        raise CredentialRefused(
            failure(f"TokenRequest for ServiceAccount {name} failed: {error}")
        ) from None
    return token, CredentialIdentity(
        account_meta.get("uid", ""), account_meta.get("resourceVersion", "")
    )
