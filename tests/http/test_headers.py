"""Header values from Decisions: every mode, several policies, degraded decisions.

Every header is parsed back with http-sf (RFC 9651) and compared with the
Decisions it was made from.
"""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_rl import Decision, get_policy
from django_rl.algorithms import ALGORITHMS
from django_rl.algorithms.windows import quota_window
from django_rl.http.headers import closest_to_denial, header_values
from tests.support.sf_headers import parse_list, policies, ratelimit

POLICIES = {
    "login": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
    "hourly": {"algorithm": "fixed_window", "rate": "1000/h"},
    "burst": {"algorithm": "token_bucket", "capacity": 3, "rate": "1/s"},
    "daily": {"algorithm": "fixed_window", "rate": "5000/d"},
}


@pytest.fixture(autouse=True)
def _policies(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES}


def allowed(policy, limit, remaining, reset_after):
    return Decision(True, limit, remaining, 0.0, reset_after, policy)


def denied(policy, limit, retry_after, reset_after, remaining=0):
    return Decision(False, limit, remaining, retry_after, reset_after, policy)


def test_one_allowed_decision_in_ietf_form():
    headers = header_values([allowed("login", 5, 4, 60.0)], "ietf")
    assert set(headers) == {"RateLimit-Policy", "RateLimit"}
    assert headers["RateLimit-Policy"] == '"login";q=5;w=60'
    assert headers["RateLimit"] == '"login";r=4;t=60'
    assert policies(headers) == {"login": {"q": 5, "w": 60}}
    assert ratelimit(headers) == ("login", {"r": 4, "t": 60})


def test_a_denied_decision_reports_its_retry_after_as_t():
    decision = denied("login", 5, retry_after=41.2, reset_after=59.9)
    headers = header_values([decision], "ietf")
    assert ratelimit(headers) == ("login", {"r": 0, "t": 42})
    assert decision.retry_after_header == 42


def test_t_is_rounded_up_never_early():
    assert ratelimit(header_values([allowed("login", 5, 3, 0.001)], "ietf"))[1]["t"] == 1
    assert ratelimit(header_values([allowed("login", 5, 5, 0.0)], "ietf"))[1]["t"] == 0
    # A denied hit waits at least 1 s, like Retry-After.
    assert ratelimit(header_values([denied("login", 5, 0.001, 0.001)], "ietf"))[1]["t"] == 1


def test_several_policies_are_all_listed_and_the_closest_to_denial_decides():
    decisions = [
        allowed("hourly", 1000, 600, 1800.0),
        allowed("daily", 5000, 100, 36000.0),
        allowed("burst", 3, 2, 1.0),
    ]
    headers = header_values(decisions, "ietf")
    assert policies(headers) == {
        "hourly": {"q": 1000, "w": 3600},
        "daily": {"q": 5000, "w": 86400},
        "burst": {"q": 3, "w": 3},
    }
    # Listed in the order the view names them.
    assert [name for name, _ in parse_list(headers["RateLimit-Policy"])] == [
        "hourly",
        "daily",
        "burst",
    ]
    assert ratelimit(headers) == ("burst", {"r": 2, "t": 1})


def test_a_denying_policy_beats_any_allowing_one_and_the_longest_wait_wins():
    decisions = [
        allowed("burst", 3, 0, 3.0),
        denied("hourly", 1000, retry_after=120.5, reset_after=120.5),
        denied("login", 5, retry_after=12.0, reset_after=60.0),
    ]
    assert closest_to_denial(decisions) is decisions[1]
    assert ratelimit(header_values(decisions, "ietf")) == ("hourly", {"r": 0, "t": 121})


def test_ties_on_remaining_go_to_the_longer_wait():
    decisions = [allowed("hourly", 1000, 3, 100.0), allowed("daily", 5000, 3, 5000.0)]
    assert closest_to_denial(decisions) is decisions[1]


def test_legacy_headers_github_style():
    before = time.time()
    headers = header_values([allowed("hourly", 1000, 999, 1234.5)], "legacy")
    after = time.time()
    assert set(headers) == {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
    assert headers["X-RateLimit-Limit"] == "1000"
    assert headers["X-RateLimit-Remaining"] == "999"
    reset = int(headers["X-RateLimit-Reset"])
    assert math.ceil(before + 1234.5) <= reset <= math.ceil(after + 1234.5)


def test_legacy_reset_of_a_denied_decision_is_when_it_would_be_allowed():
    before = time.time()
    headers = header_values([denied("login", 5, retry_after=30.0, reset_after=59.0)], "legacy")
    after = time.time()
    assert headers["X-RateLimit-Remaining"] == "0"
    assert math.ceil(before + 30.0) <= int(headers["X-RateLimit-Reset"]) <= math.ceil(after + 30.0)


def test_both_is_the_union_and_none_is_nothing(settings):
    decisions = [allowed("login", 5, 4, 60.0)]
    both = header_values(decisions, "both")
    assert set(both) == {
        "RateLimit-Policy",
        "RateLimit",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    }
    from django_rl.http.headers import write_headers

    settings.DJANGO_RL = {"POLICIES": POLICIES, "HEADERS": None}
    target: dict[str, str] = {}
    write_headers(target, decisions)
    assert target == {}


def test_a_fail_open_decision_has_no_count_to_report():
    degraded = Decision(True, 5, 5, 0.0, 0.0, "login", degraded=True)
    headers = header_values([degraded], "both")
    assert headers == {"RateLimit-Policy": '"login";q=5;w=60'}


def test_a_fail_closed_decision_reports_its_retry_after():
    degraded = Decision(False, 5, 0, 1.0, 0.0, "login", degraded=True)
    counted = allowed("hourly", 1000, 10, 100.0)
    headers = header_values([counted, degraded], "ietf")
    assert ratelimit(headers) == ("login", {"r": 0, "t": 1})


def test_a_decision_of_an_unknown_policy_is_listed_without_w():
    headers = header_values([allowed("elsewhere", 7, 6, 10.0)], "ietf")
    assert policies(headers) == {"elsewhere": {"q": 7}}


@pytest.mark.parametrize(
    ("spec", "w"),
    [
        ({"algorithm": "fixed_window", "rate": "5/m"}, 60),
        ({"algorithm": "sliding_log", "rate": "100/10m"}, 600),
        ({"algorithm": "fixed_window", "rate": "1/d"}, 86400),
        ({"algorithm": "token_bucket", "capacity": 3, "rate": "1/s"}, 3),
        # 10 tokens at 1000/h refill in 36 s.
        ({"algorithm": "token_bucket", "capacity": 10, "rate": "1000/h"}, 36),
        # 3 tokens at 2/s: 1.5 s, rounded up so q/w is not above the refill rate.
        ({"algorithm": "token_bucket", "capacity": 3, "rate": "2/s"}, 2),
        ({"algorithm": "token_bucket", "capacity": 1, "rate": "100/s"}, 1),
    ],
)
def test_quota_window(spec, w):
    algorithm = ALGORITHMS[spec["algorithm"]].from_spec(spec)
    assert quota_window(algorithm) == w


def test_headers_of_real_decisions_parse_and_match(settings):
    decisions = [get_policy("burst").hit("ip:1"), get_policy("login").hit("ip:1")]
    headers = header_values(decisions, "both")
    assert policies(headers) == {"burst": {"q": 3, "w": 3}, "login": {"q": 5, "w": 60}}
    name, params = ratelimit(headers)
    assert name == "burst"
    assert params == {"r": decisions[0].remaining, "t": math.ceil(decisions[0].reset_after)}
    assert params["r"] == 2
    assert headers["X-RateLimit-Remaining"] == "2"


def test_the_benchs_requests_built_once_are_as_new_on_every_call():
    """``bench.peers.as_new`` clears what a front door leaves (the bench measures real calls)."""
    from django.http import HttpResponse
    from django.test import RequestFactory

    from bench.peers import LEFT_ON_REQUEST, LEFT_ON_RESPONSE, as_new
    from django_rl.core.recording import recorded
    from django_rl.decorators import ratelimit as ratelimit_decorator

    ok = HttpResponse("ok")
    view = ratelimit_decorator("login")(lambda request: ok)
    request = RequestFactory().get("/", REMOTE_ADDR="192.0.2.40")
    for left in (4, 3, 2):
        as_new(request, ok)
        del ok["RateLimit"]
        assert all(name not in request.__dict__ for name in LEFT_ON_REQUEST)
        assert view(request) is ok
        assert [d.remaining for d in recorded(request)] == [left]  # this call's only
        assert ok["RateLimit"].startswith(f'"login";r={left};t=')  # written by this call
        assert LEFT_ON_RESPONSE in ok.__dict__


@pytest.mark.parametrize("mode", ["ietf", "legacy", "both"])
def test_headers_set_on_a_response_are_what_django_would_store(settings, mode):
    """``write_headers`` stores a checked header directly, as ``response[name] = value`` does."""
    from django.http import HttpResponse

    from django_rl.http import _speedups, headers

    settings.DJANGO_RL = {"POLICIES": POLICIES, "HEADERS": mode}
    assert _speedups._DIRECT  # this Django's ResponseHeaders store as write_headers expects
    decisions = [get_policy("burst").hit("ip:9"), get_policy("login").hit("ip:9")]
    for decided in ([decisions[0]], decisions):
        written, expected = HttpResponse("ok"), HttpResponse("ok")
        headers.write_headers(written, decided)
        for name, value in header_values(decided, mode).items():
            expected[name] = value
        if mode != "ietf":  # X-RateLimit-Reset is read from the clock each time
            for response in (written, expected):
                del response["X-RateLimit-Reset"]
        assert written.headers._store == expected.headers._store
        assert written.serialize_headers() == expected.serialize_headers()


def test_a_header_django_must_encode_or_refuse_goes_through_django(settings):
    """A hand-made Decision's name that is not ASCII is Django's to encode; a line break refused."""
    from django.http import BadHeaderError, HttpResponse

    from django_rl.http.headers import write_headers

    for name in ("café", "日本"):  # Latin-1 kept as it is; beyond it, MIME-encoded
        response, expected = HttpResponse("ok"), HttpResponse("ok")
        write_headers(response, [allowed(name, 5, 4, 60)])
        for header, value in header_values([allowed(name, 5, 4, 60)], "ietf").items():
            expected[header] = value
        assert response.headers._store == expected.headers._store
    assert response["RateLimit"].startswith("=?utf-8?")
    with pytest.raises(BadHeaderError):
        write_headers(HttpResponse("ok"), [allowed("evil\r\nSet-Cookie: x=1", 5, 4, 60)])


@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.integers(0, 5),
            st.sampled_from([0.0, 0.5, 1.0, 30.0]),
            st.sampled_from([0.0, 0.5, 1.0, 30.0]),
            st.booleans(),
            st.booleans(),
        ),
        min_size=2,
        max_size=6,
    )
)
def test_ratelimit_reports_closest_to_denial_of_those_with_a_count(made):
    """``header_values`` picks, inline, what :func:`closest_to_denial` picks of the reported."""
    decisions = [
        Decision(ok, 5, left, 0.0 if ok else wait, reset, f"p{i}", degraded=deg, fallback=fb)
        for i, (ok, left, wait, reset, deg, fb) in enumerate(made)
    ]
    reported = [d for d in decisions if d.fallback or not (d.allowed and d.degraded)]
    values = header_values(decisions, "ietf")
    if not reported:
        assert "RateLimit" not in values
        return
    closest = closest_to_denial(reported)
    assert values["RateLimit"].startswith(f'"{closest.policy}";r={closest.remaining};t=')


def test_a_response_class_that_sets_headers_its_own_way_is_given_them_through_it():
    from django.http import HttpResponse

    from django_rl.http.headers import write_headers

    class Logged(HttpResponse):
        def __setitem__(self, header, value):
            self.seen = [*getattr(self, "seen", []), header]
            super().__setitem__(header, value)

    response = Logged("ok")
    write_headers(response, [allowed("login", 5, 4, 60)])
    assert response.seen == ["RateLimit-Policy", "RateLimit"]
    assert response["RateLimit"] == '"login";r=4;t=60'
