"""Identity functions: IPs, proxies, users, headers, custom callables."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory

from django_rl.core.identities import AddressSettings, IdentitySpecError, resolve_identity
from django_rl.exceptions import ConfigurationError

rf = RequestFactory()


class FakeUser:
    """A stand-in user object: identity functions only read these two attributes."""

    is_authenticated = True
    pk = 42


def request(remote_addr="203.0.113.9", forwarded=None, user=None, **headers):
    extra = {"REMOTE_ADDR": remote_addr}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    req = rf.get("/", headers=headers, **extra)
    if user is not None:
        req.user = user
    return req


@pytest.mark.parametrize(
    ("remote_addr", "identity"),
    [
        ("203.0.113.9", "ip:203.0.113.9"),
        ("2001:db8:1:2:3:4:5:6", "ip:2001:db8:1:2::"),
        ("2001:db8:1:2:ffff::1", "ip:2001:db8:1:2::"),
        ("2001:db8:1:3::1", "ip:2001:db8:1:3::"),
        ("::ffff:198.51.100.4", "ip:198.51.100.4"),
        # IPv4 clients behind a NAT64 translator (RFC 6052's well-known
        # prefix), or written the deprecated IPv4-compatible way: one bucket
        # per IPv4 address, not one for them all.
        ("64:ff9b::198.51.100.4", "ip:198.51.100.4"),
        ("64:ff9b::c633:6405", "ip:198.51.100.5"),
        ("64:ff9b::", "ip:0.0.0.0"),
        ("::198.51.100.4", "ip:198.51.100.4"),
        ("::2", "ip:0.0.0.2"),
        ("::", "ip:::"),
        ("::1", "ip:::"),
        # Just outside those /96 ranges: ordinary IPv6 networks.
        ("64:ff9b::1:c633:6404", "ip:64:ff9b::"),
        ("::1:0:0", "ip:::"),
        # RFC 8215's local-use prefix: the whole address, whatever the
        # operator's prefix length (/96 and /48 here).
        ("64:ff9b:1::198.51.100.4", "ip:64:ff9b:1::c633:6404"),
        ("64:ff9b:1::198.51.100.5", "ip:64:ff9b:1::c633:6405"),
        ("64:ff9b:1:c633:64:400::", "ip:64:ff9b:1:c633:64:400::"),
        ("64:ff9b:2::1", "ip:64:ff9b:2::"),
        ("fe80::1%eth0", "ip:fe80::"),
        ("", "ip:unknown"),
        ("not-an-ip", "ip:unknown"),
        # What the IPv4 fast path must reject or keep, as ipaddress does.
        ("0.0.0.0", "ip:0.0.0.0"),
        (" 255.255.255.255 ", "ip:255.255.255.255"),
        ("01.2.3.4", "ip:unknown"),
        ("1.2.3", "ip:unknown"),
        ("256.1.1.1", "ip:unknown"),
        ("1.2.3.4.5", "ip:unknown"),
        ("0x1.2.3.4", "ip:unknown"),
        ("1.2.3.4\x00", "ip:unknown"),
        ("\u0967.2.3.4", "ip:unknown"),
    ],
)
def test_ip_uses_remote_addr(remote_addr, identity):
    assert resolve_identity("ip")(request(remote_addr)) == identity


def test_a_plain_ipv4_address_seen_again_gets_the_same_identity_string(monkeypatch):
    """The strings of plain IPv4 addresses are kept (bounded): only checked ones, and only
    where each address counts whole (IPV4_PREFIX 32)."""
    from django_rl.core import identities

    monkeypatch.setattr(identities, "_PLAIN_IPV4", {})
    ip = resolve_identity("ip")
    first = ip(request("198.51.100.7"))
    assert first == "ip:198.51.100.7"
    assert ip(request("198.51.100.7")) is first  # kept: its hash already known
    assert ip(request("1.2.3.4\x00")) == "ip:unknown"
    assert ip(request("01.2.3.4")) == "ip:unknown"
    assert set(identities._PLAIN_IPV4) == {"198.51.100.7"}  # rejected ones are never kept
    grouped = resolve_identity("ip", addresses=AddressSettings(ipv4_prefix=24))
    assert grouped(request("198.51.100.7")) == "ip:198.51.100.0"  # the kept string is not asked
    for n in range(3 * identities._PLAIN_IPV4_SIZE):
        assert ip(request(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}")) == (
            f"ip:10.{n // 65536}.{n // 256 % 256}.{n % 256}"
        )
    assert len(identities._PLAIN_IPV4) <= identities._PLAIN_IPV4_SIZE


def test_forged_x_forwarded_for_is_ignored_by_default():
    assert resolve_identity("ip")(request(forwarded="1.2.3.4")) == "ip:203.0.113.9"


@pytest.mark.parametrize(
    ("num_proxies", "forwarded", "identity"),
    [
        # client -> proxy (appends the client) -> Django
        (1, "198.51.100.1", "ip:198.51.100.1"),
        # the client forged an entry; the trusted proxy appended the real one
        (1, "6.6.6.6, 198.51.100.1", "ip:198.51.100.1"),
        # client -> proxy1 -> proxy2 -> Django
        (2, "6.6.6.6, 198.51.100.1, 10.0.0.1", "ip:198.51.100.1"),
        (2, "198.51.100.1,10.0.0.1", "ip:198.51.100.1"),
        # fewer hops than proxies: the leftmost one
        (3, "198.51.100.1, 10.0.0.1", "ip:198.51.100.1"),
        (1, "[2001:db8::7]:4711", "ip:2001:db8::"),
        (1, "198.51.100.1:4711", "ip:198.51.100.1"),
        (1, "[2001:db8::7]", "ip:2001:db8::"),
        (1, " 198.51.100.1:0 ", "ip:198.51.100.1"),
        (1, "198.51.100.1:65535", "ip:198.51.100.1"),
        (1, "[64:ff9b::198.51.100.1]:443", "ip:198.51.100.1"),
        (1, "[fe80::1%eth0]:443", "ip:fe80::"),
        # malformed: fall back to REMOTE_ADDR
        (1, "garbage", "ip:203.0.113.9"),
        (1, "198.51.100.1:abc", "ip:203.0.113.9"),
        (1, "198.51.100.1:", "ip:203.0.113.9"),
        (1, "198.51.100.1:65536", "ip:203.0.113.9"),
        (1, "198.51.100.1:123456", "ip:203.0.113.9"),
        (1, "198.51.100.1:\u0967", "ip:203.0.113.9"),  # a digit, but not an ASCII one
        (1, "198.51.100.1:-1", "ip:203.0.113.9"),
        (1, "198.51.100.1:+1", "ip:203.0.113.9"),
        (1, "198.51.100.1: 1", "ip:203.0.113.9"),
        (1, "[2001:db8::1]junk", "ip:203.0.113.9"),
        (1, "[2001:db8::1]:", "ip:203.0.113.9"),
        (1, "[2001:db8::1]:443junk", "ip:203.0.113.9"),
        (1, "[2001:db8::1]:99999", "ip:203.0.113.9"),
        (1, "[2001:db8::1]]", "ip:203.0.113.9"),
        (1, "[198.51.100.1]", "ip:203.0.113.9"),
        (1, "[198.51.100.1]:443", "ip:203.0.113.9"),
        (1, "[ 2001:db8::1 ]", "ip:203.0.113.9"),
        (1, "2001:db8::1:443:", "ip:203.0.113.9"),
        (1, "6.6.6.6, ", "ip:203.0.113.9"),
        (2, "x" * 10_000 + ", 10.0.0.1", "ip:203.0.113.9"),
    ],
)
def test_trusted_proxies(num_proxies, forwarded, identity):
    ip = resolve_identity("ip", num_proxies=num_proxies)
    assert ip(request(forwarded=forwarded)) == identity


def test_user():
    user = resolve_identity("user")
    assert user(request(user=FakeUser())) == "user:42"
    assert user(request(user=AnonymousUser())) is None
    assert user(request()) is None  # no authentication middleware


def test_user_or_ip():
    user_or_ip = resolve_identity("user_or_ip")
    assert user_or_ip(request(user=FakeUser())) == "user:42"
    assert user_or_ip(request(user=AnonymousUser())) == "ip:203.0.113.9"


def test_header():
    api_key = resolve_identity("header:X-Api-Key")
    assert api_key(request(**{"X-Api-Key": "k-123"})) == "x-api-key:k-123"
    assert api_key(request(**{"x-api-key": "k-123"})) == "x-api-key:k-123"
    # Without the header (or with it empty): one identity shared by all such
    # requests, which no value can give (a value is never empty). Never exempt.
    assert api_key(request()) == "x-api-key:"
    assert api_key(request(**{"X-Api-Key": ""})) == "x-api-key:"


def tenant(req):
    return req.headers.get("X-Tenant") and f"tenant:{req.headers['X-Tenant']}"


def returns_int(req):
    return 42


NOT_CALLABLE = "a string"


def test_dotted_path():
    identity = resolve_identity("tests.core.test_identities.tenant")
    assert identity(request(**{"X-Tenant": "acme"})) == "tenant:acme"
    assert identity(request()) is None


def test_dotted_path_with_a_wrong_return_type_says_so():
    identity = resolve_identity("tests.core.test_identities.returns_int")
    with pytest.raises(TypeError, match=r"returned int; it must return a str"):
        identity(request())


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "must be a non-empty string"),
        (None, "must be a non-empty string"),
        ("ipaddress", "is not one of ip, user, user_or_ip"),
        ("header:", "does not name a valid header"),
        ("header:Bad Header", "does not name a valid header"),
        ("tests.core.test_identities.missing", "could not be imported"),
        ("no_such_module.func", "could not be imported"),
        ("tests.core.test_identities.NOT_CALLABLE", "is not callable"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(IdentitySpecError, match=message):
        resolve_identity(spec)


@pytest.mark.parametrize(
    ("query", "identity"),
    [
        ("page=2", "get:page:2"),
        ("page=1&page=2", "get:page:2"),  # the last, as QueryDict.get gives it
        ("page=", "get:page:"),
        ("", "get:page:"),
        ("other=2", "get:page:"),
        ("page=%7Ba%7D*", "get:page:{a}*"),  # made safe by the key, not here
    ],
)
def test_get_counts_a_query_parameter_and_one_shared_identity_without_it(query, identity):
    assert resolve_identity("get:page")(rf.get("/", QUERY_STRING=query)) == identity


@pytest.mark.parametrize(
    ("body", "content_type", "identity"),
    [
        ("username=alice", "application/x-www-form-urlencoded", "post:username:alice"),
        ("username=a&username=b", "application/x-www-form-urlencoded", "post:username:b"),
        ("username=", "application/x-www-form-urlencoded", "post:username:"),
        ("", "application/x-www-form-urlencoded", "post:username:"),
        ('{"username": "alice"}', "application/json", "post:username:"),  # form data only
    ],
)
def test_post_counts_a_form_field_and_one_shared_identity_without_it(body, content_type, identity):
    req = rf.post("/", data=body, content_type=content_type)
    assert resolve_identity("post:username")(req) == identity


def test_post_reads_a_multipart_form():
    req = rf.post("/", data={"username": "alice"})  # multipart/form-data
    assert resolve_identity("post:username")(req) == "post:username:alice"


def test_anon_counts_only_anonymous_requests_by_address():
    anon = resolve_identity("anon", num_proxies=1)
    assert anon(request(user=FakeUser())) is None
    assert anon(request(user=AnonymousUser())) == "ip:203.0.113.9"
    assert anon(request()) == "ip:203.0.113.9"  # no authentication middleware: anonymous
    assert anon(request(forwarded="198.51.100.7", user=AnonymousUser())) == "ip:198.51.100.7"


def cf(meta_key="HTTP_CF_CONNECTING_IP", num_proxies=0, v4=32, v6=64):
    return resolve_identity(
        "ip", addresses=AddressSettings(num_proxies, meta_key, ipv4_prefix=v4, ipv6_prefix=v6)
    )


@pytest.mark.parametrize(
    ("value", "identity"),
    [
        ("198.51.100.7", "ip:198.51.100.7"),
        (" 198.51.100.7 ", "ip:198.51.100.7"),
        ("198.51.100.7:443", "ip:198.51.100.7"),
        ("2001:db8:1:2::7", "ip:2001:db8:1:2::"),
        ("[2001:db8:1:2::7]:443", "ip:2001:db8:1:2::"),
        ("::ffff:198.51.100.8", "ip:198.51.100.8"),
        # Not one address: REMOTE_ADDR, as for a malformed X-Forwarded-For entry.
        ("198.51.100.7, 10.0.0.1", "ip:203.0.113.9"),
        ("", "ip:203.0.113.9"),
        ("unknown", "ip:203.0.113.9"),
        ("{*}", "ip:203.0.113.9"),
        ("1.2.3.4\x00", "ip:203.0.113.9"),
        ("x" * 100_000, "ip:203.0.113.9"),
        (None, "ip:203.0.113.9"),  # no such header
    ],
)
def test_ip_meta_key_reads_that_header_and_falls_back_to_remote_addr(value, identity):
    extra = {} if value is None else {"HTTP_CF_CONNECTING_IP": value}
    assert cf()(rf.get("/", REMOTE_ADDR="203.0.113.9", **extra)) == identity


def test_ip_meta_key_falls_back_to_the_trusted_proxies_then_remote_addr():
    ip = cf(num_proxies=1)
    req = rf.get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.1")
    assert ip(req) == "ip:198.51.100.1"
    req.META["HTTP_CF_CONNECTING_IP"] = "198.51.100.9"
    assert ip(req) == "ip:198.51.100.9"
    req.META["HTTP_CF_CONNECTING_IP"] = "garbage"
    assert ip(req) == "ip:198.51.100.1"
    req.META["HTTP_X_FORWARDED_FOR"] = "garbage"
    assert ip(req) == "ip:10.0.0.1"
    req.META["REMOTE_ADDR"] = ""
    assert ip(req) == "ip:unknown"


def address_from_header(req):
    """An IP_META_KEY function: the address a load balancer wrote, None when it did not."""
    return req.headers.get("X-Client-Address")


def returns_bytes(req):
    return b"198.51.100.7"


def test_ip_meta_key_may_name_a_function_or_be_one():
    for meta_key in ("tests.core.test_identities.address_from_header", address_from_header):
        ip = cf(meta_key, v4=24)
        req = rf.get("/", REMOTE_ADDR="203.0.113.9", HTTP_X_CLIENT_ADDRESS="198.51.100.7")
        assert ip(req) == "ip:198.51.100.0"
        assert ip(rf.get("/", REMOTE_ADDR="203.0.113.9")) == "ip:203.0.113.0"  # None: fall back
        bad = rf.get("/", REMOTE_ADDR="203.0.113.9", HTTP_X_CLIENT_ADDRESS="tenant-7")
        assert ip(bad) == "ip:203.0.113.0"  # not an address: fall back


def test_an_ip_meta_key_function_returning_no_str_says_so():
    ip = cf("tests.core.test_identities.returns_bytes")
    with pytest.raises(TypeError, match=r"function returned bytes; it must return .* or None"):
        ip(request())


@pytest.mark.parametrize(
    ("meta_key", "message"),
    [
        (
            "tests.core.test_identities.nowhere",
            "DJANGO_RL['IP_META_KEY'] 'tests.core.test_identities.nowhere' could not be imported: "
            'Module "tests.core.test_identities" does not define a "nowhere" attribute/class '
            "(django_rl.E080)",
        ),
        (
            "tests.core.test_identities.NOT_CALLABLE",
            "DJANGO_RL['IP_META_KEY'] 'tests.core.test_identities.NOT_CALLABLE' is not callable "
            "(django_rl.E080)",
        ),
    ],
)
def test_an_ip_meta_key_that_names_no_function_is_a_configuration_error(meta_key, message):
    for spec in ("ip", "user_or_ip", "anon"):
        with pytest.raises(ConfigurationError) as info:
            resolve_identity(spec, addresses=AddressSettings(meta_key=meta_key))
        assert str(info.value) == message
    # Keys that never read an address do not need it.
    resolve_identity("user", addresses=AddressSettings(meta_key=meta_key))


@pytest.mark.parametrize(
    ("address", "v4", "v6", "identity"),
    [
        ("203.0.113.9", 32, 64, "ip:203.0.113.9"),
        ("203.0.113.9", 24, 64, "ip:203.0.113.0"),
        ("203.0.113.200", 25, 64, "ip:203.0.113.128"),
        ("203.0.113.9", 16, 64, "ip:203.0.0.0"),
        ("203.0.113.9", 1, 64, "ip:128.0.0.0"),
        ("2001:db8:1:2:3:4:5:6", 32, 48, "ip:2001:db8:1::"),
        ("2001:db8:1:2:3:4:5:6", 32, 56, "ip:2001:db8:1::"),
        ("2001:db8:1:2ff:3:4:5:6", 32, 56, "ip:2001:db8:1:200::"),
        ("2001:db8:1:2:3:4:5:6", 32, 128, "ip:2001:db8:1:2:3:4:5:6"),
        ("2001:db8:1:2:3:4:5:6", 32, 1, "ip:::"),
        ("[2001:db8:1:2:3:4:5:6]:443", 32, 112, "ip:2001:db8:1:2:3:4:5:0"),
        # IPv4 carried in IPv6 is grouped as IPv4.
        ("::ffff:198.51.100.77", 24, 64, "ip:198.51.100.0"),
        ("64:ff9b::198.51.100.77", 24, 128, "ip:198.51.100.0"),
        # The NAT64 local-use prefix: still the whole address, whatever the prefixes.
        ("64:ff9b:1::198.51.100.4", 24, 48, "ip:64:ff9b:1::c633:6404"),
    ],
)
def test_prefix_lengths_group_addresses_into_networks(address, v4, v6, identity):
    ip = resolve_identity("ip", addresses=AddressSettings(ipv4_prefix=v4, ipv6_prefix=v6))
    assert ip(request(address)) == identity


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("get:", "key 'get:' does not name a valid query string parameter"),
        ("post:", "key 'post:' does not name a valid form field"),
        ("get:a b", "does not name a valid query string parameter"),
        ("post:" + "x" * 65, "does not name a valid form field"),
        ("anonymous", "is not one of ip, user, user_or_ip, anon, 'header:<Name>', 'get:<name>'"),
        ("cookie:sessionid", "key 'cookie:sessionid' is not one of ip, user, user_or_ip, anon"),
    ],
)
def test_bad_field_specs(spec, message):
    with pytest.raises(IdentitySpecError, match=re.escape(message)):
        resolve_identity(spec)


@pytest.mark.parametrize("spec", ["get:ids[]", "get:user.email", "post:a-b_c", "get:" + "x" * 64])
def test_field_names(spec):
    kind, _, name = spec.partition(":")
    req = rf.get("/", {name: "v"}) if kind == "get" else rf.post("/", {name: "v"})
    assert resolve_identity(spec)(req) == f"{spec}:v"


def test_policies_of_one_key_share_its_function_so_a_request_is_identified_once(settings):
    """engine.py identifies a request once per identity function among its policies."""
    from django_rl import get_policy
    from django_rl.policies import engine

    settings.DJANGO_RL = {
        "POLICIES": {
            "a": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"},
            "b": {"algorithm": "token_bucket", "rate": "5/m", "capacity": 5, "key": "ip"},
            "c": {"algorithm": "fixed_window", "rate": "5/m", "key": "user_or_ip"},
            "off": {"algorithm": "fixed_window", "rate": None, "key": "ip"},
        }
    }
    a, b, c, off = (get_policy(name) for name in ("a", "b", "c", "off"))
    assert a.identify is b.identify is off.identify
    assert c.identify is not a.identify
    assert resolve_identity("ip", addresses=AddressSettings(num_proxies=1)) is not a.identify

    calls: list[str] = []
    for policy in (a, b, c, off):
        function = policy.identify
        policy.identify = lambda request, function=function: calls.append("x") or function(request)
    shared = a.identify
    b.identify = off.identify = shared
    request = RequestFactory().get("/", REMOTE_ADDR="203.0.113.9")
    request.user = AnonymousUser()
    decisions = engine.hit_all(request, [a, b, c, off])
    # a and b share one function, c has its own, and "off" (rate None) identifies nothing.
    assert len(calls) == 2
    assert [d.policy for d in decisions] == ["a", "b", "c"]
    assert [d.remaining for d in decisions] == [4, 4, 4]
