"""The REST API, version 1: mounted at /api/v1/ by config.urls."""

from django.urls import include, path

from config import views

urlpatterns = [
    path("", views.ApiRoot.as_view(), name="api-root"),
    path("", include("locks.urls")),
    path("", include("tokens.urls")),
]
