"""System checks of the HTTP settings: HEADERS (E050), RATELIMITED_VIEW (E051),
throttle_policies (E052, and E013 for the names it lists)."""

from __future__ import annotations

import pytest
from django.core.checks import Error
from django.test import Client

from django_rl.checks.system import check_settings
from django_rl.exceptions import ConfigurationError

POLICIES = {
    "single": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
    "burst": {"algorithm": "token_bucket", "capacity": 3, "rate": "1/m", "key": "ip"},
    "sustained": {"algorithm": "sliding_log", "rate": "10/m", "key": "ip"},
}
VIEW_HINT = (
    "Set it to None (django_rl's own 429) or to the dotted path of a sync "
    "view(request, exception) that returns the response, e.g. 'myapp.views.rate_limited'."
)


def errors(settings, urls="tests.sites.urls_without_limits", **rl):
    settings.ROOT_URLCONF = urls
    settings.DJANGO_RL = {"POLICIES": POLICIES, **rl}
    return check_settings()


def test_the_http_test_urls_are_clean(settings):
    assert errors(settings, urls="tests.sites.urls_http") == []


@pytest.mark.parametrize("mode", ["ietf", "legacy", "both", None])
def test_every_header_mode_is_accepted(settings, mode):
    assert errors(settings, HEADERS=mode) == []


@pytest.mark.parametrize("mode", ["IETF", "draft", "", False, True, 0, ["ietf"]])
def test_a_bad_header_mode_is_e050(settings, mode):
    assert errors(settings, HEADERS=mode) == [
        Error(
            f"DJANGO_RL['HEADERS'] is {mode!r}",
            hint="Use 'ietf' (RateLimit-Policy and RateLimit), 'legacy' (X-RateLimit-*), "
            "'both', or None to send no rate-limit headers.",
            id="django_rl.E050",
        )
    ]


def test_a_good_ratelimited_view(settings):
    assert errors(settings, RATELIMITED_VIEW="tests.sites.views_http.rate_limited") == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (42, "DJANGO_RL['RATELIMITED_VIEW'] is 42"),
        ("rate_limited", "DJANGO_RL['RATELIMITED_VIEW'] is 'rate_limited'"),
        (
            "tests.sites.views_http.nowhere",
            "DJANGO_RL['RATELIMITED_VIEW'] 'tests.sites.views_http.nowhere' could not be imported: "
            'Module "tests.sites.views_http" does not define a "nowhere" attribute/class',
        ),
        (
            "tests.checks.test_checks_http.VIEW_HINT",
            "DJANGO_RL['RATELIMITED_VIEW'] 'tests.checks.test_checks_http.VIEW_HINT' is not "
            "callable",
        ),
        (
            "tests.sites.views_http.single_async",
            "DJANGO_RL['RATELIMITED_VIEW'] 'tests.sites.views_http.single_async' is an async "
            "function",
        ),
    ],
)
def test_a_bad_ratelimited_view_is_e051(settings, value, message):
    assert errors(settings, RATELIMITED_VIEW=value) == [
        Error(message, hint=VIEW_HINT, id="django_rl.E051")
    ]


def test_a_bad_ratelimited_view_used_anyway_raises_its_check(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_http"
    settings.DJANGO_RL = {
        "POLICIES": POLICIES,
        "RATELIMITED_VIEW": "tests.sites.views_http.nowhere",
    }
    client = Client(raise_request_exception=True)
    for _ in range(5):
        assert client.get("/single/").status_code == 200
    with pytest.raises(ConfigurationError, match=r"could not be imported.*\(django_rl.E051\)"):
        client.get("/single/")


def test_throttle_policies_problems(settings):
    found = errors(settings, urls="tests.sites.urls_http_bad")
    assert [(e.id, e.msg) for e in found] == [
        (
            "django_rl.E052",
            "view 'tests.sites.urls_http_bad.StringPolicies' has throttle_policies that are not a "
            "list of policy names",
        ),
        (
            "django_rl.E013",
            "view 'tests.sites.urls_http_bad.UnknownInList' names the rate-limit policy 'nightly', "
            "which does not exist",
        ),
    ]
    assert found[0].hint == (
        "Write e.g. throttle_policies = ['burst', 'daily'] (a list or tuple of names; "
        "a bare string is a common slip)."
    )


def test_throttle_policies_as_a_string_used_anyway_raises_e052(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_http_bad"
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    with pytest.raises(
        ConfigurationError, match=r"throttle_policies is 'burst' \(django_rl.E052\)"
    ):
        Client(raise_request_exception=True).get("/string/")
