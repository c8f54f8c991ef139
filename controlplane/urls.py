"""Top-level routes: the dashboard, the REST API under /api/v1/ (anything else under /api/ is a JSON 404),
Prometheus's /metrics, /healthz and Django admin."""

from django.contrib import admin
from django.urls import include, path, re_path

from controlplane.alerts.exposition import metrics_view
from controlplane.dashboard.views.health import healthz
from controlplane.lib.api_errors import api_route_not_found

urlpatterns = [
    path("api/v1/", include(("controlplane.api_urls", "api"))),
    re_path(r"^api/", api_route_not_found),
    path("admin/", admin.site.urls),
    # Prometheus scrapes this (Bearer METRICS_API_KEY); signed-in users may read it too.
    path("metrics", metrics_view, name="metrics"),
    # Probes and scripts: the background loops of this process (no sign-in; states and times only).
    path("healthz", healthz, name="healthz"),
    path("", include("controlplane.dashboard.urls")),
]
