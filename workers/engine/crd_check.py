"""S8.7 served-CRD check: does the CRD the apiserver serves have what this operator relies on?

Pure: takes the CRDs as read (plain dicts, apiextensions.k8s.io/v1 JSON; None when absent) and
returns problems, each naming the CRD and what it lacks. An older CRD left in place by an
upgrade would admit specs this operator cannot honour (S1.3.9 only re-checks what exists), so
while any problem stands the leader reports it on /readyz and enqueues nothing.

The protected names come from ``loader_control`` (S4.6.1), the one list the CRD manifest is
also checked against, so "both lists come from one source".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .loader_control import PROTECTED_NAMES, PROTECTED_PREFIXES

HIKYOSECRETS_CRD = "hikyosecrets.hikyo.dev"
HIKYOINSTANCES_CRD = "hikyoinstances.hikyo.dev"
CHECKED_CRDS = (HIKYOSECRETS_CRD, HIKYOINSTANCES_CRD)

# The served-schema fields S8.7 names, as paths below the root's properties.
# status.lastForcedSync: a served schema without it prunes the record, and every run would
# then be a forced full fetch with a status write (force_sync.py).
# spec.target.template/format/formatKey (S11.1): a served schema without them prunes them,
# and a HikyoSecret asking for a rendered URL or a file would silently get the raw keys.
REQUIRED_SECRET_FIELDS = (
    ("spec", "allKeys"),
    ("spec", "target", "type"),
    ("spec", "target", "template"),
    ("spec", "target", "format"),
    ("spec", "target", "formatKey"),
    ("status", "lastForcedSync"),
)
ACKNOWLEDGEMENT_PATH = ("spec", "acknowledgedLoaderKeys")
# status.conditions[].facts: a served schema without it prunes the facts, and every run would
# then write the status again to put them back (S4.17 compares them).
CONDITIONS_PATH = ("status", "conditions")

_STRING_LITERAL = re.compile(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"")


def served_schema(crd: Mapping[str, Any], version: str) -> Mapping[str, Any] | None:
    """The openAPIV3Schema of ``version`` when that version is served, else None."""
    for entry in (crd.get("spec") or {}).get("versions") or []:
        if entry.get("name") == version and entry.get("served"):
            return ((entry.get("schema") or {}).get("openAPIV3Schema")) or {}
    return None


def _node(schema: Mapping[str, Any], path: Iterable[str]) -> Mapping[str, Any] | None:
    node: Mapping[str, Any] | None = schema
    for part in path:
        node = ((node or {}).get("properties") or {}).get(part)
        if node is None:
            return None
    return node


def _rules(node: Mapping[str, Any]) -> list[str]:
    """CEL rules on the list and on its items: either place can hold the S1.3.7 rule."""
    rules = []
    for where in (node, node.get("items") or {}):
        for validation in where.get("x-kubernetes-validations") or []:
            rules.append(str(validation.get("rule") or ""))
    return rules


def missing_protected_names(rules: Iterable[str]) -> list[str]:
    """S1.3.7 vs S4.6.1: protected names (prefixes as ``LD_*``) no rule admits, sorted."""
    literals: set[str] = set()
    prefixes: set[str] = set()
    for rule in rules:
        for match in _STRING_LITERAL.finditer(rule):
            literal = match.group(1) if match.group(1) is not None else match.group(2)
            literals.add(literal)
            before = rule[: match.start()].rstrip()
            if before.endswith("startsWith("):
                prefixes.add(literal)
    missing = [name for name in PROTECTED_NAMES if name not in literals]
    missing += [f"{prefix}*" for prefix in PROTECTED_PREFIXES if prefix not in prefixes]
    return sorted(missing)


def _dotted(path: Iterable[str]) -> str:
    return ".".join(path)


def crd_problems(name: str, crd: Mapping[str, Any] | None, version: str) -> list[str]:
    """S8.7 for one CRD; an empty list when it passes."""
    if crd is None:
        return [f"CRD {name} is not installed"]
    schema = served_schema(crd, version)
    if schema is None:
        return [f"CRD {name} does not serve version {version}"]
    if name != HIKYOSECRETS_CRD:
        return []  # S8.7 names no field of HikyoInstance: served is enough
    problems = [
        f"served CRD {name} ({version}) lacks {_dotted(path)}"
        for path in REQUIRED_SECRET_FIELDS
        if _node(schema, path) is None
    ]
    conditions = _node(schema, CONDITIONS_PATH) or {}
    if "facts" not in ((conditions.get("items") or {}).get("properties") or {}):
        problems.append(f"served CRD {name} ({version}) lacks {_dotted(CONDITIONS_PATH)}[].facts")
    acknowledgement = _node(schema, ACKNOWLEDGEMENT_PATH)
    if acknowledgement is None:
        problems.append(f"served CRD {name} ({version}) lacks {_dotted(ACKNOWLEDGEMENT_PATH)}")
    else:
        missing = missing_protected_names(_rules(acknowledgement))
        if missing:
            problems.append(
                f"served CRD {name} ({version}): the S1.3.7 rule on "
                f"{_dotted(ACKNOWLEDGEMENT_PATH)} misses protected names "
                f"{', '.join(missing)}"
            )
    return problems


def served_crd_problems(crds: Mapping[str, Mapping[str, Any] | None], version: str) -> list[str]:
    """S8.7 over both CRDs, in ``CHECKED_CRDS`` order; ``crds`` maps name -> CRD or None."""
    problems: list[str] = []
    for name in CHECKED_CRDS:
        problems.extend(crd_problems(name, crds.get(name), version))
    return problems
