"""``manage.py ratelimit inspect`` and ``reset`` take a client address as the admin's form does.

A bare address (or ``IP:...``, ``addr:port``) is the identity requests from it
are counted as under the policy (``ip:<address>``, grouped by the prefixes),
and the output names that identity.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from tests.conftest import start_of_fresh_window

pytestmark = pytest.mark.django_db

POLICIES = {
    "per_minute": {"algorithm": "sliding_log", "rate": "3/h", "key": "ip"},
    "users": {"algorithm": "fixed_window", "rate": "3/h", "key": "user"},
}


@pytest.fixture(autouse=True)
def _fresh_window(redis_client):
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


def ratelimit(*args: str) -> str:
    out = io.StringIO()
    call_command("ratelimit", *args, stdout=out)
    return out.getvalue()


def shown(output, label):
    [line] = [line for line in output.splitlines() if line.startswith(label)]
    return line.removeprefix(label).strip()


@pytest.mark.parametrize(
    ("typed", "prefixes", "counted"),
    [
        ("127.0.0.1", {}, "ip:127.0.0.1"),
        ("IP:127.0.0.1", {}, "ip:127.0.0.1"),
        ("127.0.0.1:8000", {}, "ip:127.0.0.1"),
        ("127.0.0.1", {"IPV4_PREFIX": 24}, "ip:127.0.0.0"),
    ],
)
def test_inspect_and_reset_take_an_address_as_requests_from_it_are_counted(
    settings, typed, prefixes, counted
):
    settings.DJANGO_RL = {"POLICIES": POLICIES, **prefixes}
    assert Client(REMOTE_ADDR="127.0.0.1").get("/limited/").status_code == 200
    inspected = ratelimit("inspect", "per_minute", typed)
    assert shown(inspected, "identity") == counted
    assert shown(inspected, "remaining") == "2"
    assert inspected.splitlines()[-1].split()[-2:] == ["1", "entry"]  # the log's one entry
    assert ratelimit("reset", "per_minute", typed) == (
        f"Reset {counted} under per_minute: 1 key deleted.\n"
    )
    assert shown(ratelimit("inspect", "per_minute", typed), "keys") == (
        "none: no state under this policy"
    )


def test_reset_of_every_policy_names_the_identity_as_counted(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "IPV4_PREFIX": 24}
    Client(REMOTE_ADDR="10.1.2.3").get("/limited/")
    assert ratelimit("reset", "--all-policies", "10.1.2.3").splitlines()[-1] == (
        "Reset ip:10.1.2.0 under 1 policy: 1 key deleted."
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("inspect", "per_minute", "10.1.0.0/16"), "'10.1.0.0/16' is a network: name one address"),
        (("reset", "users", "10.1.2.3"), "policy 'users' never counts requests by their address"),
    ],
)
def test_a_network_or_an_address_a_policy_never_counts_is_an_error(settings, args, message):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    with pytest.raises(CommandError, match=message):
        ratelimit(*args)


def test_an_address_under_the_drf_drop_in_is_its_cache_key(settings):
    from rest_framework.test import APIRequestFactory

    from tests.sites import views_contrib_drf

    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "3/min"}}
    settings.DJANGO_RL = {}
    view = views_contrib_drf.AnonView.as_view()
    assert view(APIRequestFactory().get("/", REMOTE_ADDR="10.1.2.3")).status_code == 200
    inspected = ratelimit("inspect", "drf.anon", "10.1.2.3")
    assert shown(inspected, "identity") == "throttle_anon_10.1.2.3"
    assert shown(inspected, "remaining") == "2"
