"""``django_rl.contrib.spectacular.postprocess_schema``: 429s of limited operations only."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from drf_spectacular.settings import spectacular_settings
from openapi_spec_validator import validate

HOOK = "django_rl.contrib.spectacular.postprocess_schema"
POLICIES = {
    "burst": {"algorithm": "token_bucket", "capacity": 10, "rate": "10/m", "key": "ip"},
    "daily": {"algorithm": "fixed_window", "rate": "1000/d", "key": "ip"},
}
EXPECTED = {
    "ietf": {"Retry-After", "RateLimit-Policy", "RateLimit"},
    "legacy": {"Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"},
    "both": {
        "Retry-After", "RateLimit-Policy", "RateLimit",
        "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
    },
    None: {"Retry-After"},
}  # fmt: skip
#: (path, method) -> the policies its 429 names; every other operation has none.
LIMITED = {
    ("/throttled/", "get"): ["`burst`", "`daily`"],
    ("/throttled/", "post"): ["`burst`", "`daily`"],
    ("/own-throttles/", "get"): ["`daily`: fixed_window 1000/d"],
    ("/own-throttles/", "post"): ["`daily`: fixed_window 1000/d"],
    ("/dropin/", "get"): ["`drf.anon`: 100/h"],
    ("/dropin/", "post"): ["`drf.anon`: 100/h"],
    ("/scoped/", "get"): ["`drf.uploads`: 5/m"],
    ("/scoped/", "post"): ["`drf.uploads`: 5/m"],
    ("/posts-only/", "post"): ["`burst`: token_bucket"],
    ("/inline/", "get"): ["7/m"],
    ("/inline/", "post"): ["7/m"],
    ("/handler/", "post"): ["`daily`: fixed_window 1000/d"],
    ("/as-view/{id}/", "get"): ["`daily`"],
    ("/as-view/{id}/", "post"): ["`daily`"],
    ("/above/", "get"): ["`burst`"],
    ("/below/", "post"): ["`daily`"],
    ("/things/", "get"): ["`burst`"],
    ("/things/{id}/", "get"): ["`burst`"],
}


@pytest.fixture
def site(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_spectacular"
    settings.REST_FRAMEWORK = {
        "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
        "DEFAULT_THROTTLE_CLASSES": [],
        "DEFAULT_THROTTLE_RATES": {"anon": "100/h", "uploads": "5/m"},
    }
    settings.SPECTACULAR_SETTINGS = {
        "TITLE": "test",
        "VERSION": "1.0.0",
        "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", HOOK],
    }
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False}
    before = spectacular_settings.user_settings
    use_spectacular(settings.SPECTACULAR_SETTINGS)
    yield settings
    use_spectacular(before)


def use_spectacular(value: dict) -> None:
    """drf-spectacular reads SPECTACULAR_SETTINGS once, at import: give it ``value``."""
    spectacular_settings.reload()
    spectacular_settings._user_settings = value


def schema() -> dict:
    response = Client().get("/schema/", {"format": "json"})
    assert response.status_code == 200
    data = json.loads(response.content)
    validate(data)
    return data


@pytest.mark.parametrize("mode", list(EXPECTED))
def test_limited_operations_document_429_with_the_headers_sent(site, mode):
    site.DJANGO_RL = {**site.DJANGO_RL, "HEADERS": mode}
    paths = schema()["paths"]
    seen = set()
    for path, item in paths.items():
        for method, operation in item.items():
            responses = operation["responses"]
            if (path, method) not in LIMITED:
                assert "429" not in responses, (path, method)
                continue
            seen.add((path, method))
            assert "429" in responses, (path, method)
            too_many = responses["429"]
            assert set(too_many["headers"]) == EXPECTED[mode], (path, method)
            for header in too_many["headers"].values():
                assert header["schema"]["type"] in ("integer", "string")
            for expected in LIMITED[path, method]:
                assert expected in too_many["description"], (path, method, too_many)
    assert seen == set(LIMITED)


def test_other_operations_untouched(site, settings):
    limited = schema()
    use_spectacular(
        {
            **settings.SPECTACULAR_SETTINGS,
            "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums"],
        }
    )
    plain = schema()
    for path, item in plain["paths"].items():
        for method, operation in item.items():
            other = limited["paths"][path][method]
            if (path, method) in LIMITED:
                other = {**other, "responses": {
                    k: v for k, v in other["responses"].items() if k != "429"
                }}  # fmt: skip
            assert other == operation, (path, method)


def test_a_429_documented_already_is_kept_and_completed():
    from django_rl.contrib.spectacular import _document, rate_limit_headers

    mine = {"schema": {"type": "integer"}, "description": "mine"}
    operation = {
        "responses": {"429": {"description": "Slow down.", "headers": {"Retry-After": mine}}}
    }
    _document(operation, ["`burst`: token_bucket 10/m"], rate_limit_headers("ietf"))
    too_many = operation["responses"]["429"]
    assert too_many["headers"]["Retry-After"]["description"] == "mine"
    assert set(too_many["headers"]) == EXPECTED["ietf"]
    assert too_many["description"].startswith("Slow down. Limited by `burst`")
