"""Typed operator settings, built once at the edge (controlplane/settings.py) and passed down."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass


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
    shards: int = 1  # S4.1.8: how many shard leaders the install has (scaled mode)
    shard: int = 0  # which of them this process leads


class SettingsInvalid(ValueError):
    """An operator environment variable is invalid (S8.1: the process exits non-zero).

    The message is one line that names the variable and the rule it breaks; it is what the
    process prints, so it never carries a value that could be a credential (URLs, keys).
    """


_TRUE = frozenset({"1", "t", "true", "yes", "on"})
_FALSE = frozenset({"0", "f", "false", "no", "off"})
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAMESPACE_RULE = "a namespace name (DNS-1123 label: a-z, 0-9 and '-', at most 63 characters)"
_SA_RULE = "a ServiceAccount name (DNS-1123 subdomain, 1-253 characters)"
_ECHO_LIMIT = 80  # echoed non-secret values are cut so a message stays one short line


def shown(raw: str) -> str:
    """repr() of a non-secret value for a message, cut to a readable length."""
    return repr(raw if len(raw) <= _ECHO_LIMIT else raw[:_ECHO_LIMIT] + "...")


def is_namespace_name(name: str) -> bool:
    return len(name) <= 63 and _DNS_LABEL.match(name) is not None


def is_service_account_name(name: str) -> bool:
    return len(name) <= 253 and _DNS_SUBDOMAIN.match(name) is not None


def parse_bool(name: str, raw: str | None, default: bool) -> bool:
    """S8.1 booleans: 1,t,true,yes,on / 0,f,false,no,off, case-insensitive; else an error."""
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsInvalid(
        f"{name}={shown(raw)} is not a boolean (use true/false, 1/0, yes/no, on/off)"
    )


# S4.1.6 pacing bounds a human would set: QPS per instance, all processes together, from one
# fetch per 100 s to 10,000 a second; a burst of 1 to 100,000 fetches. A value outside is a typo.
FETCH_QPS_RANGE = (0.01, 10_000.0)
FETCH_BURST_RANGE = (1, 100_000)
SHARDS_RANGE = (1, 64)  # workers.shards.MAX_SHARDS


def parse_bounded(
    name: str, raw: str | None, default: float, kind: type, bounds: tuple[float, float]
) -> float:
    """S8.1: a number (QPS) or an integer (burst) within ``bounds``; anything else is an error.

    nan and inf parse as floats but are not rates a token bucket can pace by (S4.1.6).
    """
    if raw is None or not raw.strip():
        return default
    low, high = bounds
    noun = "an integer" if kind is int else "a number"
    try:
        value = kind(raw.strip())
    except ValueError:  # also int() of a string past Python's digit limit
        value = math.nan
    if not math.isfinite(value) or not low <= value <= high:
        raise SettingsInvalid(f"{name}={shown(raw)} is not {noun} from {low:g} to {high:g}")
    return value


def parse_namespaces(raw: str | None) -> tuple[str, ...]:
    """HIKYO_OPERATOR_NAMESPACES: comma list of DNS labels, no duplicates; empty = cluster."""
    if raw is None or not raw.strip():
        return ()
    names = [part.strip() for part in raw.split(",")]
    for name in names:
        if not is_namespace_name(name):
            raise SettingsInvalid(
                f"HIKYO_OPERATOR_NAMESPACES entry {shown(name)} is not {_NAMESPACE_RULE}"
            )
    if len(set(names)) != len(names):
        raise SettingsInvalid("HIKYO_OPERATOR_NAMESPACES lists a namespace twice")
    return tuple(names)


def parse_designated(raw: str | None) -> dict[str, tuple[str, ...]] | None:
    """HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS: JSON {"<ns>": ["<sa>", ...]}; unset = None."""
    if raw is None or not raw.strip():
        return None
    variable = "HIKYO_OPERATOR_DESIGNATED_SERVICE_ACCOUNTS"
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):  # deep nesting exhausts the parser's stack
        raise SettingsInvalid(f"{variable} is not JSON") from None
    if not isinstance(parsed, dict) or not all(
        isinstance(ns, str) and isinstance(names, list) and all(isinstance(n, str) for n in names)
        for ns, names in parsed.items()
    ):
        raise SettingsInvalid(f'{variable} must be {{"<namespace>": ["<sa>", ...]}}')
    for ns, names in parsed.items():
        if not is_namespace_name(ns):
            raise SettingsInvalid(f"{variable} key {shown(ns)} is not {_NAMESPACE_RULE}")
        for name in names:
            if not is_service_account_name(name):
                raise SettingsInvalid(
                    f"{variable}[{shown(ns)}] entry {shown(name)} is not {_SA_RULE}"
                )
    return {ns: tuple(names) for ns, names in parsed.items()}


def parse_operator_namespace(environ: Mapping[str, str]) -> str:
    """S8.1 HIKYO_OPERATOR_NAMESPACE, else POD_NAMESPACE. Empty is allowed here and refused
    where a namespace is needed (workers/runtime.py), so `manage.py migrate` runs without."""
    for variable in ("HIKYO_OPERATOR_NAMESPACE", "POD_NAMESPACE"):
        value = (environ.get(variable) or "").strip()
        if value:
            if not is_namespace_name(value):
                raise SettingsInvalid(f"{variable}={shown(value)} is not {_NAMESPACE_RULE}")
            return value
    return ""


def parse_address(name: str, raw: str | None, default: str) -> tuple[str, int]:
    """S8.1 listen addresses: ``[host]:port`` with a port 1-65535; an empty host = all."""
    text = (raw or "").strip() or default
    host, colon, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # [::1]:8081
    digits = port.isascii() and port.isdigit() and len(port) <= 5  # int() refuses 4300+
    if not colon or not digits or not 0 < int(port) < 65536:
        raise SettingsInvalid(f"{name}={shown(text)} is not [host]:port with a port 1-65535")
    if any(c.isspace() for c in host):
        raise SettingsInvalid(f"{name}={shown(text)} is not [host]:port (space in the host)")
    return host or "0.0.0.0", int(port)


LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG", "NOTSET")


def parse_log_level(name: str, raw: str | None, default: str) -> str:
    """A logging level name, any case (else logging.config fails later, with a traceback)."""
    if raw is None or not raw.strip():
        return default
    value = raw.strip().upper()
    if value not in LOG_LEVELS:
        raise SettingsInvalid(f"{name}={shown(raw)} is not one of {', '.join(LOG_LEVELS)}")
    return value


def parse_shard(environ: Mapping[str, str]) -> dict[str, int]:
    """S4.1.8: HIKYO_OPERATOR_SHARDS (1 to 64) and this process's HIKYO_OPERATOR_SHARD below it."""
    shards = int(
        parse_bounded(
            "HIKYO_OPERATOR_SHARDS", environ.get("HIKYO_OPERATOR_SHARDS"), 1, int, SHARDS_RANGE
        )
    )
    raw = environ.get("HIKYO_OPERATOR_SHARD")
    shard = int(parse_bounded("HIKYO_OPERATOR_SHARD", raw, 0, int, (0, SHARDS_RANGE[1] - 1)))
    if shard >= shards:
        raise SettingsInvalid(
            f"HIKYO_OPERATOR_SHARD={shown(raw or '')} is not below HIKYO_OPERATOR_SHARDS={shards}"
            f" (shards are numbered 0 to {shards - 1})"
        )
    return {"shards": shards, "shard": shard}


def operator_settings_from(environ: Mapping[str, str]) -> OperatorSettings:
    """Reads the S8.1 variables from ``environ`` (passed in: only Django settings reads os)."""
    return OperatorSettings(
        operator_namespace=parse_operator_namespace(environ),
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
        fetch_qps=parse_bounded(
            "HIKYO_OPERATOR_FETCH_QPS",
            environ.get("HIKYO_OPERATOR_FETCH_QPS"),
            10.0,
            float,
            FETCH_QPS_RANGE,
        ),
        fetch_burst=int(
            parse_bounded(
                "HIKYO_OPERATOR_FETCH_BURST",
                environ.get("HIKYO_OPERATOR_FETCH_BURST"),
                20,
                int,
                FETCH_BURST_RANGE,
            )
        ),
        **parse_shard(environ),
        status_reporting=parse_bool(
            "HIKYO_OPERATOR_STATUS_REPORTING", environ.get("HIKYO_OPERATOR_STATUS_REPORTING"), True
        ),
        leader_election=parse_bool(
            "HIKYO_OPERATOR_LEADER_ELECTION", environ.get("HIKYO_OPERATOR_LEADER_ELECTION"), True
        ),
    )
