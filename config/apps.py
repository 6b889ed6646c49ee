"""The admin app with Sherdlock's admin site as ``admin.site``."""

from django.contrib.admin.apps import AdminConfig


class SherdlockAdminConfig(AdminConfig):
    default_site = "config.admin_site.SherdlockAdminSite"
