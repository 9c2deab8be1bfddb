"""Probes: /healthz (the process answers) and /readyz (S8.3: ready to do its job), and the
middleware that lets the probe paths answer under any Host header."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseNotFound
from django.urls import Resolver404, resolve

from . import process

# S8.3/S8.6: kubelet probes and Prometheus scrape the pod IP, which ALLOWED_HOSTS does not
# (and cannot sensibly) list. These paths answer whatever the Host; nothing else does.
ANY_HOST_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class ProbesAnyHost:
    """First in MIDDLEWARE: serves ANY_HOST_PATHS directly, before CommonMiddleware's
    request.get_host() would refuse an unlisted Host with 400. Those views read no session,
    user or CSRF state, so skipping the rest of the chain costs them nothing; every other path
    (the dashboard) keeps the ALLOWED_HOSTS check."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info not in ANY_HOST_PATHS:
            return self.get_response(request)
        try:
            match = resolve(request.path_info)
        except Resolver404:  # e.g. /metrics before it is routed
            return HttpResponseNotFound("not found\n", content_type="text/plain")
        return match.func(request, *match.args, **match.kwargs)


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok\n", content_type="text/plain")


def readyz(request: HttpRequest) -> HttpResponse:
    """A follower is ready; the leader once its watchers have listed everything."""
    operator = process.current
    if operator is None:
        return HttpResponse("operator not running\n", status=503, content_type="text/plain")
    problem = operator.problem()
    if problem:
        return HttpResponse(f"{problem}\n", status=503, content_type="text/plain")
    role = "leader" if operator.is_leader() else "standby"
    return HttpResponse(f"ok ({role})\n", content_type="text/plain")
