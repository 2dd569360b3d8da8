"""Hostile input, property-based: no client value can crash a decision or make a bad key.

Identities and the headers they come from are drawn from arbitrary text:
huge, control characters, glob characters, braces, lone surrogates, and
header bytes that are not UTF-8 (a WSGI server hands them to Django decoded
as Latin-1). Settings: tests/support/properties.py.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from types import SimpleNamespace

from django.test import Client, RequestFactory
from hypothesis import assume, given
from hypothesis import strategies as st

from django_rl import get_policy
from django_rl.core.identities import AddressSettings, resolve_identity
from django_rl.core.keys import MAX_IDENTITY_LENGTH, fingerprint, key_for, safe_identity
from tests.support.properties import PURE, WITH_REDIS

#: Every key django_rl writes, by its format (DESIGN.md, "Redis keys").
#: A counter's key, or the reset token (reset_epoch.py), which has a TTL too.
KEY = re.compile(
    r"rl:~epoch|rl:[A-Za-z0-9._-]{1,64}:\{[A-Za-z0-9.:_@~-]{1,100}\}:[0-9a-f]{8}(:[0-9]+)?"
)
#: What SCAN's MATCH treats specially, and what breaks a Redis Cluster hash tag.
GLOB_OR_BRACE = re.compile(r"[*?\[\]\\^{}]")

rf = RequestFactory()

#: Any text at all, lone surrogates included (they cannot be encoded as UTF-8).
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)
#: A header value as Django sees it: bytes, not necessarily UTF-8, decoded as Latin-1.
header_value = st.one_of(
    st.binary(max_size=300).map(lambda raw: raw.decode("latin-1")),
    st.text(max_size=300),
)
huge = st.integers(10_000, 200_000).map(lambda n: "x" * n)


@PURE
@given(identity=st.one_of(any_text, huge, st.sampled_from(["*", "{a}", "}{", "a b", "\x00"])))
def test_any_identity_makes_a_bounded_key_without_glob_characters(identity):
    key = key_for("rl", "login", identity, fingerprint("sliding_log 5/m"))
    assert KEY.fullmatch(key), key
    assert len(key) <= len("rl:login:{}:") + MAX_IDENTITY_LENGTH + 9
    tag = key[key.index("{") + 1 : key.index("}")]
    assert not GLOB_OR_BRACE.search(tag)
    # Kept verbatim only when already safe; anything else is a digest.
    assert tag == identity or "~" in tag


@PURE
@given(a=any_text, b=any_text)
def test_distinct_identities_keep_distinct_keys(a, b):
    assume(a != b)
    assert safe_identity(a) != safe_identity(b)


def request(remote_addr: str, forwarded: str | None = None, api_key: str | None = None):
    meta = {"REMOTE_ADDR": remote_addr}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    if api_key is not None:
        meta["HTTP_X_API_KEY"] = api_key
    return rf.get("/", **meta)


def is_ip_identity(value: str) -> bool:
    if value == "ip:unknown":
        return True
    kind, _, address = value.partition(":")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return kind == "ip"


@PURE
@given(
    remote_addr=header_value,
    forwarded=st.none() | header_value | huge.map(lambda x: x.replace("x", "1.2.3.4,")),
    api_key=st.none() | header_value | huge,
    num_proxies=st.integers(0, 3),
)
def test_identity_functions_never_raise_and_make_safe_keys(
    remote_addr, forwarded, api_key, num_proxies
):
    req = request(remote_addr, forwarded, api_key)
    for spec in ("ip", "user_or_ip", "header:X-Api-Key"):
        identity = resolve_identity(spec, num_proxies=num_proxies)(req)
        if spec == "header:X-Api-Key":
            assert identity == f"x-api-key:{api_key or ''}"
        else:
            assert is_ip_identity(identity), identity
        if identity is not None:
            assert KEY.fullmatch(key_for("rl", "p", identity, "0" * 8))


#: IPv6 ranges whose last 32 bits are an IPv4 client's address (docs/security.md):
#: IPv4-mapped, the NAT64 well-known prefix, and IPv4-compatible (not ``::``, ``::1``).
EMBEDS_IPV4 = [ipaddress.ip_network(n) for n in ("::ffff:0:0/96", "64:ff9b::/96", "::/96")]
NOT_IPV4 = {ipaddress.ip_address("::"), ipaddress.ip_address("::1")}
#: The NAT64 local-use prefix: counted by the whole address.
NAT64_LOCAL_USE = ipaddress.ip_network("64:ff9b:1::/48")
#: Client addresses: Hypothesis favours the special ranges above, except ``::/96``.
addresses = st.ip_addresses() | st.ip_addresses(network="::/96")


def ip_identity(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, v4: int = 32, v6: int = 64
) -> str:
    """The documented identity of a client address: its network of ``v4`` (IPv4) or ``v6``
    (IPv6) bits (32 and 64 by default), or for IPv6 standing for IPv4, the IPv4's."""
    if isinstance(address, ipaddress.IPv6Address):
        address = ipaddress.IPv6Address(int(address))  # without a zone id
        if any(address in n for n in EMBEDS_IPV4) and address not in NOT_IPV4:
            return ip_identity(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), v4, v6)
        if address in NAT64_LOCAL_USE:
            return f"ip:{address}"
        return f"ip:{ipaddress.ip_network(f'{address}/{v6}', strict=False).network_address}"
    return f"ip:{ipaddress.ip_network(f'{address}/{v4}', strict=False).network_address}"


#: The documented forms of an X-Forwarded-For entry, once trimmed, written apart from
#: the parser: [v6] or [v6]:port, v4:port, or a bare address; ports 0-65535 in ASCII.
ENTRY_FORMS = [
    (re.compile(r"\[(?P<host>[^\]]*)\](?::(?P<port>[0-9]{1,5}))?"), 6),
    (re.compile(r"(?P<host>[^:]*):(?P<port>[0-9]{1,5})"), 4),
    (re.compile(r"(?P<host>.*)(?P<port>)", re.DOTALL), None),
]


def entry_address(entry: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a well-formed entry names; ``None`` for a malformed one."""
    for form, version in ENTRY_FORMS:
        match = form.fullmatch(entry.strip())
        if match is None or (match["port"] and int(match["port"]) > 65535):
            continue
        try:
            address = ipaddress.ip_address(match["host"])
        except ValueError:
            continue
        if version in (None, address.version):
            return address
    return None


@PURE
@given(remote=addresses, forwarded=header_value)
def test_x_forwarded_for_is_ignored_without_trusted_proxies(remote, forwarded):
    ip = resolve_identity("ip", num_proxies=0)
    assert ip(request(str(remote), forwarded)) == ip_identity(remote)


@PURE
@given(
    forged=st.none() | header_value,
    client=addresses,
    proxies=st.lists(st.ip_addresses(), max_size=3),
    remote=st.ip_addresses(),
)
def test_with_n_trusted_proxies_only_the_address_the_first_one_saw_counts(
    forged, client, proxies, remote
):
    # Each of the N proxies appends the address it got the request from: the
    # first one appends the client's; whatever the client wrote is further left.
    hops = [str(client), *map(str, proxies)]
    forwarded = ", ".join(hops if forged is None else [forged, *hops])
    ip = resolve_identity("ip", num_proxies=len(hops))
    assert ip(request(str(remote), forwarded)) == ip_identity(client)


#: A port that is not one: out of range, not ASCII digits, or with more after it.
bad_port = st.one_of(
    st.integers(65_536, 10**7).map(str),
    st.text(max_size=8),
    st.integers(0, 65_535).map(lambda port: f"{port}x"),
)
#: Entries that come close to a documented form and miss it.
near_miss = st.one_of(
    st.builds("{}:{}".format, st.ip_addresses(v=4), bad_port),
    st.builds("[{}]:{}".format, st.ip_addresses(v=6), bad_port),
    st.builds("[{}]{}".format, st.ip_addresses(v=6), st.text(max_size=8)),
    st.builds("[{}]{}".format, st.ip_addresses(v=4), st.sampled_from(["", ":80"])),
)


@PURE
@given(
    forged=header_value,
    malformed=(header_value | near_miss).filter(lambda v: "," not in v),
    proxies=st.lists(st.ip_addresses(), max_size=2),
    remote=st.ip_addresses(),
)
def test_a_malformed_address_from_the_proxies_falls_back_to_remote_addr(
    forged, malformed, proxies, remote
):
    assume(entry_address(malformed) is None)
    hops = [malformed, *map(str, proxies)]
    ip = resolve_identity("ip", num_proxies=len(hops))
    forwarded = ", ".join([forged, *hops])
    assert ip(request(str(remote), forwarded)) == ip_identity(remote)


@PURE
@given(
    client=addresses,
    port=st.none() | st.integers(0, 65_535).flatmap(lambda p: st.sampled_from([p, f"{p:05}"])),
    brackets=st.booleans(),
    space=st.sampled_from(["", " ", "\t "]),
    forged=header_value,
    remote=st.ip_addresses(),
)
def test_every_documented_form_of_an_entry_counts_its_address(
    client, port, brackets, space, forged, remote
):
    entry = str(client)
    if client.version == 6 and (brackets or port is not None):
        entry = f"[{entry}]"
    if port is not None:
        entry = f"{entry}:{port}"
    assert entry_address(entry) == client  # the oracle agrees with itself
    ip = resolve_identity("ip", num_proxies=1)
    assert ip(request(str(remote), f"{forged},{space}{entry}{space}")) == ip_identity(client)


def test_hostile_identities_through_redis(settings, redis_client):
    policies = [get_policy(name) for name in ("login", "per_minute", "burst")]

    @WITH_REDIS
    @given(identity=st.one_of(any_text, huge), cost=st.integers(1, 3))
    def hit_and_peek(identity, cost):
        for policy in policies:
            decision = policy.hit(identity, cost)
            assert not decision.degraded
            assert not policy.peek(identity).degraded

    hit_and_peek()
    for raw in redis_client.scan_iter(match="*"):
        key = raw.decode()
        assert KEY.fullmatch(key), key
        # Never -1 (no TTL); -2 is a key that expired since the SCAN saw it.
        assert redis_client.pttl(key) != -1


def test_hostile_headers_through_both_front_doors(settings, redis_client):
    settings.DJANGO_RL = {
        "NUM_PROXIES": 2,
        "POLICIES": {
            "per_minute": {"algorithm": "sliding_log", "rate": "5/m", "key": "header:X-Api-Key"},
            "writes": {"algorithm": "fixed_window", "rate": "2/m", "key": "ip"},
        },
    }
    client = Client(raise_request_exception=False)

    @WITH_REDIS
    @given(
        url=st.sampled_from(["/limited/", "/api/scoped/", "/writes/"]),
        remote_addr=header_value,
        forwarded=header_value,
        api_key=header_value,
    )
    def send(url, remote_addr, forwarded, api_key):
        method = client.post if url == "/writes/" else client.get  # /writes/ counts POSTs
        response = method(
            url,
            REMOTE_ADDR=remote_addr,
            HTTP_X_FORWARDED_FOR=forwarded,
            HTTP_X_API_KEY=api_key,
        )
        assert response.status_code in {200, 429}, response.status_code

    send()
    for raw in redis_client.scan_iter(match="*"):
        assert KEY.fullmatch(raw.decode()), raw


# Issue 12's identity sources: query and form values, IP_META_KEY, the prefixes, anon.

#: Arbitrary bytes, a few of them large (up to 40 kB, 120 kB percent-encoded).
any_bytes = st.binary(max_size=300) | st.integers(5_000, 20_000).map(lambda n: b"\xff{" * n)


@PURE
@given(raw=any_bytes, before=st.sampled_from(["", "a=1&", "page=0&"]))
def test_query_and_form_values_never_raise_and_make_safe_keys(raw, before):
    # Percent-encoded, as a browser sends them; Django decodes them as UTF-8,
    # replacing what is not. A repeated field counts by its last value.
    encoded = before + "page=" + urllib.parse.quote_from_bytes(raw)
    value = raw.decode("utf-8", "replace")
    requests = {
        "get:page": rf.get("/", QUERY_STRING=encoded),
        "post:page": rf.post("/", data=encoded, content_type="application/x-www-form-urlencoded"),
    }
    for spec, req in requests.items():
        identity = resolve_identity(spec)(req)
        assert identity == f"{spec}:{value}"
        assert KEY.fullmatch(key_for("rl", "p", identity, "0" * 8))


@PURE
@given(
    value=header_value | near_miss | addresses.map(str) | huge,
    remote=addresses,
    v4=st.integers(1, 32),
    v6=st.integers(1, 128),
    num_proxies=st.integers(0, 2),
)
def test_ip_meta_key_counts_a_well_formed_address_and_falls_back_otherwise(
    value, remote, v4, v6, num_proxies
):
    rules = AddressSettings(num_proxies, "HTTP_CF_CONNECTING_IP", v4, v6)
    req = request(str(remote))
    req.META["HTTP_CF_CONNECTING_IP"] = value
    address = entry_address(value)
    expected = ip_identity(remote if address is None else address, v4, v6)
    for spec in ("ip", "user_or_ip", "anon"):
        identity = resolve_identity(spec, addresses=rules)(req)
        assert identity == expected
        assert KEY.fullmatch(key_for("rl", "p", identity, "0" * 8))


@PURE
@given(
    value=st.none() | header_value | addresses.map(str),
    remote=header_value,
    authenticated=st.booleans(),
)
def test_anon_and_a_meta_key_function_never_raise(value, remote, authenticated):
    req = request(remote)
    req.user = SimpleNamespace(is_authenticated=authenticated, pk=7)
    rules = AddressSettings(1, lambda r: value)
    identity = resolve_identity("anon", addresses=rules)(req)
    if authenticated:
        assert identity is None
    else:
        assert is_ip_identity(identity), identity
        address = None if value is None else entry_address(value)
        if address is not None:
            assert identity == ip_identity(address)


def test_hostile_values_of_every_new_key_through_both_front_doors(settings, redis_client):
    from tests.sites.urls_syntax import POLICIES

    settings.ROOT_URLCONF = "tests.sites.urls_syntax"
    settings.DJANGO_RL = {
        "IP_META_KEY": "HTTP_CF_CONNECTING_IP",
        "IPV4_PREFIX": 24,
        "IPV6_PREFIX": 48,
        "POLICIES": POLICIES,
    }
    client = Client(raise_request_exception=False)

    @WITH_REDIS
    @given(
        name=st.sampled_from(["api_key", "page", "username", "anon", "per_minute"]),
        door=st.sampled_from(["", "api/"]),
        raw=any_bytes,
        text=header_value,
        remote_addr=header_value,
    )
    def send(name, door, raw, text, remote_addr):
        value = urllib.parse.quote_from_bytes(raw)
        response = client.generic(
            "POST",
            f"/{name}/{door}?page={value}",
            data=f"username={value}",
            content_type="application/x-www-form-urlencoded",
            REMOTE_ADDR=remote_addr,
            HTTP_CF_CONNECTING_IP=text,
            HTTP_X_API_KEY=text,
        )
        assert response.status_code in {200, 429}, response.status_code

    send()
    keys = [raw.decode() for raw in redis_client.scan_iter(match="*")]
    assert keys
    for key in keys:
        assert KEY.fullmatch(key), key
        assert redis_client.pttl(key) != -1
