"""The causes a condition's facts name (``Condition.facts["cause"]``), so the remediation picks
its text from data rather than from the message's wording. Names only (S5.6)."""

from __future__ import annotations

import enum

from .fetched import TLS_VERIFICATION_FAILED


class Cause(enum.StrEnum):
    """Which of a reason's causes a condition is: for FetchFailed the S4.2 step that stopped
    the run or what the server answered; for KeysMissing and InvalidTemplate, the variant."""

    SPEC_INVALID = "R3"
    INSTANCE_MISSING = "R5"
    TOKEN_REQUEST = "R6"
    STAMP_ROOT = "R12"
    NO_CLIENT = "R14"  # no client for the instance's url or caBundle
    ADMISSION = "admission"  # allowed by RBAC, refused by admission or a quota (S4.15)
    CONFIRMING = "confirming"  # a first authoritative 404 (S4.10.0)
    RATE_LIMITED = "rate-limited"  # a 429 (S4.1.6)
    TLS = "tls"
    UNAUTHORIZED = "unauthorized"  # 401
    SERVER = "server"  # 5xx, or no answer at all
    UNMAPPED = "R10"  # KeysMissing: a typed target's required destination is not mapped
    DOTENV = "dotenv"  # InvalidTemplate: names a dotenv file cannot hold


def fetch_failure_cause(status: int | None, detail: str) -> str:
    """A failed fetch's cause from what came back: 401, 5xx, TLS, or no answer at all; other
    statuses (403, 400...) share FetchFailed's general text."""
    if status is None:
        return Cause.TLS if detail == TLS_VERIFICATION_FAILED else Cause.SERVER
    if status == 401:
        return Cause.UNAUTHORIZED
    if 500 <= status <= 599:
        return Cause.SERVER
    return ""
