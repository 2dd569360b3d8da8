"""Targets typed in the admin's override form apply to the requests they name, or are refused.

End to end: saved through the admin's form (a logged-in superuser), loaded as
the loader thread loads them (``LOADER.load()``), then requests from the
address: under ``IPV4_PREFIX``/``IPV6_PREFIX``, django-ratelimit's masks, and
the DRF drop-in's own identities.
"""

from __future__ import annotations

import datetime

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIRequestFactory

from django_rl.models import Override
from django_rl.overrides import LOADER
from tests.conftest import start_of_fresh_window
from tests.sites import views_contrib_drf

pytestmark = pytest.mark.django_db

ADD = "/admin/django_rl/override/add/"
LATER = timezone.localtime() + datetime.timedelta(days=7)
POLICIES = {"per_minute": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"}}


@pytest.fixture(autouse=True)
def _fresh_window(redis_client):
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


@pytest.fixture
def admin_client(django_user_model):
    user = django_user_model.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(user)
    return client


def save(admin_client, policy, identity, action="block", rate=""):
    """Post the add form; return (the response, the messages shown next as (level tag, text))."""
    response = admin_client.post(
        ADD,
        {
            "policy": policy,
            "identity": identity,
            "action": action,
            "rate": rate,
            "expires_at_0": LATER.strftime("%Y-%m-%d"),
            "expires_at_1": "12:00:00",
            "reason": "tests",
        },
    )
    if response.status_code != 302:
        return response, []
    shown = admin_client.get(response["Location"])  # the list shows (and uses up) the messages
    return response, [(m.level_tag, str(m)) for m in shown.context["messages"]]


def statuses(address, n, url="/limited/"):
    client = Client(REMOTE_ADDR=address)
    return [client.get(url).status_code for _ in range(n)]


@pytest.mark.parametrize(
    ("typed", "prefixes"),
    [
        ("10.1.2.3", {"IPV4_PREFIX": 24}),
        ("IP:10.1.2.3", {}),
        ("Ip:10.1.2.3", {"IPV4_PREFIX": 24}),
        ("10.1.2.3:8080", {"IPV4_PREFIX": 24}),
        ("ip:10.1.2.3:8080", {}),
        ("10.1.0.0/16", {"IPV4_PREFIX": 24}),
        ("2001:db8:1:2::5", {"IPV6_PREFIX": 48}),
        ("[2001:db8:1:2::5]:443", {}),
    ],
)
def test_an_address_typed_in_the_form_blocks_the_requests_from_it(
    settings, admin_client, typed, prefixes
):
    settings.DJANGO_RL = {"POLICIES": POLICIES, **prefixes}
    response, said = save(admin_client, "per_minute", typed)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert [level for level, _ in said] == ["success"]
    assert LOADER.load()
    address = typed.lower().removeprefix("ip:").removeprefix("[").split("]")[0]
    address = address.split("/")[0].rsplit(":", 1)[0] if "." in address else address
    assert statuses(address, 1) == [429]
    neighbour = "10.9.9.9" if "." in address else "2001:db9::1"
    assert statuses(neighbour, 4) == [200, 200, 200, 429]


def test_a_network_narrower_than_the_prefix_is_refused_with_what_to_type(settings, admin_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "IPV4_PREFIX": 24}
    response, _ = save(admin_client, "per_minute", "10.1.2.128/25")
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["identity"] == [
        "'10.1.2.128/25': policy 'per_minute' counts IPv4 clients by their /24 network "
        "(IPV4_PREFIX), so this network never holds a request's identity: type 10.1.2.0/24 "
        "(or a wider network), or one address"
    ]
    assert Override.objects.count() == 0


def test_an_address_for_a_policy_that_counts_users_is_refused(settings, admin_client):
    settings.DJANGO_RL = {"POLICIES": {"users": {"rate": "3/h", "key": "user"}}}
    response, _ = save(admin_client, "users", "10.1.2.3")
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["identity"]
    assert "never counts requests by their address" in error and "user:42" in error
    assert Override.objects.count() == 0


def test_an_override_stored_before_the_prefix_changed_is_left_out_and_logged(settings, caplog):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "IPV4_PREFIX": 16}
    made = Override.objects.create(
        policy="per_minute",
        identity="ip:10.1.2.0/24",
        action="block",
        expires_at=timezone.now() + datetime.timedelta(hours=1),
    )
    assert LOADER.load()
    assert "per_minute" not in LOADER.rules
    [line] = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert line.startswith(f"Rate-limit override left out: override {made.pk} of policy ")


def test_an_address_blocks_the_django_ratelimit_drop_ins_masked_requests(settings, admin_client):
    from django.test import RequestFactory

    from django_rl.contrib.ratelimit.core import get_usage
    from django_rl.policies.inline import policy_name

    settings.RATELIMIT_IPV4_MASK = 24
    settings.DJANGO_RL = {}
    factory = RequestFactory()

    def usage(address):
        request = factory.get("/", REMOTE_ADDR=address)
        return get_usage(request, group="masked", key="ip", rate="2/m", increment=True)

    usage("192.0.2.1")  # the group is known to this process: the form lists it
    response, said = save(admin_client, policy_name("masked"), "10.1.2.3")
    assert (response.status_code, [level for level, _ in said]) == (302, ["success"])
    assert LOADER.load()
    answer = usage("10.1.2.3")
    assert (answer["count"], answer["should_limit"]) == (0, True)
    assert usage("10.1.3.3")["should_limit"] is False


@pytest.mark.parametrize("typed", ["10.1.2.3", "IP:10.1.2.3", "10.1.2.3:8080", "10.1.0.0/16"])
def test_an_address_blocks_the_drf_drop_ins_anonymous_throttle(settings, admin_client, typed):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "3/min"}}
    settings.DJANGO_RL = {}
    factory = APIRequestFactory()
    view = views_contrib_drf.AnonView.as_view()

    def drf_statuses(address, n):
        return [view(factory.get("/", REMOTE_ADDR=address)).status_code for _ in range(n)]

    assert drf_statuses("192.0.2.1", 1) == [200]  # drf.anon is known to this process
    response, said = save(admin_client, "drf.anon", typed)
    assert (response.status_code, [level for level, _ in said]) == (302, ["success"])
    assert LOADER.load()
    assert drf_statuses("10.1.2.3", 1) == [429]
    assert drf_statuses("10.2.0.1", 4) == [200, 200, 200, 429]


def test_a_sliding_log_rate_that_settings_would_warn_about_is_warned_about(settings, admin_client):
    settings.DJANGO_RL = {"POLICIES": {"log": {"algorithm": "sliding_log", "rate": "10/h"}}}
    response, said = save(admin_client, "log", "user:42", action="rate", rate="1000000000/d")
    assert response.status_code == 302
    assert [level for level, _ in said] == ["warning", "success"]
    warning = said[0][1]
    assert warning.startswith(
        "A rate override of policy 'log' at '1000000000/d': a sliding_log of 1000000000/d "
        "keeps up to 1,000,000,000 entries per identity"
    )
    assert warning.endswith("(django_rl.W020)")
    # Below the threshold: saved with the one message.
    _, said = save(admin_client, "log", "user:43", action="rate", rate="1000/h")
    assert [level for level, _ in said] == ["success"]


def test_a_user_blocks_the_drf_drop_ins_user_throttle_and_is_refused_for_anon(
    settings, admin_client, django_user_model
):
    from rest_framework.test import force_authenticate

    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"user": "3/min", "anon": "3/min"}}
    settings.DJANGO_RL = {}
    factory = APIRequestFactory()
    view = views_contrib_drf.UserView.as_view()
    alice, bob = (django_user_model.objects.create_user(name) for name in ("alice", "bob"))

    def drf_statuses(user, n):
        answers = []
        for _ in range(n):
            request = factory.get("/")
            force_authenticate(request, user)
            answers.append(view(request).status_code)
        return answers

    assert drf_statuses(bob, 1) == [200]  # drf.user is known to this process
    response, said = save(admin_client, "drf.user", f"user:{alice.pk}")
    assert (response.status_code, [level for level, _ in said]) == (302, ["success"])
    assert LOADER.load()
    assert drf_statuses(alice, 1) == [429]
    assert drf_statuses(bob, 3) == [200, 200, 429]
    assert views_contrib_drf.AnonView.as_view()(factory.get("/")).status_code == 200
    response, _ = save(admin_client, "drf.anon", f"user:{alice.pk}")
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["identity"]
    assert "never throttles signed-in users: name an address" in error
