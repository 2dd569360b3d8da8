"""The admin's "Live counters" page, under "Rate limiting"; the views are in ``admin_views``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path

from django_rl import admin_views
from django_rl.models import LiveCounter

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[LiveCounter]
else:  # ModelAdmin is generic only in django-stubs
    ModelAdmin = admin.ModelAdmin


@admin.register(LiveCounter)
class LiveCounterAdmin(ModelAdmin):
    """Serves the page, its JSON and its reset instead of a change list.

    Viewing needs ``django_rl.view_livecounter``, resetting
    ``django_rl.reset_livecounter`` (superusers have both); the admin site
    sends everyone who is not active staff to its login page first. There
    are no objects to add, change or delete.
    """

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("", wrap(self.changelist_view), name=f"{name}_changelist"),
            path("data/", wrap(self.data_view), name=f"{name}_data"),
            path("reset/", wrap(self.reset_view), name=f"{name}_reset"),
        ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_reset_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may reset counters."""
        return request.user.has_perm(f"{self.opts.app_label}.reset_livecounter")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, object] | None = None
    ) -> HttpResponse:
        return admin_views.page(self, request)

    def data_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.data(self, request)

    def reset_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.reset(self, request)
