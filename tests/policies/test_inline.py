"""Inline policies (``@ratelimit(rate=...)``) and ``block=False``, through Django's test clients.

Every kind of view (function, async, class-based, async class-based,
``method_decorator``, DRF) limited by a policy of its own; groups that share
state and those that do not (another rate, another key, a named policy of
the same name); ``block=False`` runs the view with ``request.limited`` and
the request's Decisions, and still sends the headers; arguments judged when
the decorator is applied. Rates are per hour, and each test starts at least
a minute before the hour ends on the Redis clock, so no window edge moves a
count.
"""

from __future__ import annotations

import base64
import io

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.http import HttpResponse
from django.test import AsyncClient, Client, RequestFactory

from django_rl import get_policy
from django_rl.decorators import ratelimit
from django_rl.exceptions import ConfigurationError
from django_rl.policies.inline import policy_name
from tests.conftest import start_of_fresh_window
from tests.support.sf_headers import policies
from tests.support.sf_headers import ratelimit as ratelimit_header

pytestmark = [pytest.mark.urls("tests.sites.urls_inline"), pytest.mark.django_db]

#: A named policy with the same name and spec as an inline group, "per_minute".
POLICIES = {
    "per_minute": {"algorithm": "fixed_window", "rate": "5/h", "key": "ip"},
    "plans": {
        "algorithm": "fixed_window",
        "rate": "tests.support.plans.rate_for_user",
        "key": "user",
    },
}
KINDS = [
    ("/inline/", "@tests.sites.views_inline.inline_view"),
    ("/inline-async/", "@tests.sites.views_inline.inline_async"),
    ("/inline-class/", "@tests.sites.views_inline.InlineClass"),
    ("/inline-async-class/", "@tests.sites.views_inline.InlineAsyncClass"),
    ("/inline-method-decorated/", "@tests.sites.views_inline.InlineMethodDecorated"),
]


@pytest.fixture(autouse=True)
def _policies(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


def get(url, n, **extra):
    client = Client()
    return [client.get(url, **extra) for _ in range(n)]


def codes(responses):
    return [r.status_code for r in responses]


def keys(redis_client, pattern="*"):
    """Return the counters' keys, sorted (not the app's own ``rl:~...``, the reset token)."""
    return sorted(k.decode() for k in redis_client.keys(pattern) if not k.startswith(b"rl:~"))


@pytest.mark.parametrize(("url", "name"), KINDS)
def test_an_inline_policy_limits_every_kind_of_view(redis_client, url, name):
    responses = get(url, 5)
    assert codes(responses) == [200, 200, 200, 429, 429]
    assert policies(responses[0]) == {name: {"q": 3, "w": 3600}}
    assert [ratelimit_header(r)[1]["r"] for r in responses] == [2, 1, 0, 0, 0]
    assert responses[3]["Retry-After"] == str(ratelimit_header(responses[3])[1]["t"])
    # One fixed window (the default algorithm) under the inline name; denied
    # hits count in it too. The process's first denial reads the reset
    # token instead of being remembered (reset_epoch.py), so the second
    # denied hit asks Redis as well; the deny cache answers the ones after.
    (key,) = keys(redis_client)
    assert key.startswith(f"rl:{name}:{{ip:127.0.0.1}}:")
    assert redis_client.get(key) == b"5"
    assert 0 < redis_client.pttl(key) <= 3_600_000


@pytest.mark.parametrize(("url", "name"), [KINDS[1], KINDS[3]])
def test_async_views_under_the_async_client(url, name):
    async def send():
        client = AsyncClient()
        return [await client.get(url) for _ in range(4)]

    responses = async_to_sync(send)()
    assert codes(responses) == [200, 200, 200, 429]
    assert ratelimit_header(responses[3])[0] == name


def test_uses_of_one_group_share_its_state_when_rate_and_key_are_equal(redis_client):
    assert codes(get("/shared-a/", 2) + get("/shared-b/", 1)) == [200, 200, 200]
    assert codes(get("/shared-a/", 1) + get("/shared-b/", 1)) == [429, 429]
    response = get("/shared-b/", 1)[0]
    assert policies(response) == {"@shared": {"q": 3, "w": 3600}}
    # Another rate, or another key (here the same identity: the client is
    # anonymous), is another state of the group.
    assert codes(get("/shared-other-rate/", 6)) == [200] * 5 + [429]
    assert codes(get("/shared-other-key/", 4)) == [200] * 3 + [429]
    found = keys(redis_client)
    assert len(found) == 3
    assert all(k.startswith("rl:@shared:{ip:127.0.0.1}:") for k in found)
    # Counted in Redis up to the first denial; later ones are the deny cache's,
    # except the process's very first denial (/shared-a/'s), which reads the
    # reset token instead of being remembered: /shared-b/ asked Redis once more.
    assert sorted(int(redis_client.get(k)) for k in found) == [4, 5, 6]


def test_a_group_never_shares_state_with_a_named_policy(redis_client):
    assert codes(get("/named-like-a-policy/", 6)) == [200] * 5 + [429]
    named = get_policy("per_minute")
    assert named.peek("ip:127.0.0.1").remaining == 5
    assert [named.hit("ip:127.0.0.1").allowed for _ in range(6)] == [True] * 5 + [False]
    assert [k.split("}")[0] for k in keys(redis_client)] == [
        "rl:@per_minute:{ip:127.0.0.1",
        "rl:per_minute:{ip:127.0.0.1",
    ]


def test_any_string_is_a_group_digested_in_keys(redis_client):
    name = policy_name("logins, any text: é")
    assert name.startswith("@~") and len(name) == 26
    responses = get("/any-group/", 3)
    assert codes(responses) == [200, 200, 429]
    assert ratelimit_header(responses[2])[0] == name
    (key,) = keys(redis_client)
    assert key.startswith(f"rl:{name}:{{ip:127.0.0.1}}:")
    assert redis_client.type(key) == b"zset"  # the sliding_log it names


@pytest.mark.parametrize("url", ["/soft/", "/soft-async/"])
def test_block_false_runs_the_view_with_request_limited(url):
    name = "@tests.sites.views_inline." + url.strip("/").replace("-", "_")
    responses = get(url, 4)
    assert codes(responses) == [200] * 4
    assert [r.json() for r in responses] == [
        {"limited": False, "decisions": [[name, True, 1]]},
        {"limited": False, "decisions": [[name, True, 0]]},
        {"limited": True, "decisions": [[name, False, 0]]},
        {"limited": True, "decisions": [[name, False, 0]]},
    ]
    # The headers still go out; the view's own answer has no Retry-After.
    assert [ratelimit_header(r)[1]["r"] for r in responses] == [1, 0, 0, 0]
    assert policies(responses[3]) == {name: {"q": 2, "w": 3600}}
    assert all("Retry-After" not in r for r in responses)


def test_block_false_sets_limited_false_where_its_methods_do_not_count():
    client = Client()
    response = client.get("/soft-posts/")
    assert response.json() == {"limited": False, "decisions": []}
    assert "RateLimit-Policy" not in response
    posts = [client.post("/soft-posts/").json()["limited"] for _ in range(3)]
    assert posts == [False, False, True]


def basic(name):
    token = base64.b64encode(f"{name}:{name}-pw".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {token}"}


@pytest.fixture
def users(django_user_model):
    for name in ("alice", "bob"):
        django_user_model.objects.create_user(name, password=f"{name}-pw")


def test_an_inline_policy_on_a_drf_view_counts_the_drf_user(users):
    responses = get("/api/inline/", 4, **basic("alice"))
    assert codes(responses) == [200, 200, 200, 429]
    assert responses[0].json() == {
        "user": "alice",
        "limited": False,
        "decisions": [["@tests.sites.views_inline.InlineApi", True]],
    }
    assert responses[3].json()["detail"].startswith("Request was throttled.")
    assert ratelimit_header(responses[3]) == (
        "@tests.sites.views_inline.InlineApi",
        {"r": 0, "t": int(responses[3]["Retry-After"])},
    )
    assert codes(get("/api/inline/", 1, **basic("bob"))) == [200]


def test_block_false_on_a_drf_view(users):
    responses = get("/api/soft/", 3, **basic("alice"))
    assert codes(responses) == [200, 200, 200]
    assert [r.json()["limited"] for r in responses] == [False, False, True]
    assert [ratelimit_header(r)[1]["r"] for r in responses] == [1, 0, 0]


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (
            {"rate": "5/mango"},
            ConfigurationError,
            "ratelimit(rate='5/mango'): rate '5/mango' has an unknown period unit 'mango'",
        ),
        ({"rate": "five/m"}, ConfigurationError, "ratelimit(rate='five/m'): rate 'five/m' is not"),
        (
            {"rate": "5/m", "algorithm": "token_bucket"},
            ConfigurationError,
            "ratelimit(algorithm='token_bucket'): it needs more than a rate (django_rl.E006)",
        ),
        (
            {"rate": "5/m", "algorithm": "leaky"},
            ConfigurationError,
            "ratelimit(algorithm='leaky'): unknown algorithm (django_rl.E006)",
        ),
        (
            {"rate": "5/m", "key": "ipp"},
            ConfigurationError,
            "ratelimit(key='ipp'): key 'ipp' is not one of ip, user, user_or_ip",
        ),
        (
            {"rate": "5/m", "key": "header:bad name"},
            ConfigurationError,
            "ratelimit(key='header:bad name'): key 'header:bad name' does not name a valid header",
        ),
        ({"rate": "5/m", "group": 5}, TypeError, "ratelimit(group=5): group must be a string"),
        ({"rate": "5/m", "group": ""}, ValueError, "ratelimit(group=''): name the group"),
        ({"key": "ip"}, TypeError, "ratelimit(): key, algorithm and group describe an inline"),
        ({}, TypeError, "ratelimit() takes one or more policy names"),
        (
            {"group": "login"},
            TypeError,
            "ratelimit(): key, algorithm and group describe an inline policy: give rate=",
        ),
        (
            {"rate": "5/m", "cost": 6},
            ValueError,
            "ratelimit(rate='5/m', cost=6): the cost is above the limit 5, "
            "so every request would be denied",
        ),
        ({"rate": "5/m", "block": "no"}, TypeError, "ratelimit(block='no'): block must be True"),
        ({"rate": "5/m", "methods": "POST"}, TypeError, "ratelimit(methods='POST'): pass a list"),
    ],
)
def test_arguments_are_judged_when_the_decorator_is_applied(arguments, error, message):
    with pytest.raises(error) as info:
        ratelimit(**arguments)
    assert str(info.value).startswith(message)


def test_dotted_paths_are_imported_when_used_not_when_applied():
    ratelimit(rate="myapp.plans.missing", key="myapp.keys.missing")(lambda request: None)


def test_the_policies_command_lists_inline_policies():
    out = io.StringIO()
    call_command("ratelimit", "policies", stdout=out)
    lines = out.getvalue().splitlines()
    table = [line for line in lines if "@ratelimit on" not in line]
    shared = sorted(line.split()[1:5] for line in table if line.startswith("@shared "))
    assert shared == [
        ["fixed_window", "3", "3/h", "ip"],
        ["fixed_window", "3", "3/h", "user_or_ip"],
        ["fixed_window", "5", "5/h", "ip"],
    ]
    plan = [
        line.split()[:6] for line in table if line.startswith("@tests.sites.views_inline.plan_view")
    ]
    assert plan == [
        [
            "@tests.sites.views_inline.plan_view",
            "fixed_window",
            "per",
            "rate",
            "tests.support.plans.rate_for_user",
            "user",
        ]
    ]
    assert (
        "@shared (3/h): @ratelimit on tests.sites.views_inline.shared_a, "
        "tests.sites.views_inline.shared_b" in lines
    )
    assert (
        "@tests.sites.views_inline.InlineMethodDecorated (3/h): @ratelimit on "
        "tests.sites.views_inline.InlineMethodDecorated" in lines
    )


def command(*args):
    out = io.StringIO()
    call_command("ratelimit", *args, stdout=out)
    return out.getvalue()


def test_inspect_and_reset_take_an_inline_name(redis_client):
    get("/shared-a/", 2)
    get("/shared-other-rate/", 1)
    lines = command("inspect", "@shared", "ip:127.0.0.1").splitlines()
    assert lines[:3] == [
        "policy       @shared (a state per rate)",
        "identity     ip:127.0.0.1",
        "rates",
    ]
    rates = sorted(line.split()[:5] for line in lines[4:])
    assert rates == [
        ["3/h", "fixed_window", "2", "/", "3"],
        ["5/h", "fixed_window", "1", "/", "5"],
    ]
    assert command("reset", "@shared", "ip:127.0.0.1") == (
        "Reset ip:127.0.0.1 under @shared: 2 keys deleted.\n"
    )
    assert keys(redis_client) == []


def test_an_inline_policy_takes_every_rate_form():
    """DRF's words and '100/10' are read when applied; '0/m' denies every request, any cost."""

    def view(request):
        return HttpResponse("ok")

    rf = RequestFactory()
    words = ratelimit(rate="2/minutes", key="ip", group="forms-words", algorithm="sliding_log")
    ten = ratelimit(rate="2/10", key="ip", group="forms-ten", algorithm="sliding_log")
    closed = ratelimit(rate="0/m", key="ip", group="forms-closed", cost=5)(view)
    for limited in (words(view), ten(view)):
        assert [limited(rf.get("/")).status_code for _ in range(3)] == [200, 200, 429]
    denied = closed(rf.get("/"))
    assert (denied.status_code, denied["Retry-After"]) == (429, "60")
    with pytest.raises(ConfigurationError, match=r"ratelimit\(rate='5/M'\): .* lower case"):
        ratelimit(rate="5/M", key="ip")(view)


def test_a_bad_inline_key_names_every_key_a_policy_may_have():
    with pytest.raises(ConfigurationError) as raised:
        ratelimit(rate="5/m", key="nowhere")
    assert raised.value.check_id == "django_rl.E011"
    for key in ("'anon'", "'get:<name>'", "'post:<name>'", "'header:<Name>'", "callable"):
        assert key in raised.value.hint
