"""Login throttling on the dashboard's login page (issue 35 item 8), with Django's own means.

``user_login_failed`` counts each failed login in the cache, per client address and username
and per client address alone; ``LoginThrottle`` (MIDDLEWARE) answers a login POST from a client
over either limit 429 before its password is checked. A successful login clears its own
address-and-username count. The counts live in the process's cache (LocMemCache): each replica
throttles on its own, and a restart forgets them, which bounds a lockout too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

FAILURES_PER_USERNAME = 5  # failed logins from one address for one username ...
FAILURES_PER_ADDRESS = 20  # ... or for any usernames, before its logins are refused
WINDOW_SECONDS = 15 * 60  # counted from the first failure; the lockout ends with the window


def _address(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "-")


def _keys(request: HttpRequest, username: str) -> tuple[str, str]:
    """Cache keys: the username hashed, so any text a client posts makes a well-formed key."""
    digest = hashlib.sha256(username.casefold().encode()).hexdigest()[:32]
    address = _address(request)
    return f"hikyo-login:{address}:{digest}", f"hikyo-login:{address}"


def _count(key: str) -> None:
    cache.add(key, 0, WINDOW_SECONDS)  # starts the window; a running one keeps its end
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr: a new window
        cache.set(key, 1, WINDOW_SECONDS)


def count_failure(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any
) -> None:
    if request is None:  # authenticate() outside a request (a command): nothing to throttle
        return
    for key in _keys(request, str(credentials.get("username") or "")):
        _count(key)


def clear_on_login(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    if request is not None:
        cache.delete(_keys(request, user.get_username())[0])


def throttled(request: HttpRequest, username: str) -> str | None:
    """Which limit this login is over, as the refusal says it; None when it is under both."""
    per_username, per_address = _keys(request, username)
    if (cache.get(per_username) or 0) >= FAILURES_PER_USERNAME:
        return f"{FAILURES_PER_USERNAME} failed logins for this username from your address"
    if (cache.get(per_address) or 0) >= FAILURES_PER_ADDRESS:
        return f"{FAILURES_PER_ADDRESS} failed logins from your address, for any usernames"
    return None


def connect() -> None:
    """Called once from the app's ready()."""
    user_login_failed.connect(count_failure, dispatch_uid="hikyo-login-throttle-failed")
    user_logged_in.connect(clear_on_login, dispatch_uid="hikyo-login-throttle-cleared")


class LoginThrottle:
    """Refuses a login POST from a throttled client with 429 (django.request logs it as one
    line) before the password is checked, so a guesser learns nothing more in the window."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        login = reverse("admin:login") if request.method == "POST" else ""
        if login and request.path_info == login:
            over = throttled(request, request.POST.get("username", ""))
            if over:
                response = render(
                    request,
                    "observations/login_throttled.html",
                    {"over": over, "minutes": WINDOW_SECONDS // 60, "login_url": login},
                    status=429,
                )
                response["Retry-After"] = str(WINDOW_SECONDS)
                return response
        return self.get_response(request)
