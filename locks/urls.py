"""Routes of the selection and lock endpoints, mounted under /api/v1/."""

from django.urls import path

from locks import views

# A tx_id is any printable string without "/", which would split the path.
urlpatterns = [
    path("selections/", views.SelectionListCreate.as_view(), name="selection-list"),
    path("selections/<str:tx_id>/", views.SelectionDetail.as_view(), name="selection-detail"),
    path("selections/<str:tx_id>/spend/", views.SelectionSpend.as_view(), name="selection-spend"),
    path(
        "selections/<str:tx_id>/release/",
        views.SelectionRelease.as_view(),
        name="selection-release",
    ),
    path(
        "selections/<str:tx_id>/extend/", views.SelectionExtend.as_view(), name="selection-extend"
    ),
    path("locks/", views.LockList.as_view(), name="lock-list"),
]
