"""Typed operator settings, built once at the edge (controlplane/settings.py) and passed down."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

LEASE_NAME = "hikyo-operator.hikyo.dev"  # S4.1.5: the leader Lease in the operator namespace


@dataclass(frozen=True)
class OperatorSettings:
    operator_namespace: str  # home of the stamp root and the Lease (S8.1)
    native_secret_types: bool = False  # S4.7.1
    trigger_rollouts: bool = True  # S6.6
    allow_stamp_root_reset: bool = False  # S6.3
    # S2.3.3: None = no list configured (standalone); else namespace -> designated SA names.
    designated_service_accounts: Mapping[str, tuple[str, ...]] | None = None
    not_found_confirmation_seconds: float = 30.0  # S4.10.0
    token_seconds: int = 600  # S2.3.4
    namespaces: tuple[str, ...] = ()  # the watch list; empty = cluster-wide (S8.1)
    leader_election: bool = True  # only test harnesses turn it off (S8.1)
    status_reporting: bool = True  # S7
    fetch_qps: float = 10.0  # S4.1.6, per instance, all processes together
    fetch_burst: int = 20


class SettingsInvalid(ValueError):
    """An operator environment variable is invalid (S8.1: the process exits non-zero)."""


_TRUE = frozenset({"1", "t", "true", "yes", "on"})
_FALSE = frozenset({"0", "f", "false", "no", "off"})
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def parse_bool(name: str, raw: str | None, default: bool) -> bool:
    """S8.1 booleans: 1,t,true,yes,on / 0,f,false,no,off, case-insensitive; else an error."""
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsInvalid(f"{name}={raw!r} is not a boolean (use true/false, 1/0, yes/no, on/off)")


def parse_positive(name: str, raw: str | None, default: float, kind: type) -> float:
    """S8.1: a positive number (QPS) or a positive integer (burst); anything else is an error."""
    if raw is None or not raw.strip():
        return default
    try:
        value = kind(raw.strip())
    except ValueError:
        value = 0
    if value <= 0:
        noun = "integer" if kind is int else "number"
        raise SettingsInvalid(f"{name}={raw!r} is not a positive {noun}")
    return value


def parse_namespaces(raw: str | None) -> tuple[str, ...]:
    """HIKYO_OPERATOR_NAMESPACES: comma list of DNS labels, no duplicates; empty = cluster."""
    if raw is None or not raw.strip():
        return ()
    names = [part.strip() for part in raw.split(",")]
    for name in names:
        if not name or len(name) > 63 or not _DNS_LABEL.match(name):
            raise SettingsInvalid(
                f"HIKYO_OPERATOR_NAMESPACES entry {name!r} is not a namespace name"
            )
    if len(set(names)) != len(names):
        raise SettingsInvalid("HIKYO_OPERATOR_NAMESPACES lists a namespace twice")
    return tuple(names)


def parse_designated(raw: str | None) -> dict[str, tuple[str, ...]] | None:
    """HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS: JSON {"<ns>": ["<sa>", ...]}; unset = None."""
    if raw is None or not raw.strip():
        return None
    try:
        parsed = json.loads(raw)
    except ValueError as error:
        raise SettingsInvalid("HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS is not JSON") from error
    if not isinstance(parsed, dict) or not all(
        isinstance(ns, str) and isinstance(names, list) and all(isinstance(n, str) for n in names)
        for ns, names in parsed.items()
    ):
        raise SettingsInvalid(
            'HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS must be {"<namespace>": ["<sa>", ...]}'
        )
    return {ns: tuple(names) for ns, names in parsed.items()}


def operator_settings_from(environ: Mapping[str, str]) -> OperatorSettings:
    """Reads the S8.1 variables from ``environ`` (passed in: only Django settings reads os)."""
    return OperatorSettings(
        operator_namespace=(
            environ.get("HIKYO_OPERATOR_NAMESPACE") or environ.get("POD_NAMESPACE") or ""
        ).strip(),
        native_secret_types=parse_bool(
            "HIKYO_OPERATOR_NATIVE_SECRET_TYPES",
            environ.get("HIKYO_OPERATOR_NATIVE_SECRET_TYPES"),
            False,
        ),
        trigger_rollouts=parse_bool(
            "HIKYO_OPERATOR_TRIGGER_ROLLOUTS", environ.get("HIKYO_OPERATOR_TRIGGER_ROLLOUTS"), True
        ),
        allow_stamp_root_reset=parse_bool(
            "HIKYO_OPERATOR_ALLOW_STAMP_ROOT_RESET",
            environ.get("HIKYO_OPERATOR_ALLOW_STAMP_ROOT_RESET"),
            False,
        ),
        designated_service_accounts=parse_designated(
            environ.get("HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS")
        ),
        namespaces=parse_namespaces(environ.get("HIKYO_OPERATOR_NAMESPACES")),
        fetch_qps=parse_positive(
            "HIKYO_OPERATOR_FETCH_QPS", environ.get("HIKYO_OPERATOR_FETCH_QPS"), 10.0, float
        ),
        fetch_burst=int(
            parse_positive(
                "HIKYO_OPERATOR_FETCH_BURST", environ.get("HIKYO_OPERATOR_FETCH_BURST"), 20, int
            )
        ),
        status_reporting=parse_bool(
            "HIKYO_OPERATOR_STATUS_REPORTING", environ.get("HIKYO_OPERATOR_STATUS_REPORTING"), True
        ),
        leader_election=parse_bool(
            "HIKYO_OPERATOR_LEADER_ELECTION", environ.get("HIKYO_OPERATOR_LEADER_ELECTION"), True
        ),
    )
