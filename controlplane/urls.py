"""URL routes: the read-only admin dashboard and the health probes."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import path


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
]
