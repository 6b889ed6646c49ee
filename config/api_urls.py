"""The REST API, version 1: mounted at /api/v1/ by config.urls.

The apps' routes are listed here directly rather than through an ``include`` each: every level
of includes is one more resolver that Django walks, and one more match object it builds, for
every request.
"""

from django.urls import path

from config import views
from locks.urls import urlpatterns as lock_routes
from tokens.urls import urlpatterns as token_routes

urlpatterns = [
    path("", views.ApiRoot.as_view(), name="api-root"),
    *lock_routes,
    *token_routes,
]
