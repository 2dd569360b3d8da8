"""The admin under "Rate limiting": the "Live counters" page (views: ``admin_views``), overrides."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.timesince import timeuntil

from django_rl.admin import views as admin_views
from django_rl.admin.override_form import OverrideForm
from django_rl.models import LiveCounter, Override
from django_rl.overrides.rules import RATE

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[LiveCounter]
    OverrideModelAdmin = admin.ModelAdmin[Override]
else:  # ModelAdmin is generic only in django-stubs
    ModelAdmin = OverrideModelAdmin = admin.ModelAdmin


@admin.register(LiveCounter)
class LiveCounterAdmin(ModelAdmin):
    """Serves the page, its JSON, its charts' JSON and its reset instead of a change list.

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
            path("charts/", wrap(self.charts_view), name=f"{name}_charts"),
            path("reset/", wrap(self.reset_view), name=f"{name}_reset"),
            path("unblock/", wrap(self.unblock_view), name=f"{name}_unblock"),
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

    def charts_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.charts(self, request)

    def reset_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.reset(self, request)

    def unblock_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.unblock(self, request)


class InForceFilter(admin.SimpleListFilter):
    """Overrides in force, or expired (kept as a record until deleted)."""

    title = "in force"
    parameter_name = "in_force"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "In force"), ("no", "Expired")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(expires_at__gt=now)
        if self.value() == "no":
            return queryset.filter(expires_at__lte=now)
        return queryset


@admin.register(Override)
class OverrideAdmin(OverrideModelAdmin):
    """Overrides: listed with who set them and when; added, changed and deleted with the
    model's permissions (``django_rl.add_override``, ``change_override``,
    ``delete_override``; ``view_override`` to list them).

    Saving or deleting one reaches every process within about a second
    (``overrides/loader.py``).
    """

    form = OverrideForm
    list_display = (
        "policy",
        "identity",
        "override",
        "expires_at",
        "in_force",
        "reason",
        "created_by",
        "created_at",
        "updated_by",
        "updated_at",
    )
    list_filter = ("policy", "action", InForceFilter)
    search_fields = ("identity", "reason", "created_by", "updated_by")
    readonly_fields = ("created_by", "created_at", "updated_by", "updated_at")
    fieldsets = (
        (None, {"fields": ("policy", "identity", "action", "rate", "expires_at", "reason")}),
        ("Record", {"fields": ("created_by", "created_at", "updated_by", "updated_at")}),
    )

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # The list's times are the server's (TIME_ZONE), named, as on the live counters page.
        zone = timezone.get_current_timezone_name()
        context = {"subtitle": f"Times in {zone} (the server's time zone)", **(extra_context or {})}
        return super().changelist_view(request, context)

    @admin.display(description="override", ordering="action")
    def override(self, obj: Override) -> str:
        return f"rate {obj.rate}" if obj.action == RATE else obj.action

    @admin.display(description="in force", ordering="expires_at")
    def in_force(self, obj: Override) -> str:
        now = timezone.now()
        if obj.expires_at <= now:
            return "expired"
        return f"{timeuntil(obj.expires_at, now)} left"

    def save_model(
        self, request: HttpRequest, obj: Override, form: ModelForm[Override], change: bool
    ) -> None:
        who = request.user.get_username()
        if not change:
            obj.created_by = who
        obj.updated_by = who
        super().save_model(request, obj, form, change)
        # What manage.py check would warn about the same rate in settings (W020).
        for warning in getattr(form, "warnings", ()):
            messages.warning(request, warning)
