"""Top-level routes: the dashboard, the REST API under /api/v1/, and Django admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("api/v1/", include(("controlplane.api_urls", "api"))),
    path("admin/", admin.site.urls),
    path("", include("controlplane.dashboard.urls")),
]
