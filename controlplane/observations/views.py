"""Probes: /healthz (the process answers) and /readyz (S8.3: ready to do its job)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from . import process


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
