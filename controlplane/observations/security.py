"""The Content-Security-Policy header (Django 5.2 has no built-in one; 6.0 adds it).

One fixed policy from settings.CONTENT_SECURITY_POLICY on every response that has none of its
own. The admin needs no nonce or hash: Django 5.2's admin templates carry no inline script
(their data rides in ``<script type="application/json">`` or data- attributes, which CSP does
not execute) and no style attribute; its scripts set styles through the CSSOM, which
``style-src 'self'`` allows.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"
NO_SECRET_KEY = (
    "DJANGO_SECRET_KEY is not set: the dashboard answers loopback clients only (kubectl "
    "port-forward); set it to a shared secret to serve the dashboard beyond"
)

log = logging.getLogger(__name__)


class ContentSecurityPolicy:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy: str = settings.CONTENT_SECURITY_POLICY

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.policy and HEADER not in response:
            response[HEADER] = self.policy
        return response


class WithoutTraceback(logging.Filter):
    """Keeps a record's message and drops its traceback: a refused Host header (a scanner, a
    misconfigured proxy) is one log line, not twenty (settings.LOGGING)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True


class ClientErrorsWithoutTraceback(WithoutTraceback):
    """On django.request: an answer the dashboard gives on purpose (403 PermissionDenied to a
    user without the permission, 400 to a malformed request) is one line with its status and
    method; Django would attach the exception's traceback to it. A 5xx is a fault of ours and
    keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and status < 500:
            request = getattr(record, "request", None)
            method = getattr(request, "method", None) or "-"
            record.msg = f"{record.getMessage()} status={status} method={method}"
            record.args = None
            super().filter(record)
        return True


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class LoopbackOnlyWithoutSecretKey:
    """Second in MIDDLEWARE, after the probes (issue 35 item 8): without DJANGO_SECRET_KEY the
    sessions would be signed with a random per-process key, dying at every restart and differing
    between replicas, so the dashboard answers loopback clients only (a port-forward arrives on
    loopback) and refuses others with 403 and the one-line reason, logged once at start."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.refusing = not settings.SECRET_KEY_FROM_ENVIRONMENT
        if self.refusing:
            log.warning("%s", NO_SECRET_KEY)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.refusing and not _loopback(str(request.META.get("REMOTE_ADDR") or "")):
            return HttpResponse(f"{NO_SECRET_KEY}\n", status=403, content_type="text/plain")
        return self.get_response(request)
