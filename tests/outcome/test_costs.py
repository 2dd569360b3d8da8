"""``costs`` per method and a callable ``cost``; malformed arguments and specs refused.

The decorator's malformed ``costs``, ``count_when``, ``charge`` and ``cost``
raise when it is applied; a policy's are ``manage.py check`` errors with a
hint (``django_rl.E150`` to ``E153``) and ``ConfigurationError`` when used.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from django_rl import get_policy
from django_rl.checks.system import check_settings
from django_rl.decorators import ratelimit
from django_rl.exceptions import ConfigurationError
from tests.outcome.site import ALGORITHMS, CLIENT, IDENTITY, spec

METHODS = ("GET", "POST", "DELETE", "HEAD")


def used(name: str) -> int:
    decision = get_policy(name).peek(IDENTITY)
    return decision.limit - decision.remaining


def call(view: Any, method: str = "GET", **extra: Any) -> int:
    request = RequestFactory().generic(method, "/", REMOTE_ADDR=CLIENT, **extra)
    return int(view(request).status_code)


def ok(request: Any) -> HttpResponse:
    return HttpResponse("ok")


@pytest.mark.parametrize("algorithm", [*ALGORITHMS, "concurrency"])
def test_a_policys_costs_weigh_each_method(settings, algorithm):
    policy = (
        {"algorithm": "concurrency", "limit": 20, "timeout": 10, "key": "ip"}
        if algorithm == "concurrency"
        else spec(algorithm, "20/h")
    )
    policy["costs"] = {"get": 2, "POST": 5}
    settings.DJANGO_RL = {"POLICIES": {"api": policy}}
    view = ratelimit("api")(ok)
    expected = {"GET": 2, "HEAD": 2, "POST": 5, "DELETE": 1}
    for method in METHODS:
        assert call(view, method) == 200
        if algorithm != "concurrency":  # (its slots are back once the response is done)
            assert used("api") == sum(expected[m] for m in METHODS[: METHODS.index(method) + 1])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_decorators_costs_and_cost(settings, algorithm):
    settings.DJANGO_RL = {"POLICIES": {"api": spec(algorithm, "20/h", costs={"GET": 4})}}
    view = ratelimit("api", costs={"POST": 3}, cost=2)(ok)
    call(view, "POST")
    assert used("api") == 3
    call(view, "GET")  # the decorator's costs replace the policy's: GET costs `cost`
    assert used("api") == 5
    call(view, "DELETE")
    assert used("api") == 7


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_cost_callable_weighs_each_request(settings, algorithm):
    settings.DJANGO_RL = {"POLICIES": {"api": spec(algorithm, "10/h")}}
    view = ratelimit("api", cost=lambda request: int(request.GET.get("n", 1)))(ok)
    statuses = [call(view, QUERY_STRING=f"n={n}") for n in (3, 4, 2)]
    assert statuses == [200, 200, 200]
    assert used("api") == 9
    assert call(view, QUERY_STRING="n=2") == 429


def test_a_cost_callable_on_an_inline_policy_and_above_the_limit():
    view = ratelimit(rate="5/h", key="ip", cost=lambda request: 6)(ok)
    assert call(view) == 429  # denied, never a 500


def test_a_failing_cost_callable_costs_one_and_warns_once(settings, caplog):
    settings.DJANGO_RL = {"POLICIES": {"api": spec("sliding_log", "10/h")}}

    def broken(request: Any) -> int:
        raise KeyError("plan")

    def junk(request: Any) -> Any:
        return 2.5

    for function, cause in ((broken, "raised KeyError"), (junk, "returned 2.5")):
        view = ratelimit("api", cost=function)(ok)
        with caplog.at_level(logging.WARNING, logger="django_rl"):
            assert [call(view) for _ in range(3)] == [200] * 3
        lines = [r for r in caplog.records if cause in r.getMessage()]
        assert len(lines) == 1 and function.__qualname__ in lines[0].getMessage()
    assert used("api") == 6


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ({"costs": {"PSOT": 2}}, ValueError, "'PSOT' is not an HTTP method"),
        ({"costs": {"POST": 0}}, ValueError, "a cost is at least 1"),
        ({"costs": {"POST": 2.0}}, TypeError, "a cost is an int"),
        ({"costs": {"POST": True}}, TypeError, "a cost is an int"),
        ({"costs": {1: 2}}, TypeError, "not an HTTP method name"),
        ({"costs": ["POST"]}, TypeError, "ratelimit(costs=...)"),
        ({"count_when": "sometimes"}, ValueError, "not one of always, failure, success"),
        ({"count_when": "tests.outcome.nowhere.rule"}, ValueError, "could not be imported"),
        ({"count_when": 3}, TypeError, "ratelimit(count_when=...)"),
        ({"charge": 5}, TypeError, "ratelimit(charge=...)"),
        ({"charge": "tests.outcome.nowhere.tokens"}, ValueError, "could not be imported"),
        ({"cost": 0}, ValueError, "cost must be at least 1"),
        ({"cost": 1.5}, TypeError, "cost must be a whole number"),
        ({"rate": "3/h", "costs": {"POST": 4}}, ValueError, "above the limit 3"),
    ],
)
def test_malformed_arguments_are_refused_when_applied(arguments, error, words):
    names = () if "rate" in arguments else ("api",)
    with pytest.raises(error) as info:
        ratelimit(*names, **arguments)
    assert words in str(info.value)


def counts(request: Any, response: Any) -> bool:
    return True


@pytest.mark.parametrize(
    ("extra", "check_id", "words"),
    [
        ({"count_when": "maybe"}, "django_rl.E150", "['count_when'] is 'maybe'"),
        ({"count_when": "tests.outcome.nowhere.f"}, "django_rl.E150", "could not be imported"),
        ({"costs": {"FETCH": 2}}, "django_rl.E151", "'FETCH' is not an HTTP method"),
        ({"costs": {"POST": 0}}, "django_rl.E151", "a cost is at least 1"),
        ({"costs": {"POST": 50}}, "django_rl.E151", "above the limit 5"),
        ({"costs": "POST"}, "django_rl.E151", "['costs'] is 'POST'"),
        ({"charge": "tests.outcome.nowhere.f"}, "django_rl.E152", "could not be imported"),
        ({"charge": 3}, "django_rl.E152", "['charge'] is 3"),
    ],
)
def test_a_bad_policy_is_a_check_error_and_refused_when_used(settings, extra, check_id, words):
    settings.DJANGO_RL = {"POLICIES": {"p": spec("sliding_log", **extra)}}
    errors = [e for e in check_settings(None) if e.id == check_id]
    assert len(errors) == 1, check_settings(None)
    assert words in errors[0].msg
    assert errors[0].hint and "settings.md#charging-by-outcome" in errors[0].hint
    with pytest.raises(ConfigurationError):
        get_policy("p")


@pytest.mark.parametrize("extra", [{"count_when": "failure"}, {"charge": counts}])
def test_count_when_or_charge_on_concurrency_is_a_check_error(settings, extra):
    policy = {"algorithm": "concurrency", "limit": 2, "timeout": 5, **extra}
    settings.DJANGO_RL = {"POLICIES": {"slots": policy}}
    (error,) = [e for e in check_settings(None) if e.id == "django_rl.E153"]
    assert "do not apply to concurrency" in error.msg
    with pytest.raises(ConfigurationError):
        get_policy("slots")


def test_good_values_pass_the_checks(settings):
    settings.DJANGO_RL = {
        "POLICIES": {
            "p": spec(
                "gcra",
                count_when="tests.outcome.test_costs.counts",
                costs={"POST": 5, "get": 1},
                charge="tests.outcome.test_costs.counts",
            ),
            "q": {"algorithm": "concurrency", "limit": 2, "timeout": 5, "costs": {"POST": 2}},
            "r": spec("fixed_window", count_when="always"),
        }
    }
    assert [e for e in check_settings(None) if e.id.startswith("django_rl.E12")] == []
    for name in ("p", "q", "r"):
        get_policy(name)
