"""Guards of http/_speedups.py: each fails loudly if Django changes what it relies on.

(That a direct write stores what ``response[name] = value`` would: test_headers.py.)
"""

from __future__ import annotations

from django.http import HttpResponse
from django.http.response import ResponseHeaders

from django_rl.core.decision import Decision
from django_rl.http import _speedups
from django_rl.http.headers import header_values, write_headers


def test_django_stores_headers_as_the_direct_write_expects():
    """ResponseHeaders keeps {lower name: (name, value)} in _store: a Django upgrade that
    changes it must make this fail (and the direct write then falls back by itself)."""
    assert _speedups.stores_as_expected() is True
    headers = ResponseHeaders({})
    headers["RateLimit"] = "x"
    assert headers._store == {"ratelimit": ("RateLimit", "x")}


def test_the_store_is_given_for_django_responses_only():
    response = HttpResponse()
    assert _speedups.header_store(response) is response.headers._store
    assert _speedups.header_store({}) is None

    class OwnHeaders(HttpResponse):
        def __setitem__(self, header: str, value: str) -> None:
            super().__setitem__(header, value.upper())

    assert _speedups.header_store(OwnHeaders()) is None  # its own __setitem__ is honoured
    assert _speedups.header_store(OwnHeaders()) is None  # (and remembered so)
    response.headers = {"replaced": "by the view"}  # not Django's ResponseHeaders any more
    assert _speedups.header_store(response) is None


def test_the_classes_asked_are_bounded(monkeypatch):
    monkeypatch.setattr(_speedups, "_PLAIN_CLASSES", {})
    for n in range(600):
        kind = type(f"Made{n}", (HttpResponse,), {})  # classes made on the fly
        assert _speedups.header_store(kind()) is not None
    assert len(_speedups._PLAIN_CLASSES) <= 256


def test_without_the_expected_layout_headers_go_through_setitem(monkeypatch):
    monkeypatch.setattr(_speedups, "_DIRECT", False)
    monkeypatch.setattr(_speedups, "_PLAIN_CLASSES", {})  # (asked again, of this layout)
    response = HttpResponse()
    assert _speedups.header_store(response) is None
    write_headers(response, [Decision(False, 5, 0, 3.0, 3.0, "login", False, 60)])
    assert response["RateLimit"] == '"login";r=0;t=3'


def test_the_memo_gives_the_same_values_for_the_same_decisions_only():
    calls = []

    def make(decisions, mode):
        calls.append(decisions)
        return header_values(decisions, mode)

    _speedups.forget_memo()
    one = [Decision(True, 5, 4, 0.0, 12.0, "login", False, 60)]
    first = _speedups.memoized_values(one, "ietf", make)
    assert _speedups.memoized_values(one, "ietf", make) is first
    other = [Decision(True, 5, 4, 0.0, 12.0, "login", False, 60)]  # equal, not the same
    _speedups.memoized_values(other, "ietf", make)
    assert len(calls) == 2
