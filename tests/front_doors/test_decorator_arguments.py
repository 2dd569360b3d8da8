"""``@ratelimit``'s arguments: judged when applied, or by ``manage.py check``.

``methods`` and ``cost`` are refused when the decorator is applied if they are
wrong on their own; a cost above a named policy's limit is a check error
(django_rl.E014) and, used anyway, a 429 (never a 500). ``methods=["GET"]``
counts HEAD, which runs the GET view.
"""

from __future__ import annotations

import logging

import pytest
from django.core.checks import Error
from django.test import Client

from django_rl.checks.system import check_settings
from django_rl.decorators import ratelimit
from tests.conftest import start_of_fresh_window
from tests.sites import urls_costs


@pytest.mark.parametrize("methods", ["POST", b"POST"])
def test_methods_as_a_bare_string_is_refused(methods):
    with pytest.raises(TypeError) as info:
        ratelimit("writes", methods=methods)
    assert str(info.value) == (
        f"ratelimit(methods={methods!r}): pass a list of HTTP methods, "
        f"e.g. methods=[{methods!r}]; a string would be read letter by letter"
    )


@pytest.mark.parametrize(
    ("methods", "error", "message"),
    [
        (
            ["PSOT"],
            ValueError,
            "ratelimit(methods=...): unknown HTTP method 'PSOT'; known methods are "
            "CONNECT, DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, TRACE",
        ),
        (
            [],
            ValueError,
            "ratelimit(methods=[]) would count no request; leave methods out to count every method",
        ),
        (["POST", 1], TypeError, "ratelimit(methods=...): 1 is not an HTTP method name"),
        (5, TypeError, "ratelimit(methods=5): pass a list of HTTP methods, e.g. ['POST']"),
    ],
)
def test_bad_methods_are_refused(methods, error, message):
    with pytest.raises(error) as info:
        ratelimit("writes", methods=methods)
    assert str(info.value) == message


def test_methods_are_read_in_any_case_and_get_brings_head():
    (limit,) = ratelimit("writes", methods=("post", "Get"))(lambda request: None).django_rl_limits
    assert limit.methods == frozenset({"POST", "GET", "HEAD"})
    (limit,) = ratelimit("writes", methods=["HEAD"])(lambda request: None).django_rl_limits
    assert limit.methods == frozenset({"HEAD"})


@pytest.mark.parametrize("cost", [0, -1])
def test_a_cost_below_one_is_refused(cost):
    with pytest.raises(ValueError) as info:
        ratelimit("writes", cost=cost)
    assert str(info.value) == (
        f"ratelimit(cost={cost}): cost must be at least 1 "
        "(a request that weighs nothing would never be limited)"
    )


@pytest.mark.parametrize("cost", [True, False, 1.0, 2.5, "2", None])
def test_a_cost_that_is_not_an_int_is_refused(cost):
    with pytest.raises(TypeError) as info:
        ratelimit("writes", cost=cost)
    assert str(info.value) == (
        f"ratelimit(cost={cost!r}): cost must be a whole number (an int) of at least 1, "
        f"not {type(cost).__name__}"
    )


def test_a_cost_above_a_policys_limit_is_a_check_error(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_costs"
    found = check_settings()
    assert found == [
        Error(
            f"view {view!r} weighs a request at cost {cost} under the rate-limit policy "
            f"{policy!r}, whose limit is {limit}: every such request is denied",
            hint=f"Lower the cost to at most {limit}, or raise the policy's limit.",
            id="django_rl.E014",
        )
        for view, cost, policy, limit in [
            ("tests.sites.urls_costs.heavy", 6, "per_minute", 5),
            ("tests.sites.urls_costs.HeavyClass", 4, "burst", 3),
            ("tests.sites.urls_costs.HeavyApi", 6, "per_minute", 5),
        ]
    ]


@pytest.mark.urls("tests.sites.urls_costs")
@pytest.mark.parametrize(
    ("url", "policy", "wait"),
    [
        ("/heavy/", "per_minute", 60),
        ("/heavy-class/", "burst", 3),
        ("/heavy-api/", "per_minute", 60),
    ],
)
def test_a_cost_above_the_limit_used_anyway_is_denied_not_an_error(
    redis_client, caplog, url, policy, wait
):
    from django_rl.policies.outcomes import _log_too_heavy

    _log_too_heavy.cache_clear()  # it logs once per process
    client = Client(raise_request_exception=True)
    with caplog.at_level(logging.ERROR, logger="django_rl"):
        responses = [client.get(url) for _ in range(3)]
    assert [r.status_code for r in responses] == [429] * 3
    assert [r["Retry-After"] for r in responses] == [str(wait)] * 3
    assert responses[0]["RateLimit"] == f'"{policy}";r=0;t={wait}'
    # Denied without asking Redis, and said once in the log.
    assert redis_client.keys("*") == []
    limit, cost = {"per_minute": (5, 6), "burst": (3, 4)}[policy]
    assert [r.getMessage() for r in caplog.records] == [
        f"Requests of cost {cost} are denied by rate-limit policy {policy!r}, whose limit is "
        f"{limit}: lower the cost or raise the limit (django_rl.E014)."
    ]


@pytest.mark.urls("tests.sites.urls_costs")
def test_head_counts_where_get_does(redis_client):
    # 'writes' is a fixed window of 2/m.
    start_of_fresh_window(redis_client, 60_000, min_left_ms=10_000)
    client = Client()
    urls_costs.RUNS["get_only"] = 0
    heads = [client.head("/get-only/").status_code for _ in range(3)]
    assert heads == [200, 200, 429]
    assert client.get("/get-only/").status_code == 429
    assert urls_costs.RUNS["get_only"] == 2
    # Other methods still pass untouched.
    assert client.post("/get-only/").status_code == 200


def test_numbers_of_thousands_of_digits_get_short_messages():
    # repr() of an int above 4,300 digits raises; the messages must not.
    with pytest.raises(ValueError, match=r"^ratelimit\(cost=<a negative whole number of about"):
        ratelimit("login", cost=-(10**5000))
    with pytest.raises(TypeError, match=r"<a whole number of about 5,001 digits> is not an HTTP"):
        ratelimit("login", methods=[10**5000])


@pytest.mark.parametrize(
    ("given", "meant"),
    [("method", "methods"), ("keys", "key"), ("blocked", "block"), ("Methods", "methods")],
)
def test_a_misspelt_argument_names_the_one_meant(given, meant):
    # django-ratelimit's method= is methods= here: the message says so.
    with pytest.raises(TypeError) as info:
        ratelimit("login", **{given: ["POST"]})
    assert str(info.value) == (
        f"ratelimit() got an unexpected keyword argument {given!r}; did you mean {meant}=?"
    )


def test_an_unknown_argument_lists_those_it_takes():
    with pytest.raises(TypeError) as info:
        ratelimit("login", burst=3)
    assert str(info.value) == (
        "ratelimit() got an unexpected keyword argument 'burst'; it takes "
        "rate=, key=, algorithm=, group=, methods=, cost=, block=, costs=, count_when=, "
        "charge="
    )
