"""``django_rl.W052``: a DRF view whose named policies no throttle of it reads.

``throttle_scope`` and ``throttle_policies`` limit a view only through
``PolicyThrottle``; ``throttle_scope`` also through a ``ScopedRateThrottle``
(DRF's own meaning). Elsewhere they limit nothing, silently: the check says
so, naming the view and ``PolicyThrottle``.
"""

from __future__ import annotations

import io

import pytest
from django.core.checks import Warning, run_checks
from django.core.management import call_command

from django_rl.checks.names import SETTINGS_TAG
from django_rl.docs_urls import doc_url

URLS = "tests.sites.urls_drf_unthrottled"
HINT = (
    "Add 'django_rl.throttling.PolicyThrottle' to REST_FRAMEWORK['DEFAULT_THROTTLE_CLASSES'] "
    f"or to the view's throttle_classes, or remove the names. See {doc_url('checks')}"
)


def warned(settings, urls=URLS):
    settings.ROOT_URLCONF = urls
    return [m for m in run_checks(tags=[SETTINGS_TAG]) if m.id == "django_rl.W052"]


def message(view, named, one=False):
    return (
        f"DRF view 'tests.sites.urls_drf_unthrottled.{view}' names "
        f"{'a rate-limit policy' if one else 'rate-limit policies'} ({named}), but "
        "PolicyThrottle is not among its throttles: nothing limits the view by "
        f"{'it' if one else 'them'}"
    )


@pytest.fixture(autouse=True)
def _policies(settings):
    rate = {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"}
    settings.DJANGO_RL = {"POLICIES": {"burst": rate, "daily": rate}}


def test_views_that_name_policies_no_throttle_reads_are_warned_about(settings):
    found = warned(settings)
    assert all(isinstance(m, Warning) and m.hint == HINT for m in found)
    assert sorted(m.msg for m in found) == sorted(
        [
            message("AnonOnly", "throttle_policies 'burst', 'daily'"),
            message("NoThrottles", "throttle_scope 'burst'", one=True),
            message("Reports", "throttle_scope 'burst'", one=True),  # its list, not its action
            message("ScopedWithPolicies", "throttle_policies 'daily'", one=True),
        ]
    )


def test_a_view_that_keeps_drfs_default_throttles_is_judged_by_the_settings(settings):
    assert not any("Inherits" in m.msg for m in warned(settings))
    settings.REST_FRAMEWORK = {
        "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle"]
    }
    assert [m.msg for m in warned(settings) if "Inherits" in m.msg] == [
        message("Inherits", "throttle_scope 'burst'", one=True)
    ]


@pytest.mark.parametrize(
    "urls", ["tests.sites.urls", "tests.sites.urls_contrib_drf", "tests.sites.urls_http"]
)
def test_the_suites_own_urlconfs_have_no_such_view(settings, urls):
    assert warned(settings, urls) == []


def test_manage_py_check_prints_it(settings):
    settings.ROOT_URLCONF = URLS
    out = io.StringIO()
    call_command("check", stdout=out, stderr=out)
    text = out.getvalue()
    assert "(django_rl.W052) DRF view 'tests.sites.urls_drf_unthrottled.NoThrottles'" in text
    assert "PolicyThrottle is not among its throttles" in text
    assert "System check identified 4 issues" in text
