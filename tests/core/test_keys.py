"""Identities made safe for keys, whatever a client sends."""

from __future__ import annotations

import re

import pytest

from django_rl.core.keys import MAX_IDENTITY_LENGTH, fingerprint, key_for, safe_identity

GLOB = re.compile(r"[*?\[\]\\^]")


@pytest.mark.parametrize(
    "identity",
    ["ip:203.0.113.9", "ip:2001:db8:1:2::", "user:42", "x-api-key:abc_DEF-1.2@x", "a" * 100],
)
def test_safe_identities_are_kept(identity):
    assert safe_identity(identity) == identity


@pytest.mark.parametrize(
    ("identity", "kind"),
    [
        ("x-api-key:" + "A" * 5000, "x-api-key:"),
        ("x-api-key:*", "x-api-key:"),
        ("x-api-key:a?b", "x-api-key:"),
        ("x-api-key:[abc]", "x-api-key:"),
        ("x-api-key:line\nbreak", "x-api-key:"),
        ("x-api-key:\x00\x1b", "x-api-key:"),
        ("user:ünïcødé", "user:"),
        ("user:{42}", "user:"),
        ("user:}{", "user:"),
        ("user:a b", "user:"),
        ("user:~looks-like-a-digest", "user:"),
        ("", ""),
        ("{evil}:x", ""),
        ("*", ""),
        ("\udcff", ""),
    ],
)
def test_hostile_identities_become_bounded_digests(identity, kind):
    safe = safe_identity(identity)
    assert safe.startswith(kind + "~")
    assert re.fullmatch(r"[A-Za-z0-9.:_@~-]+", safe)
    assert len(safe) <= len(kind) + 25
    key = key_for("rl", "login", identity, fingerprint("x"))
    assert not GLOB.search(key)
    assert key.count("{") == key.count("}") == 1
    assert len(key) <= len("rl:login:{}:") + 8 + 32 + 25


def test_digests_are_stable_and_distinct():
    assert safe_identity("user:a b") == safe_identity("user:a b")
    assert safe_identity("user:a b") != safe_identity("user:a  b")


def test_too_long_identities_are_digested():
    assert safe_identity("u" * (MAX_IDENTITY_LENGTH + 1)).startswith("~")


def test_fingerprint_is_short_and_follows_its_input():
    assert re.fullmatch(r"[0-9a-f]{8}", fingerprint("fixed_window 5/m"))
    assert fingerprint("fixed_window 5/m") != fingerprint("fixed_window 6/m")


def test_hostile_identities_make_bounded_keys_in_redis(settings, redis_client):
    from django_rl import get_policy
    from tests.conftest import start_of_fresh_window

    # Hour-long state, so no key expires while the test counts them.
    settings.DJANGO_RL = {
        "POLICIES": {
            "log": {"algorithm": "sliding_log", "rate": "5/h"},
            "window": {"algorithm": "fixed_window", "rate": "5/h"},
            "bucket": {"algorithm": "token_bucket", "capacity": 3, "rate": "1/h"},
        }
    }
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    hostile = [
        "x" * 5000,
        "ip:*",
        "ip:?",
        "ip:[a-z]",
        "user:{42}",
        "user:line\nbreak",
        "user:ünïcødé",
        "\x00\x1b[31m",
        "}{",
    ]
    for name in ("log", "window", "bucket"):
        policy = get_policy(name)
        for identity in hostile:
            assert policy.hit(identity).allowed
    keys = [k.decode() for k in redis_client.scan_iter(match="rl:*")]
    assert len(keys) == 3 * len(hostile)
    for key in keys:
        assert len(key) <= 80
        assert re.fullmatch(r"rl:[a-z_]+:\{[A-Za-z0-9.:_@~-]+\}:[0-9a-f]{8}(:[0-9]+)?", key), key
