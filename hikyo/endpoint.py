"""Where a Hikyo client connects and whom it trusts: the base URL (S3.1) and the TLS context
(S3.2). Both are checked when a client is built, before any request; a refusal raises
:class:`InvalidBaseUrl` or :class:`InvalidTrust` with a fixed text that never repeats the input.
"""

from __future__ import annotations

import base64
import binascii
import re
import ssl
from urllib.parse import urlsplit

from workers.engine.errors import InvalidBaseUrl, InvalidTrust


def normalize_base_url(url: str) -> str:
    """S3.1: https, a host, no userinfo/query/fragment; one trailing ``/`` trimmed.

    Messages never repeat the URL: a rejected one may hold credentials in userinfo.
    """
    if not isinstance(url, str) or not url:
        raise InvalidBaseUrl("base URL is empty")
    if any(ch <= " " or ch in "\x7f\\" for ch in url):
        raise InvalidBaseUrl("base URL contains whitespace, control characters or '\\'")
    if "?" in url or "#" in url:
        raise InvalidBaseUrl("base URL must not have a query or fragment")
    parts = urlsplit(url)
    if parts.scheme.lower() != "https":
        raise InvalidBaseUrl("base URL must use https")
    if "@" in parts.netloc:
        raise InvalidBaseUrl("base URL must not contain userinfo")
    if not parts.hostname:
        raise InvalidBaseUrl("base URL has no host")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise InvalidBaseUrl("base URL has an invalid port") from None
    path = parts.path[:-1] if parts.path.endswith("/") else parts.path
    return f"https://{parts.netloc}{path}"


_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.DOTALL)


def build_ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """S3.2: the TLS context. ``None`` = system store; otherwise only the bundle's certs.

    The bundle is base64 (standard alphabet; line breaks ignored) of PEM text. Blocks
    that do not parse are skipped; no parsable certificate at all is an error, never a
    fallback to system roots.
    """
    if ca_bundle is None:
        context = ssl.create_default_context()
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # loads no roots
        loaded = sum(_load_pem_block(context, block) for block in _pem_blocks(ca_bundle))
        if not loaded:
            raise InvalidTrust("CA bundle holds no parsable PEM certificate")
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _pem_blocks(ca_bundle: str) -> list[bytes]:
    compact = ca_bundle.replace("\r", "").replace("\n", "")
    try:
        pem = base64.b64decode(compact.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        pem = None
    if pem is None:  # raised outside the handler: the bad input stays out of __context__
        raise InvalidTrust("CA bundle is not valid base64")
    return _PEM_CERT.findall(pem)


def _load_pem_block(context: ssl.SSLContext, block: bytes) -> bool:
    try:
        context.load_verify_locations(cadata=block.decode("ascii"))
    except (UnicodeDecodeError, ssl.SSLError, ValueError):
        return False
    return True
