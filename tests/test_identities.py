"""Identity functions: IPs, proxies, users, headers, custom callables."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory

from django_rl.identities import IdentitySpecError, resolve_identity

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
    assert api_key(request()) is None
    assert api_key(request(**{"X-Api-Key": ""})) is None


def tenant(req):
    return req.headers.get("X-Tenant") and f"tenant:{req.headers['X-Tenant']}"


def returns_int(req):
    return 42


NOT_CALLABLE = "a string"


def test_dotted_path():
    identity = resolve_identity("tests.test_identities.tenant")
    assert identity(request(**{"X-Tenant": "acme"})) == "tenant:acme"
    assert identity(request()) is None


def test_dotted_path_with_a_wrong_return_type_says_so():
    identity = resolve_identity("tests.test_identities.returns_int")
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
        ("tests.test_identities.missing", "could not be imported"),
        ("no_such_module.func", "could not be imported"),
        ("tests.test_identities.NOT_CALLABLE", "is not callable"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(IdentitySpecError, match=message):
        resolve_identity(spec)
