"""API-key calls under /api/v1/ take the short middleware chain; everything else the whole one."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import RequestFactory

from config.middleware import carries_api_key
from tests.helpers.api import issue, select, token

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("path", "header", "expected"),
    [
        ("/api/v1/selections/", "Api-Key abc.def", True),
        ("/api/v1/selections/tx/spend/", "api-key abc.def", True),  # the scheme ignores case
        ("/api/v1/selections/", "Api-Key ", True),  # an empty key is refused by the key's rules
        ("/api/v1/selections/", "Bearer abc.def", False),
        ("/api/v1/selections/", "Api-Key", False),
        ("/api/v1/selections/", "", False),
        ("/api/schema/", "Api-Key abc.def", False),
        ("/admin/", "Api-Key abc.def", False),
    ],
)
def test_which_requests_take_the_short_chain(path, header, expected):
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    assert carries_api_key(RequestFactory().get(path, **extra)) is expected


def test_an_api_key_call_gets_the_security_headers_and_none_of_the_browsers(api):
    issue(api, token(quantity="5"))
    assert select(api, "tx", "3").json()["total"] == "5"
    response = api.get("/api/v1/selections/tx/")
    assert response.status_code == 200
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert "X-Frame-Options" not in response  # clickjacking protection is for pages
    assert "Cookie" not in response.get("Vary", "")
    assert not response.cookies


def test_a_bad_key_is_refused_on_the_short_chain(client_for):
    response = client_for("nope.nope").get("/api/v1/selections/")
    assert response.status_code == 401
    assert response.json()["code"] == "authentication_failed"
    assert "X-Frame-Options" not in response


def test_a_key_decides_even_beside_a_staff_session(client_for, admin_user):
    client = client_for("nope.nope")
    client.force_login(admin_user)
    assert client.get("/api/v1/selections/").status_code == 401  # no fallback to the session


def test_staff_sessions_and_pages_keep_the_whole_chain(client_for):
    staff = client_for(None)
    staff.force_login(get_user_model().objects.create_superuser("root", password="pw"))
    response = staff.get("/api/v1/selections/")
    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY"
    # A stray key header on an admin page: the page still has its session and user.
    staff.credentials(HTTP_AUTHORIZATION="Api-Key abc.def")
    page = staff.get("/admin/")
    assert page.status_code == 200
    assert page["X-Frame-Options"] == "DENY"
