"""URL routes: the read-only admin dashboard and the health probes."""

from django.contrib import admin
from django.urls import path

from controlplane.observations import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
]
