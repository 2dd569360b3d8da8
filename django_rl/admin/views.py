"""The live counters page, its JSON (polled by the page) and its reset.

Each view is a function of the ModelAdmin that serves it (``admin.py``), so
the admin's own login, permission and CSRF machinery apply.
"""

from __future__ import annotations

import os
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from redis.exceptions import RedisError

from django_rl.admin.forms import QueryForm, ResetForm, UnblockForm
from django_rl.core.reprs import counted
from django_rl.exceptions import BackendError, ConfigurationError, UnknownPolicy
from django_rl.inspection import (
    FIRST_PAGE,
    CursorError,
    Page,
    identities_everywhere,
    list_counters,
    reset_everywhere,
)
from django_rl.observability.history import read as read_history
from django_rl.policies.fallback import Episode, get_fallback_store
from django_rl.policies.registry import policies_named, policy_names

if TYPE_CHECKING:
    from django_rl.admin import LiveCounterAdmin

#: How often the page asks for fresh counters.
POLL_INTERVAL_MS = 3000
TEMPLATES = "admin/django_rl/livecounter/"


def page(model_admin: LiveCounterAdmin, request: HttpRequest) -> HttpResponse:
    """Render the page with its first rows; its script then keeps them fresh."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    form = QueryForm(request.GET)
    listed, error, _ = _list(form)
    context = {
        **model_admin.admin_site.each_context(request),
        **_fragments_context(model_admin, request, form, listed),
        "title": "Live counters",
        "form": form,
        "error": error,
        "policy_names": _policy_names(),
        "data_url": f"{_url(model_admin, 'data')}?{form.filters()}",
        "history_url": _url(model_admin, "charts"),
        "reset_url": _url(model_admin, "reset"),
        "unblock_url": _url(model_admin, "unblock"),
        "poll_interval_ms": POLL_INTERVAL_MS,
        "updated": timezone.now(),
        # Every time on the page is in this zone, named (the script too: data-time-zone).
        "time_zone": timezone.get_current_timezone_name(),
        "fallback": _fallback_context(),
    }
    return TemplateResponse(request, TEMPLATES + "live_counters.html", context)


def data(model_admin: LiveCounterAdmin, request: HttpRequest) -> HttpResponse:
    """Return one page of counters as JSON: the rows, and the page's HTML for them."""
    if not model_admin.has_view_permission(request):
        return JsonResponse({"error": "You may not view the live counters."}, status=403)
    form = QueryForm(request.GET)
    listed, error, status = _list(form)
    fallback = render_to_string(
        TEMPLATES + "fallback.html", {"fallback": _fallback_context()}, request
    ).strip()
    if listed is None:
        # Said with an error too when there is something to say: local
        # decisions matter most while Redis cannot be read.
        answer = {"error": error, "fallback": fallback} if fallback else {"error": error}
        return JsonResponse(answer, status=status)
    context = _fragments_context(model_admin, request, form, listed)
    return JsonResponse(
        {
            "rows": [row.as_dict() for row in listed.rows],
            "cursor": listed.query.cursor,
            "next_cursor": listed.next_cursor,
            "examined": listed.examined,
            "keys_in_redis": listed.keys_in_redis,
            "skipped": listed.skipped,
            "unavailable": list(listed.unavailable),
            "updated": timezone.now().isoformat(),
            "tbody": render_to_string(TEMPLATES + "rows.html", context, request),
            "summary": render_to_string(TEMPLATES + "summary.html", context, request),
            "fallback": fallback,
        }
    )


def charts(model_admin: LiveCounterAdmin, request: HttpRequest) -> HttpResponse:
    """Return the last hour per policy as JSON, for the charts (``observability/history.py``).

    ``{"minutes": [...], "policies": {name: {"allowed": [...], "denied": [...],
    "shadow_denied": [...], "top": [[identity, denials], ...]}}, "updated": ...}``:
    every policy with decisions in the hour (the drop-ins' too). Redis that
    cannot be read answers 503 with ``{"error": ...}``.
    """
    if not model_admin.has_view_permission(request):
        return JsonResponse({"error": "You may not view the live counters."}, status=403)
    try:
        answer = read_history()
    except RedisError as exc:
        return JsonResponse({"error": f"Redis could not be read: {exc}"}, status=503)
    except ConfigurationError as exc:
        message = f"The rate-limit settings are invalid ({exc}); run manage.py check."
        return JsonResponse({"error": message}, status=500)
    return JsonResponse({**answer, "updated": timezone.now().isoformat()})


def reset(model_admin: LiveCounterAdmin, request: HttpRequest) -> HttpResponse:
    """Ask for confirmation, then reset the selected rows and/or one identity everywhere.

    Rows go through ``Policy.reset`` of their policy (every rate; every
    policy of an inline group); an identity is reset under every policy
    (``inspection.reset_everywhere``).
    """
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_reset_permission(request):
        raise PermissionDenied
    form = ResetForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(_errors(form)))
        return HttpResponseRedirect(_url(model_admin, "changelist"))
    back = f"{_url(model_admin, 'changelist')}?{form.cleaned_data['back']}"
    rows = form.cleaned_data["rows"]
    identity = form.cleaned_data["identity"]
    if not form.cleaned_data["confirmed"]:
        context = {
            **model_admin.admin_site.each_context(request),
            "opts": model_admin.opts,
            "title": "Reset counters?",
            "rows": rows,
            "identity": identity,
            "policy_names": _policy_names(),
            "back": back,
            "back_query": form.cleaned_data["back"],
        }
        return TemplateResponse(request, TEMPLATES + "reset_confirmation.html", context)
    try:
        # An address is, under each policy, the identity requests from it have.
        counted_as = identities_everywhere(identity) if identity else []
        shown = sorted({str(who) for _, who in counted_as})
        deleted = sum(policy.reset(who) for name, who in rows for policy in policies_named(name))
        everywhere = reset_everywhere(identity) if identity else {}
    except ValueError as exc:  # a network: not one identity
        messages.error(request, f"Nothing was reset: {exc}")
        return HttpResponseRedirect(back)
    except (BackendError, ConfigurationError) as exc:
        messages.error(request, f"Nothing more was reset: {exc}")
        return HttpResponseRedirect(back)
    done = []
    if rows:
        done.append(f"Reset {counted(len(rows), 'counter')}: {counted(deleted, 'key')} deleted.")
    if identity:
        done.append(
            f"Reset {', '.join(shown) or identity} under "
            f"{counted(len(everywhere), 'policy', 'policies')}: "
            f"{counted(sum(everywhere.values()), 'key')} deleted."
        )
    messages.success(request, " ".join(done))
    return HttpResponseRedirect(back)


def unblock(model_admin: LiveCounterAdmin, request: HttpRequest) -> HttpResponse:
    """End the blocks of the rows posted (``Policy.unblock``); POST, the reset permission."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_reset_permission(request):
        raise PermissionDenied
    form = UnblockForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(_errors(form)))
        return HttpResponseRedirect(_url(model_admin, "changelist"))
    back = f"{_url(model_admin, 'changelist')}?{form.cleaned_data['back']}"
    ended = []
    try:
        for name, who in form.cleaned_data["unblock"]:
            if any(policy.unblock(who) for policy in policies_named(name)):
                ended.append(f"{who} under {name}")
    except (TypeError, ConfigurationError) as exc:
        messages.error(request, f"Nothing more was unblocked: {exc}")
        return HttpResponseRedirect(back)
    if ended:
        messages.success(request, f"Unblocked {', '.join(ended)}.")
    else:
        messages.warning(request, "Nothing was blocked (or Redis could not answer).")
    return HttpResponseRedirect(back)


def _list(form: QueryForm) -> tuple[Page | None, str, int]:
    """Return (the page, "", 200) or (None, why not, the HTTP status that says so)."""
    if not form.is_valid():
        return None, " ".join(_errors(form)), 400
    try:
        return list_counters(form.query), "", 200
    except CursorError as exc:
        # Checked against the servers there are only now: still the asker's error.
        return None, str(exc), 400
    except BackendError as exc:
        return None, f"Redis could not be read: {exc}", 503
    except UnknownPolicy as exc:
        return None, str(exc), 400
    except ConfigurationError as exc:
        return None, f"The rate-limit settings are invalid ({exc}); run manage.py check.", 500


def _fragments_context(
    model_admin: LiveCounterAdmin, request: HttpRequest, form: QueryForm, listed: Page | None
) -> dict[str, Any]:
    """Return what rows.html and summary.html need, on the page and in the JSON."""
    return {
        "opts": model_admin.opts,
        "page": listed,
        "rows": listed.rows if listed else [],
        "can_reset": model_admin.has_reset_permission(request),
        "unblock_url": _url(model_admin, "unblock"),
        "exact": form.is_valid() and form.query.exact,
        "first": form.is_valid() and form.query.cursor == FIRST_PAGE,
        "filtered": bool(form.data.get("policy") or form.data.get("q")),
        "next_query": form.filters(cursor=listed.next_cursor) if listed else "",
        "examined": f"{min(listed.examined, listed.keys_in_redis):,}" if listed else "",
        "keys_in_redis": f"{listed.keys_in_redis:,}" if listed else "",
        "first_query": form.filters(cursor=None),
        "override_url": _override_url(model_admin, request),
    }


def _fallback_context() -> dict[str, Any]:
    """Return what fallback.html says: whether and since when this process decides locally.

    Only this process is known here: each process of a site has its own
    local counts (``fallback.py``), and the page is served by one of them.
    """
    try:
        status = get_fallback_store().status()
    except ConfigurationError:
        return {}
    return {
        "pid": os.getpid(),
        "current": _episode(status.current),
        "previous": _episode(status.previous),
        "identities": f"{status.identities:,}",
        "max_identities": f"{status.max_identities:,}",
        "evicted": f"{status.evicted:,}",
    }


def _episode(episode: Episode | None) -> dict[str, Any] | None:
    if episode is None:
        return None

    def moment(timestamp: float) -> datetime:
        return datetime.fromtimestamp(timestamp, tz=dt_timezone.utc)

    return {
        "since": moment(episode.since),
        "until": None if episode.until is None else moment(episode.until),
        "last": moment(episode.last),
        "decisions": counted(episode.decisions, "local decision"),
        "policies": ", ".join(episode.policies),
    }


def _override_url(model_admin: LiveCounterAdmin, request: HttpRequest) -> str:
    """Return the URL of the form that adds an override, for those who may; else ""."""
    if not request.user.has_perm(f"{model_admin.opts.app_label}.add_override"):
        return ""
    name = f"admin:{model_admin.opts.app_label}_override_add"
    return reverse(name, current_app=model_admin.admin_site.name)


def _policy_names() -> list[str]:
    try:
        return policy_names()
    except ConfigurationError:
        return []


def _url(model_admin: LiveCounterAdmin, view: str) -> str:
    opts = model_admin.opts
    return reverse(
        f"admin:{opts.app_label}_{opts.model_name}_{view}", current_app=model_admin.admin_site.name
    )


def _errors(form: QueryForm | ResetForm | UnblockForm) -> list[str]:
    return [f"{message}" for messages_ in form.errors.values() for message in messages_]
