"""Per-plan rates: a policy's rate chosen per request by a function of the request.

Each rate keeps its own state (a user who changes plans is not misread by
the old counter); ``None`` means no limit and no Redis call; both front
doors pass the request; ``hit``/``peek`` take ``request=``; ``reset`` clears
every rate, found in the rate catalogue even by a process that never
decided; the admin shows which rate applied to each row. Also
``register_policy`` and the checks of rate functions. Rates are per hour;
tests start a minute or more before the hour ends on the Redis clock.
"""

from __future__ import annotations

import base64
import logging

import pytest
from django.test import Client, RequestFactory

from django_rl import get_policy, register_policy
from django_rl.checks.system import check_settings
from django_rl.exceptions import ConfigurationError
from django_rl.policies.plans import CATALOGUE_TTL_MS
from django_rl.policies.registry import policy_names, unregister_policy
from tests.conftest import start_of_fresh_window
from tests.support import plans
from tests.support.sf_headers import policies, ratelimit

pytestmark = [pytest.mark.urls("tests.sites.urls_inline"), pytest.mark.django_db]

PLAN_POLICY = {
    "algorithm": "fixed_window",
    "rate": "tests.support.plans.rate_for_user",
    "key": "user",
}
POLICIES = {"plans": PLAN_POLICY}
VIEW = "@tests.sites.views_inline.plan_view"
DATA = "/admin/django_rl/livecounter/data/"


@pytest.fixture(autouse=True)
def _policies(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    plans.PLAN_OF.clear()
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    yield
    plans.PLAN_OF.clear()


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-pw")


def signed_in(user):
    client = Client()
    client.force_login(user)
    return client


def limited(client, n, url="/plan/"):
    return [client.get(url).json()["limited"] for _ in range(n)]


def commands_run(redis_client):
    """Return the commands the server has run, INFO (this question) left out."""
    stats = redis_client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")


def test_each_plan_keeps_its_own_counter(alice, django_user_model, redis_client):
    client = signed_in(alice)
    response = client.get("/plan/")
    assert policies(response) == {VIEW: {"q": 2, "w": 3600}}
    assert limited(client, 2) == [False, True]
    plans.PLAN_OF["alice"] = "pro"  # upgraded: a fresh counter at the pro rate
    response = client.get("/plan/")
    assert policies(response) == {VIEW: {"q": 4, "w": 3600}}
    assert ratelimit(response)[1]["r"] == 3
    assert limited(client, 4) == [False, False, False, True]
    plans.PLAN_OF["alice"] = "free"  # back: the free counter is still spent
    assert limited(client, 1) == [True]
    bob = django_user_model.objects.create_user("bob", password="bob-pw")
    assert limited(signed_in(bob), 3) == [False, False, True]
    found = sorted(k.decode() for k in redis_client.keys(f"rl:{VIEW}:{{user:{alice.pk}}}:*"))
    assert len(found) == 2
    # The free counter: 2 allowed, then the process's first denial (it reads
    # the reset token instead of being remembered, reset_epoch.py) and the
    # next, both counted in the fixed window; the deny cache answered no more.
    assert sorted(int(redis_client.get(k)) for k in found) == [4, 5]


def test_a_rate_of_none_limits_nothing_and_calls_no_redis(django_user_model, redis_client):
    carol = django_user_model.objects.create_user("carol", password="carol-pw")
    plans.PLAN_OF["carol"] = "unlimited"
    client = signed_in(carol)
    anonymous = Client()
    before = commands_run(redis_client)
    responses = [client.get("/plan/") for _ in range(5)] + [anonymous.get("/plan/")]
    assert commands_run(redis_client) == before
    assert [r.json() for r in responses] == [{"limited": False, "decisions": []}] * 6
    assert all("RateLimit-Policy" not in r for r in responses)
    request = RequestFactory().get("/")
    request.user = carol
    decision = get_policy("plans").hit("user:7", request=request)
    assert (decision.allowed, decision.limit, decision.remaining) == (True, 0, 0)
    assert commands_run(redis_client) == before


def basic(name):
    token = base64.b64encode(f"{name}:{name}-pw".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


def test_policy_throttle_passes_the_request_to_the_rate_function(alice):
    client = Client()
    responses = [client.get("/api/plan/", **basic("alice")) for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[0].json() == {
        "user": "alice",
        "limited": False,
        "decisions": [["plans", True]],
    }
    assert policies(responses[0]) == {"plans": {"q": 2, "w": 3600}}
    plans.PLAN_OF["alice"] = "pro"
    responses = [client.get("/api/plan/", **basic("alice")) for _ in range(5)]
    assert [r.status_code for r in responses] == [200] * 4 + [429]
    assert policies(responses[0]) == {"plans": {"q": 4, "w": 3600}}
    anonymous = [client.get("/api/plan/").json() for _ in range(3)]
    assert anonymous == [{"user": None, "limited": False, "decisions": []}] * 3


def request_of(user):
    request = RequestFactory().get("/")
    request.user = user
    return request


def test_programmatic_hit_and_peek_need_the_request(alice):
    policy = get_policy("plans")
    message = (
        "Policy.{}() of 'plans' needs request=: its rate comes from "
        "tests.support.plans.rate_for_user, a function of the request"
    )
    with pytest.raises(TypeError) as info:
        policy.hit("user:1")
    assert str(info.value) == message.format("hit")
    with pytest.raises(TypeError) as info:
        policy.peek("user:1")
    assert str(info.value) == message.format("peek")
    with pytest.raises(
        TypeError, match=r"takes its rate from tests\.support\.plans\.rate_for_user"
    ):
        policy.limit  # noqa: B018
    request = request_of(alice)
    decisions = [policy.hit("user:1", request=request) for _ in range(3)]
    assert [(d.allowed, d.limit, d.remaining, d.window) for d in decisions] == [
        (True, 2, 1, 3600),
        (True, 2, 0, 3600),
        (False, 2, 0, 3600),
    ]
    plans.PLAN_OF["alice"] = "pro"
    assert policy.peek("user:1", request=request).remaining == 4
    assert policy.hit("user:1", request=request).remaining == 3


def test_reset_clears_every_rate_even_where_no_rate_was_seen(settings, alice, redis_client):
    request = request_of(alice)
    policy = get_policy("plans")
    for plan, times in (("free", 2), ("pro", 3)):
        plans.PLAN_OF["alice"] = plan
        for _ in range(times):
            policy.hit("user:1", request=request)
    catalogue = {k.decode(): v.decode() for k, v in redis_client.hgetall("rl:~rates:plans").items()}
    assert sorted(catalogue.values()) == ["2/h", "4/h"]
    assert CATALOGUE_TTL_MS - 60_000 < redis_client.pttl("rl:~rates:plans") <= CATALOGUE_TTL_MS
    # A policy built afresh (as in another process) knows no rate until it
    # reads the catalogue.
    settings.DJANGO_RL = {"POLICIES": dict(POLICIES)}
    fresh = get_policy("plans")
    assert fresh is not policy and fresh.variants() == []
    assert fresh.reset("user:1") == 2
    assert redis_client.keys("rl:plans:*") == []
    assert fresh.peek("user:1", request=request).remaining == 4
    plans.PLAN_OF["alice"] = "free"
    assert fresh.peek("user:1", request=request).remaining == 2


def test_a_cost_above_the_limit_of_a_rate_is_a_429_not_a_500(redis_client, caplog):
    from django_rl.policies.outcomes import _log_too_heavy

    _log_too_heavy.cache_clear()  # it logs once per process
    with caplog.at_level(logging.ERROR, logger="django_rl"):
        responses = [Client().get("/too-heavy/") for _ in range(2)]
    assert [r.status_code for r in responses] == [429, 429]
    assert responses[0]["Retry-After"] == "3600"
    assert redis_client.keys("*") == []
    assert [r.getMessage() for r in caplog.records] == [
        "Requests of cost 5 are denied by rate-limit policy "
        "'@tests.sites.views_inline.too_heavy_for_its_plan', whose limit is 2: lower the cost or "
        "raise the limit (django_rl.E014)."
    ]


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("5/mango", "rate '5/mango' has an unknown period unit 'mango'"),
        ("int", "it must return a rate string such as '100/h', or None"),
        ("tests.support.plans.tiny_rate", "it must return a rate string such as '100/h', or None"),
    ],
)
def test_a_rate_function_that_returns_no_rate_is_a_configuration_error(header, why):
    returned = {"int": "5"}.get(header, repr(header))
    with pytest.raises(ConfigurationError) as info:
        Client().get("/rate-from-header/", HTTP_X_RATE=header)
    message = str(info.value)
    assert message.startswith(
        "rate function tests.support.plans.from_header of policy "
        "'@tests.sites.views_inline.rate_from_header' "
        f"returned {returned}: {why}"
    )
    assert info.value.check_id == "django_rl.E007"


def test_the_admin_shows_the_rate_of_each_row(settings, admin_client, alice, redis_client):
    client = signed_in(alice)
    client.get("/plan/")
    plans.PLAN_OF["alice"] = "pro"
    client.get("/plan/")
    Client().get("/shared-a/")
    # As another process would: no rate known in this one.
    settings.DJANGO_RL = {"POLICIES": dict(POLICIES)}
    data = admin_client.get(DATA).json()
    assert data["skipped"] == 0  # the catalogue is the app's own key
    rows = sorted(
        (r["policy"], r["identity"], r["rate"], r["limit"], r["used"], r["status"])
        for r in data["rows"]
    )
    assert rows == [
        ("@shared", "ip:127.0.0.1", "3/h", 3, 1, "live"),
        (VIEW, f"user:{alice.pk}", "2/h", 2, 1, "live"),
        (VIEW, f"user:{alice.pk}", "4/h", 4, 1, "live"),
    ]
    exact = admin_client.get(DATA, {"q": f"user:{alice.pk}", "match": "exact", "policy": VIEW})
    assert sorted(r["rate"] for r in exact.json()["rows"]) == ["2/h", "4/h"]
    assert '<span class="rl-rate">4/h</span>' in data["tbody"]
    response = admin_client.post(
        "/admin/django_rl/livecounter/reset/",
        {"rows": [f"{VIEW}:user:{alice.pk}"], "confirmed": "yes"},
        follow=True,
    )
    assert "Reset 1 counter: 2 keys deleted." in response.content.decode()
    assert redis_client.keys(f"rl:{VIEW}:*") == []


def test_register_policy_defines_a_policy_in_code(settings):
    spec = {"algorithm": "sliding_log", "rate": "2/h", "key": "ip"}
    register_policy("emails", spec)
    try:
        register_policy("emails", dict(spec))  # the same again: nothing happens
        policy = get_policy("emails")
        assert [policy.hit("ip:203.0.113.9").allowed for _ in range(3)] == [True, True, False]
        assert "emails" in policy_names()
        with pytest.raises(ValueError, match="registered already"):
            register_policy("emails", {**spec, "rate": "3/h"})
        # A policy of the same name in settings wins.
        settings.DJANGO_RL = {"POLICIES": {**POLICIES, "emails": {**spec, "rate": "5/h"}}}
        assert get_policy("emails").limit == 5
    finally:
        unregister_policy("emails")


@pytest.mark.parametrize(
    ("name", "spec", "error", "message"),
    [
        (5, {}, TypeError, "register_policy() takes a policy name, not 5"),
        ("x", "5/m", TypeError, "register_policy('x', ...): the spec must be a dict"),
        (
            "x",
            {"algorithm": "fixed_window", "rate": "5/mango"},
            ConfigurationError,
            "register_policy('x'): rate '5/mango' has an unknown period unit",
        ),
        ("x y", {"algorithm": "fixed_window", "rate": "5/m"}, ConfigurationError, "register_"),
    ],
)
def test_register_policy_judges_the_spec(name, spec, error, message):
    with pytest.raises(error) as info:
        register_policy(name, spec)
    assert str(info.value).startswith(message)


def test_dotted_paths_of_a_registered_policy_are_checked_not_imported_at_once(settings):
    register_policy("later", {"algorithm": "fixed_window", "rate": "5/m", "key": "a.b.c"})
    try:
        settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
        found = [(m.id, m.msg) for m in check_settings()]
        assert found == [
            (
                "django_rl.E011",
                "register_policy('later'): key 'a.b.c' could not be imported: No module named 'a'",
            )
        ]
        with pytest.raises(ConfigurationError, match="register_policy"):
            get_policy("later")
    finally:
        unregister_policy("later")


def test_checks_of_rate_functions(settings):
    settings.ROOT_URLCONF = "tests.sites.urls_inline_bad"
    settings.DJANGO_RL = {
        "POLICIES": {
            **POLICIES,
            "gone": {**PLAN_POLICY, "rate": "tests.support.plans.gone"},
            "object": {**PLAN_POLICY, "rate": "tests.support.plans.PLAN_OF"},
        }
    }
    found = sorted((m.id, m.msg) for m in check_settings())
    # No E014 for a cost above a plan's limit: limits are known per request.
    assert found == [
        (
            "django_rl.E007",
            "@ratelimit(rate='tests.support.plans.PLANS') of view "
            "'tests.sites.urls_inline_bad.not_callable': "
            "rate function 'tests.support.plans.PLANS' is not callable",
        ),
        (
            "django_rl.E007",
            "@ratelimit(rate='tests.support.plans.missing_rate') of view "
            "'tests.sites.urls_inline_bad.missing_rate': rate function "
            "'tests.support.plans.missing_rate' "
            'could not be imported: Module "tests.support.plans" does not define a "missing_rate" '
            "attribute/class",
        ),
        (
            "django_rl.E007",
            "DJANGO_RL['POLICIES']['gone']: rate function 'tests.support.plans.gone' could not be "
            'imported: Module "tests.support.plans" does not define a "gone" attribute/class',
        ),
        (
            "django_rl.E007",
            "DJANGO_RL['POLICIES']['object']: rate function 'tests.support.plans.PLAN_OF' is not "
            "callable",
        ),
        (
            "django_rl.E011",
            "@ratelimit(rate='3/h') of view 'tests.sites.urls_inline_bad.missing_key': key "
            "'tests.support.plans.missing_key' could not be imported: Module "
            '"tests.support.plans" does not '
            'define a "missing_key" attribute/class',
        ),
    ]


def test_a_rate_function_may_return_the_new_rate_forms(redis_client):
    """'0/m' denies (Retry-After the period) without Redis; DRF's words limit; None skips."""
    before = commands_run(redis_client)
    denied = [Client().get("/rate-from-header/", HTTP_X_RATE="0/m") for _ in range(3)]
    assert [(r.status_code, r["Retry-After"]) for r in denied] == [(429, "60")] * 3
    assert [ratelimit(r) for r in denied] == [
        ("@tests.sites.views_inline.rate_from_header", {"r": 0, "t": 60})
    ] * 3
    free = [Client().get("/rate-from-header/").status_code for _ in range(3)]  # None
    assert free == [200] * 3
    assert commands_run(redis_client) - before == 0
    words = [Client().get("/rate-from-header/", HTTP_X_RATE="2/hour") for _ in range(3)]
    assert [r.status_code for r in words] == [200, 200, 429]
    with pytest.raises(ConfigurationError, match=r"unknown period unit 'M' \(units are lower"):
        Client().get("/rate-from-header/", HTTP_X_RATE="2/M")
