"""Loader-control keys (S4.6): names a process loader or runtime reads before the app runs.

This module is the one list: the CRD's S1.3.7 admission rule must name exactly these
(a test compares them), and the served-CRD check (S8.7) reads them from here.
"""

from __future__ import annotations

# S4.6.1 baseline: may grow, never shrink.
PROTECTED_NAMES: frozenset[str] = frozenset(
    {
        "PATH", "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "NODE_OPTIONS", "PYTHONSTARTUP",
        "PYTHONPATH", "PERL5OPT", "PERL5LIB", "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
        "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    }
)
# Prefixes include the underscore: LD_PRELOAD is protected, LDAP_URL is not.
PROTECTED_PREFIXES: tuple[str, ...] = ("LD_", "GIT_")


def is_protected(destination_key: str) -> bool:
    """S4.6.1: matched on the destination key."""
    return destination_key in PROTECTED_NAMES or destination_key.startswith(PROTECTED_PREFIXES)
