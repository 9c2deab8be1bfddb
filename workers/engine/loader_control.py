"""Loader-control keys (S4.6): names a process loader or runtime reads before the app runs.

This module is the one list: the CRD's S1.3.7 admission rule must name exactly these
(a test compares them), and the served-CRD check (S8.7) reads them from here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from .messages import key_list

_KEY_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")

# S4.6.1 baseline: may grow, never shrink.
PROTECTED_NAMES: frozenset[str] = frozenset(
    {
        "PATH",
        "IFS",
        "ENV",
        "BASH_ENV",
        "SHELLOPTS",
        "NODE_OPTIONS",
        "PYTHONSTARTUP",
        "PYTHONPATH",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "CURL_CA_BUNDLE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
    }
)
# Prefixes include the underscore: LD_PRELOAD is protected, LDAP_URL is not.
PROTECTED_PREFIXES: tuple[str, ...] = ("LD_", "GIT_")


def is_protected(destination_key: str) -> bool:
    """S4.6.1: matched on the destination key."""
    return destination_key in PROTECTED_NAMES or destination_key.startswith(PROTECTED_PREFIXES)


ACKNOWLEDGEMENT_LIMIT = 64


def precheck(
    acknowledged: Sequence[str], protected_destinations: Iterable[str] | None
) -> str | None:
    """S4.6.2, before any fetch: a refusal message, or None when the acknowledgement is right.

    ``protected_destinations`` is None in all-keys mode, where only the acknowledgement's own
    shape is checked here and delivered names are checked after the fetch (S4.6.3).
    """
    problems = []
    invalid = [n for n in acknowledged if not (_KEY_NAME.match(n) and is_protected(n))]
    if invalid:
        problems.append(f"not protected loader-control names (or wildcards): {key_list(invalid)}")
    duplicates = [n for n, count in Counter(acknowledged).items() if count > 1]
    if duplicates:
        problems.append(f"acknowledged more than once: {key_list(duplicates)}")
    if protected_destinations is not None:
        wanted = set(protected_destinations)
        if len(wanted) > ACKNOWLEDGEMENT_LIMIT:
            problems.append(
                f"{len(wanted)} protected destinations exceed the limit of "
                f"{ACKNOWLEDGEMENT_LIMIT} acknowledgements"
            )
        unacknowledged = wanted - set(acknowledged)
        extra = set(acknowledged) - wanted - set(invalid)
        if unacknowledged:
            problems.append(f"mapped but not acknowledged: {key_list(unacknowledged)}")
        if extra:
            problems.append(f"acknowledged but not mapped: {key_list(extra)}")
    if not problems:
        return None
    return "acknowledgedLoaderKeys must list exactly the mapped loader-control keys; " + "; ".join(
        problems
    )


def unacknowledged_delivered(delivered: Iterable[str], acknowledged: Iterable[str]) -> list[str]:
    """S4.6.3, all-keys mode: protected names delivered without acknowledgement."""
    allowed = set(acknowledged)
    return sorted(n for n in delivered if is_protected(n) and n not in allowed)


def acknowledgement_facts(names: Iterable[str]) -> dict[str, str]:
    """The exact ``acknowledgedLoaderKeys`` list S4.6 wants, as JSON and as a merge patch."""
    ordered = sorted(set(names))
    return {
        "acknowledged": json.dumps(ordered),
        "acknowledged_patch": json.dumps(
            {"spec": {"acknowledgedLoaderKeys": ordered}}, separators=(",", ":")
        ),
    }
