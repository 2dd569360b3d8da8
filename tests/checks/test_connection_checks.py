"""Warnings about settings that would let a decision wait longer than one socket timeout."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.checks import Error, Warning
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from django_rl.checks.system import check_settings
from django_rl.docs_urls import doc_url

URL = "redis://127.0.0.1:6379/0"
SEE = f"See {doc_url('reliability', 'the-connection-timeouts-no-retries-a-pool-of-its-own')}."
TIMEOUTS = {"SOCKET_CONNECT_TIMEOUT": 0.1, "SOCKET_TIMEOUT": 0.1}


def found(settings, caches, connection="default"):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.CACHES = caches
    settings.DJANGO_RL = {"CONNECTION": connection, "POLICIES": {}}
    return check_settings()


def cache(location=URL, **options):
    return {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location, "OPTIONS": options}


NO_TIMEOUT = Warning(
    "CACHES['default'] sets no socket timeout: while Redis hangs (a paused or overloaded "
    "server, a network partition) every rate-limited request waits for it, without end",
    hint="Set 'OPTIONS': {'SOCKET_CONNECT_TIMEOUT': 0.1, 'SOCKET_TIMEOUT': 0.1} on the cache "
    f"DJANGO_RL['CONNECTION'] names. {SEE}",
    id="django_rl.W031",
)


def retries(times):
    return Warning(
        f"CACHES['default'] retries a failed Redis call {times}: while Redis is down one "
        "decision can take several socket timeouts plus back-off",
        hint="Give rate limiting its own CACHES alias without 'retry', 'retry_on_timeout' "
        f"or 'retry_on_error'. {SEE}",
        id="django_rl.W032",
    )


@pytest.mark.parametrize(
    ("options", "location", "expected"),
    [
        (TIMEOUTS, URL, []),
        ({"SOCKET_TIMEOUT": 0.1}, URL, []),  # redis-py connects with it too
        ({}, URL + "?socket_timeout=0.1", []),
        ({"CONNECTION_POOL_KWARGS": {"socket_timeout": 0.1}}, URL, []),
        ({}, URL, [NO_TIMEOUT]),
        ({"SOCKET_CONNECT_TIMEOUT": 0.1}, URL, [NO_TIMEOUT]),
        ({"SOCKET_TIMEOUT": 0}, URL, [NO_TIMEOUT]),  # django-redis ignores 0
        (
            {**TIMEOUTS, "CONNECTION_POOL_KWARGS": {"retry_on_timeout": True}},
            URL,
            [retries("once")],
        ),
        ({**TIMEOUTS}, URL + "?retry_on_timeout=true", [retries("once")]),
        (
            {**TIMEOUTS, "CONNECTION_POOL_KWARGS": {"retry": Retry(ExponentialBackoff(), 3)}},
            URL,
            [retries("3 times")],
        ),
        (
            {**TIMEOUTS, "CONNECTION_POOL_KWARGS": {"retry": Retry(ExponentialBackoff(), -1)}},
            URL,
            [retries("forever")],
        ),
        # A Retry that does not retry, even with errors named: no retries.
        (
            {
                **TIMEOUTS,
                "CONNECTION_POOL_KWARGS": {
                    "retry": Retry(ExponentialBackoff(), 0),
                    "retry_on_error": [TimeoutError],
                },
            },
            URL,
            [],
        ),
    ],
)
def test_timeouts_and_retries(settings, options, location, expected):
    assert found(settings, {"default": cache(location, **options)}) == expected


def test_an_alias_that_shares_its_pool_with_other_options(settings):
    caches = {
        "default": cache(SOCKET_TIMEOUT=5, CONNECTION_POOL_KWARGS={"retry_on_timeout": True}),
        "ratelimit": cache(**TIMEOUTS),
    }
    assert found(settings, caches, connection="ratelimit") == [
        Warning(
            "CACHES['ratelimit'] and CACHES['default'] have the same LOCATION but different "
            "OPTIONS: django-redis keeps one connection pool per URL, so whichever alias "
            "connects first sets the timeouts and retries of both",
            hint="Make CACHES['ratelimit']['LOCATION'] differ, e.g. end it with "
            f"'?client_name=django_rl' (which also names its connections). {SEE}",
            id="django_rl.W033",
        )
    ]


def test_the_recommended_dedicated_alias_is_clean(settings):
    caches = {
        "default": cache(SOCKET_TIMEOUT=5, CONNECTION_POOL_KWARGS={"retry_on_timeout": True}),
        "ratelimit": cache(URL + "?client_name=django_rl", **TIMEOUTS),
    }
    assert found(settings, caches, connection="ratelimit") == []


def test_another_backend_at_the_same_location_shares_no_pool(settings):
    django_own = {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": URL}
    assert found(settings, {"default": cache(**TIMEOUTS), "django": django_own}) == []


def test_the_same_location_and_options_share_a_pool_harmlessly(settings):
    caches = {"default": cache(**TIMEOUTS), "sessions": cache(**TIMEOUTS)}
    assert found(settings, caches) == []


def test_a_list_location_is_judged_by_its_first_url(settings):
    caches = {"default": cache([URL + "?socket_timeout=0.1", "redis://replica:6379/0"])}
    assert found(settings, caches) == []


def test_fail_open_of_a_policy_must_be_a_bool(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.DJANGO_RL = {
        "POLICIES": {"p": {"algorithm": "fixed_window", "rate": "5/m", "fail_open": "no"}}
    }
    assert check_settings() == [
        Error(
            "DJANGO_RL['POLICIES']['p']['fail_open'] is 'no'",
            hint="It must be True (allow when Redis cannot answer) or False (deny with 429); "
            "leave it out to follow DJANGO_RL['FAIL_OPEN'].",
            id="django_rl.E030",
        )
    ]


def test_the_dedicated_alias_of_docs_reliability_is_clean(settings):
    text = (Path(__file__).parent.parent.parent / "docs" / "reliability.md").read_text()
    block = text.split("<!-- tests/checks/test_connection_checks.py runs this block", 1)[1]
    code = block.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, object] = {}
    exec(code, namespace)
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    settings.CACHES = namespace["CACHES"]
    settings.DJANGO_RL = namespace["DJANGO_RL"]
    assert check_settings() == []
    # The same LOCATION as "default" would share its pool, and its options.
    settings.CACHES["ratelimit"]["LOCATION"] = settings.CACHES["default"]["LOCATION"]
    settings.CACHES = {**settings.CACHES}  # send setting_changed
    assert [w.id for w in check_settings()] == ["django_rl.W033"]
