"""The Hikyo client (S3) and status-report sender (S7.3): the engine's ``HikyoServer`` port.

Strict on security, lenient on fields (pattern 11). ``endpoint`` checks the base URL and the
trust before any request, ``transport`` carries each exchange under the S3.2 rules, and
``delivery`` and ``reports`` map the wire to the engine's plain results.

``fetch`` and ``report_status`` never raise for HTTP or transport problems: they return a
result whose ``detail`` is a fixed, value-free text (S3.6). Only programming errors (bad
arguments) raise.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from types import TracebackType
from urllib.parse import quote

import requests

from workers.engine.fetched import FetchResult, ReportResult, Scope

from .delivery import fetch_body_limit, fetch_query, interpret_fetch
from .endpoint import build_ssl_context, normalize_base_url
from .reports import encode_report, interpret_report, report_body_limit
from .transport import Transport

__all__ = ["DEFAULT_USER_AGENT", "HikyoClient"]


def _package_version() -> str:
    try:
        return metadata.version("hikyo-operator")
    except metadata.PackageNotFoundError:
        return "0+unknown"


DEFAULT_USER_AGENT = f"hikyo-operator/{_package_version()}"  # S3.3


class HikyoClient:
    """One Hikyo instance's client (S3). May be cached per instance UID (S3.1).

    ``session`` is a seam for tests and pooling: a supplied session keeps its mounted
    adapters (so TLS trust is then theirs; ``ca_bundle`` is still validated), but is
    hardened against ambient config (S3.2) and is not closed by :meth:`close`.
    """

    def __init__(
        self,
        base_url: str,
        ca_bundle: str | None = None,
        *,
        user_agent: str = DEFAULT_USER_AGENT,
        session: requests.Session | None = None,
        timeout: float = 30.0,
        handshake_timeout: float = 10.0,
    ) -> None:
        if not (timeout > 0 and handshake_timeout > 0):
            raise ValueError("timeouts must be positive")
        self._base = normalize_base_url(base_url)
        self._transport = Transport(
            build_ssl_context(ca_bundle),
            session=session,
            timeout=timeout,
            handshake_timeout=handshake_timeout,
        )
        self._user_agent = user_agent

    # -- public -------------------------------------------------------------------------

    def fetch(
        self,
        scope: Scope,
        *,
        token: str,
        projection: str,
        cursor: str | None,
        acknowledged_keys: Sequence[str] = (),
    ) -> FetchResult:
        """S3.3 request and S3.5 mapping. An empty ``cursor`` counts as none (S4.3.1(1))."""
        query = fetch_query(projection, cursor, acknowledged_keys)
        headers = self._headers(token)
        url = self._scope_url(scope, "/delivery") + "?" + query
        answer = self._transport.exchange("GET", url, headers, None, fetch_body_limit)
        return interpret_fetch(answer, cursor_presented=bool(cursor))

    def report_status(self, scope: Scope, *, token: str, report: dict) -> ReportResult:
        """S7.3 POST of the closed report body; the caller applies S7.5 to the result."""
        body = encode_report(report)
        headers = self._headers(token)
        headers["Content-Type"] = "application/json"
        url = self._scope_url(scope, "/delivery/status")
        answer = self._transport.exchange("POST", url, headers, body, report_body_limit)
        return interpret_report(answer)

    def close(self) -> None:
        """Release pooled connections (only of a session this client created)."""
        self._transport.close()

    def __enter__(self) -> HikyoClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- request building ---------------------------------------------------------------

    def _headers(self, token: str) -> dict[str, str]:
        """S3.3 headers. No credential => no request (ValueError, value-free)."""
        if not isinstance(token, str) or not token:
            raise ValueError("a bearer token is required")
        if not all("\x21" <= ch <= "\x7e" for ch in token):  # S2.2.3 visible ASCII
            raise ValueError("the bearer token must be visible ASCII")
        return {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "User-Agent": self._user_agent,
            # Raw bytes are capped and parsed as sent; no decompression bombs.
            "Accept-Encoding": "identity",
        }

    def _scope_url(self, scope: Scope, suffix: str) -> str:
        """S3.3 path: IDs percent-encoded as single path segments."""
        org, project, environment = (
            _segment(scope.org),
            _segment(scope.project),
            _segment(scope.environment),
        )
        return (
            f"{self._base}/api/v1/orgs/{org}/projects/{project}/environments/{environment}{suffix}"
        )


def _segment(value: str) -> str:
    if not isinstance(value, str) or value in ("", ".", ".."):
        # Dot segments would be collapsed by URL normalisation and move the request.
        raise ValueError("scope IDs must be non-empty and not '.' or '..'")
    return quote(value, safe="")
