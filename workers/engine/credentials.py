"""Credential designation (S2.1, S2.2, S2.4): naming is not permission. Pure checks."""

from __future__ import annotations

from collections.abc import Mapping

from .conditions import DESIGNATION, Condition

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
