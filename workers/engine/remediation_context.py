"""The names a remediation text is filled with (``remediation.remediation``'s context): from a
HikyoSecret's metadata and spec, read leniently, and from a stored condition's facts. Names
only, never a value (S0.4, S5.6)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .conditions import stored_facts
from .loader_control import acknowledgement_facts, is_protected
from .spec import KEY_NAME


def spec_context(cr: Mapping[str, Any] | None) -> dict[str, str]:
    """Names from a HikyoSecret's metadata and spec, read leniently (the spec may be invalid).

    In mapping mode the acknowledgement S4.6.2 wants is computable from the spec alone: the
    protected effective destinations.
    """
    cr = cr or {}
    metadata = cr.get("metadata") or {}
    spec = cr.get("spec") or {}
    auth = spec.get("auth") or {}
    target = spec.get("target") or {}
    scope = spec.get("scope") or {}
    context = {
        "namespace": _text(metadata.get("namespace")),
        "name": _text(metadata.get("name")),
        "instance": _text((spec.get("instanceRef") or {}).get("name")),
        "target": _text(target.get("name")),
        "target_type": _text(target.get("type")) or "Opaque",
        "environment": _text(scope.get("environment")),
        "org": _text(scope.get("org")),
    }
    account = _text((auth.get("serviceAccountRef") or {}).get("name"))
    secret = _text((auth.get("secretRef") or {}).get("name"))
    if account and not secret:
        context |= {
            "credential": account,
            "credential_kind": "ServiceAccount",
            "credential_resource": "serviceaccount",
        }
    else:
        context |= {
            "credential": secret,
            "credential_kind": "Secret",
            "credential_resource": "secret",
        }
    acknowledged = [str(n) for n in spec.get("acknowledgedLoaderKeys") or []]
    if spec.get("allKeys") is True:
        # S4.6.2 in all-keys mode checks only the list's shape: keep its valid names once.
        protected = [n for n in acknowledged if KEY_NAME.match(n) and is_protected(n)]
    else:
        mapping = [item for item in spec.get("mapping") or [] if isinstance(item, dict)]
        destinations = [_text(i.get("secretKey")) or _text(i.get("key")) for i in mapping]
        protected = [d for d in destinations if is_protected(d)]
    context |= acknowledgement_facts(protected)
    return {k: v for k, v in context.items() if v}


def condition_context(
    names: Mapping[str, str], condition: Mapping[str, Any] | None
) -> dict[str, str]:
    """The context for one stored condition: the spec's names, then the condition's facts."""
    return {**names, **stored_facts(condition)}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
