"""The keys of issue 12 through both front doors: a missing header is counted, ``get:``,
``post:``, ``anon``, ``IP_META_KEY`` and the prefix lengths. Views: ``tests/sites/urls_syntax.py``.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import AsyncClient, Client

from tests.conftest import start_of_fresh_window
from tests.sites.urls_syntax import POLICIES

DOORS = ["", "async/", "api/"]
#: The doors a client's address can be set at (the ASGI test client's is fixed).
ADDRESS_DOORS = ["", "api/"]


@pytest.fixture(autouse=True)
def _syntax_views(settings, redis_client):
    settings.ROOT_URLCONF = "tests.sites.urls_syntax"
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    # Every policy here is a fixed window of a minute: keep each test inside one.
    start_of_fresh_window(redis_client, 60_000, min_left_ms=10_000)


def send(url: str, requests: list[dict], method: str = "get"):
    """Send each request (keyword arguments of the test client's method); return the statuses.

    To an ``/async/`` URL through the ASGI test client, which takes headers
    by name, not as META keys, and sends every request from 127.0.0.1.
    """
    if not url.endswith("/async/"):
        client = Client()
        return [getattr(client, method)(url, **r).status_code for r in requests]

    async def run():
        statuses = []
        for r in requests:
            r = dict(r)
            assert "REMOTE_ADDR" not in r, "the ASGI test client sends from 127.0.0.1"
            headers = r.pop("headers", {})
            for name in [k for k in r if k.startswith("HTTP_")]:
                headers[name.removeprefix("HTTP_").replace("_", "-")] = r.pop(name)
            response = await getattr(AsyncClient(), method)(url, headers=headers, **r)
            statuses.append(response.status_code)
        return statuses

    return async_to_sync(run)()


@pytest.mark.parametrize("door", DOORS)
def test_a_client_that_leaves_the_header_out_is_limited(door):
    url = f"/api_key/{door}"
    # Without the header, and with it empty: one shared identity, limited like any other.
    assert send(url, [{}, {}, {}, {"headers": {"X-Api-Key": ""}}]) == [200, 200, 429, 429]
    assert send(url, [{"headers": {"X-Api-Key": "k1"}}] * 3) == [200, 200, 429]
    assert send(url, [{"headers": {"X-Api-Key": "k2"}}]) == [200]


@pytest.mark.parametrize("door", DOORS)
def test_get_counts_each_value_of_a_query_parameter(door):
    url = f"/page/{door}"
    assert send(url, [{"data": {"page": "1"}}] * 3) == [200, 200, 429]
    assert send(url, [{"data": {"page": "2"}}, {"data": {"page": "1"}}]) == [200, 429]
    # Without the parameter, or with it empty: one shared identity.
    assert send(url, [{}, {"data": {"page": ""}}, {}]) == [200, 200, 429]


@pytest.mark.parametrize("door", DOORS)
def test_post_counts_each_value_of_a_form_field(door):
    url = f"/username/{door}"
    alice = {"data": {"username": "alice"}}
    assert send(url, [alice] * 3, method="post") == [200, 200, 429]
    assert send(url, [{"data": {"username": "bob"}}], method="post") == [200]
    # JSON is not form data: counted as without the field, with the form that lacks it.
    json_body = {"data": {"username": "carol"}, "content_type": "application/json"}
    assert send(url, [json_body, {"data": {}}, json_body], method="post") == [200, 200, 429]


@pytest.mark.parametrize("door", DOORS)
def test_anon_counts_anonymous_requests_by_address(door):
    url = f"/anon/{door}"
    assert send(url, [{}] * 3) == [200, 200, 429]
    if door != "async/":
        assert send(url, [{"REMOTE_ADDR": "198.51.100.3"}]) == [200]


@pytest.mark.django_db
@pytest.mark.parametrize("door", ["", "api/"])
def test_anon_does_not_count_an_authenticated_user(door):
    url = f"/anon/{door}"
    assert send(url, [{}] * 3) == [200, 200, 429]
    member = Client()  # from the same address
    member.force_login(User.objects.create_user("member", password="x"))
    responses = [member.get(url) for _ in range(5)]
    assert [r.status_code for r in responses] == [200] * 5
    assert ["RateLimit" in r.headers for r in responses] == [False] * 5  # not counted at all


def test_ip_meta_key_names_the_header_that_carries_the_client_address(settings):
    settings.DJANGO_RL = {"IP_META_KEY": "HTTP_CF_CONNECTING_IP", "POLICIES": POLICIES}
    for door in ADDRESS_DOORS:
        url = f"/per_minute/{door}"
        # One client behind the CDN, seen through different edge addresses.
        behind = [
            {"REMOTE_ADDR": f"10.0.0.{i}", "HTTP_CF_CONNECTING_IP": f"198.51.100.{door.count('/')}"}
            for i in range(6)
        ]
        assert send(url, behind) == [200] * 5 + [429]
        # A value that is not an address falls back to REMOTE_ADDR, whatever it is.
        forged = [
            {"REMOTE_ADDR": f"10.1.{len(door)}.1", "HTTP_CF_CONNECTING_IP": value}
            for value in ["garbage", "", "{*}", "1.2.3.4, 5.6.7.8", "x" * 5000, "::1::", "a", "b"]
        ]
        assert send(url, forged[:6]) == [200] * 5 + [429]


def address_of(request):
    """An IP_META_KEY function: what a load balancer wrote in X-Client-Address, or None."""
    return request.headers.get("X-Client-Address")


def test_ip_meta_key_may_name_a_function(settings):
    settings.DJANGO_RL = {
        "IP_META_KEY": "tests.core.test_keys_http.address_of",
        "POLICIES": POLICIES,
    }
    for n, door in enumerate(ADDRESS_DOORS):
        url = f"/per_minute/{door}"
        behind = [
            {"REMOTE_ADDR": f"10.0.{n}.{i}", "HTTP_X_CLIENT_ADDRESS": f"198.51.100.{n}"}
            for i in range(6)
        ]
        assert send(url, behind) == [200] * 5 + [429]
        # None (no header) or not an address: REMOTE_ADDR.
        plain = [{"REMOTE_ADDR": f"10.9.{n}.1"}, {"REMOTE_ADDR": f"10.9.{n}.1"}] * 3
        plain[1]["HTTP_X_CLIENT_ADDRESS"] = "tenant-7"
        assert send(url, plain) == [200] * 5 + [429]


def test_two_addresses_in_one_slash_24_share_a_bucket_with_ipv4_prefix_24(settings):
    split = [{"REMOTE_ADDR": "198.51.100.1"}] * 3 + [{"REMOTE_ADDR": "198.51.100.2"}] * 3
    # /32 by default: each address has its own bucket.
    assert send("/per_minute/", split) == [200] * 6
    settings.DJANGO_RL = {"IPV4_PREFIX": 24, "POLICIES": POLICIES}  # read again at once
    for door in ADDRESS_DOORS:
        url = f"/per_minute/{door}"
        net = f"198.51.{101 + len(door)}"
        shared = [{"REMOTE_ADDR": f"{net}.1"}] * 3 + [{"REMOTE_ADDR": f"{net}.254"}] * 3
        assert send(url, shared) == [200] * 5 + [429]
        assert send(url, [{"REMOTE_ADDR": f"{net[:-1]}9.1"}]) == [200]  # another /24


def test_two_addresses_in_one_slash_48_share_a_bucket_with_ipv6_prefix_48(settings):
    split = [{"REMOTE_ADDR": "2001:db8:1:1::1"}] * 3 + [{"REMOTE_ADDR": "2001:db8:1:2::1"}] * 3
    assert send("/per_minute/", split) == [200] * 6  # /64 by default
    settings.DJANGO_RL = {"IPV6_PREFIX": 48, "POLICIES": POLICIES}
    for n, door in enumerate(ADDRESS_DOORS):
        url = f"/per_minute/{door}"
        shared = [{"REMOTE_ADDR": f"2001:db8:{n + 2}:1::1"}] * 3
        shared += [{"REMOTE_ADDR": f"2001:db8:{n + 2}:ffff::9"}] * 3
        assert send(url, shared) == [200] * 5 + [429]
        assert send(url, [{"REMOTE_ADDR": f"2001:db8:{n + 9}::1"}]) == [200]
