"""Plain builders for our custom resources, with keyword overrides (no factory_boy)."""

from __future__ import annotations

import copy
from typing import Any

GROUP = "hikyo.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

ORG = "org_01900000-0000-7000-8000-000000000001"
PROJECT = "proj_01900000-0000-7000-8000-000000000002"
ENVIRONMENT = "env_01900000-0000-7000-8000-000000000003"


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE: Any = _Delete()
"""Override value that removes the key instead of setting it."""


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Deep-merges ``overrides`` into a copy of ``base``; DELETE removes a key, lists replace."""
    result = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is DELETE:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def make_hikyosecret(name: str = "app", namespace: str | None = None, **spec: Any) -> dict:
    """A valid mapping-mode HikyoSecret; ``spec`` keywords are deep-merged over the defaults."""
    base_spec = {
        "instanceRef": {"name": "primary"},
        "auth": {"secretRef": {"name": "hikyo-credential"}},
        "scope": {"org": ORG, "project": PROJECT, "environment": ENVIRONMENT},
        "mapping": [{"key": "DATABASE_URL"}, {"key": "LOG_LEVEL", "secretKey": "log-level"}],
        "target": {"name": "app-env"},
    }
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": API_VERSION,
        "kind": "HikyoSecret",
        "metadata": metadata,
        "spec": merge(base_spec, spec),
    }


def make_hikyoinstance(name: str = "primary", **spec: Any) -> dict:
    base_spec = {"url": "https://hikyo.example.test"}
    return {
        "apiVersion": API_VERSION,
        "kind": "HikyoInstance",
        "metadata": {"name": name},
        "spec": merge(base_spec, spec),
    }
