"""URL map: the admin, the REST API under /api/v1/, its schema and docs, health probes."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from config import views
from config.metrics_view import metrics_view
from locks.admin_views import dashboard_view

urlpatterns = [
    # First: Django tries the patterns in order, and the API serves the most requests.
    path("api/v1/", include("config.api_urls")),
    # Before admin/ so the admin's catch-all never sees it; admin_view requires a staff login.
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="admin-dashboard"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("healthz", views.Healthz.as_view(), name="healthz"),
    path("readyz", views.Readyz.as_view(), name="readyz"),
    path("metrics", metrics_view, name="metrics"),
]

# JSON errors under /api/, Django's pages elsewhere (used when DEBUG is off).
handler404 = "config.views.not_found"
handler500 = "config.views.server_error"
