"""``manage.py ratelimit``: policies, inspect, reset, top, and their errors."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_rl import get_policy
from django_rl.core.keys import safe_identity
from tests.conftest import start_of_fresh_window
from tests.support.redis_server import caches_for, free_port

ROOT = Path(__file__).resolve().parent.parent.parent
POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "10/h", "key": "ip"},
    "sl": {"algorithm": "sliding_log", "rate": "10/h", "key": "user_or_ip"},
    "tb": {"algorithm": "token_bucket", "capacity": 10, "rate": "10/h", "key": "ip"},
}


@pytest.fixture(autouse=True)
def policies(settings, redis_client):
    settings.DJANGO_RL = {"KEY_PREFIX": "t", "POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    return {name: get_policy(name) for name in POLICIES}


def ratelimit(*args: str) -> str:
    out = io.StringIO()
    call_command("ratelimit", *args, stdout=out)
    return out.getvalue()


def hit(name, identity, times=1):
    for _ in range(times):
        get_policy(name).hit(identity)


def test_policies_lists_every_policy(policies):
    fingerprints = {name: policy.fingerprint for name, policy in policies.items()}
    assert ratelimit("policies").splitlines() == [
        "KEY_PREFIX 't', CONNECTION 'default', FAIL_OPEN True",
        "policy  algorithm     limit  rate         key         fingerprint",
        f"fw      fixed_window     10  10/h         ip          {fingerprints['fw']}",
        f"sl      sliding_log      10  10/h         user_or_ip  {fingerprints['sl']}",
        f"tb      token_bucket     10  refill 10/h  ip          {fingerprints['tb']}",
    ]


def test_policies_shows_an_invalid_policy_and_goes_on(settings):
    settings.DJANGO_RL = {
        "POLICIES": {"bad": {"algorithm": "fixed_window", "rate": "5/mango"}, "ok": POLICIES["fw"]}
    }
    lines = ratelimit("policies").splitlines()
    assert lines[2].startswith("bad     invalid")
    assert "unknown period unit 'mango'" in lines[2] and "django_rl.E007" in lines[2]
    assert lines[3].startswith("ok      fixed_window     10  10/h")


def test_policies_shows_a_rate_of_thousands_of_digits_as_invalid(settings):
    settings.DJANGO_RL = {
        "POLICIES": {"bad": {"algorithm": "fixed_window", "rate": "9" * 5000 + "/m"}}
    }
    lines = ratelimit("policies").splitlines()
    assert lines[2].startswith("bad     invalid")
    assert f"rate '{'9' * 27}...{'9' * 26}/m' must allow at most 1,000,000,000" in lines[2]
    assert len(lines[2]) < 300


def test_policies_without_any(settings):
    settings.DJANGO_RL = {}
    assert ratelimit("policies").splitlines()[1] == (
        "No policies: define them in settings.DJANGO_RL['POLICIES']."
    )


def test_inspect_shows_the_decision_and_the_raw_keys(policies):
    hit("sl", "ip:10.0.0.1", 10)
    lines = ratelimit("inspect", "sl", "ip:10.0.0.1").splitlines()
    key = policies["sl"].key("ip:10.0.0.1")
    assert lines[:5] == [
        "policy       sl (sliding_log 10/h)",
        "identity     ip:10.0.0.1",
        "allowed      no",
        "limit        10",
        "remaining    0",
    ]
    # An hour from the hits, less the moments since (rounded up to the second).
    assert re.fullmatch(r"retry after  (1 h|59 min 5\d s)", lines[5])
    assert re.fullmatch(r"reset after  (1 h|59 min 5\d s)", lines[6])
    assert lines[7] == "keys"
    assert lines[8].split() == ["key", "type", "ttl", "value"]
    assert lines[9].split()[:2] == [key, "zset"]
    assert lines[9].split()[-2:] == ["10", "entries"]


def test_inspect_of_each_kind_of_state(policies):
    hit("fw", "ip:10.0.0.2", 3)
    hit("tb", "x-api-key:a b", 4)
    window = ratelimit("inspect", "fw", "ip:10.0.0.2").splitlines()
    assert window[4] == "remaining    7"
    assert window[-1].split()[1:2] == ["string"] and window[-1].split()[-1] == "3"
    digest = safe_identity("x-api-key:a b")
    for typed in ("x-api-key:a b", digest):  # raw, or as the admin page shows it
        bucket = ratelimit("inspect", "tb", typed).splitlines()
        assert bucket[1] == f"identity     {digest}"
        assert bucket[4] == "remaining    6"
        fields = bucket[-1].split()
        assert fields[:2] == [policies["tb"].key("x-api-key:a b"), "hash"]
        assert fields[-2].startswith("t=") and fields[-1].startswith("u=")


def test_inspect_an_identity_with_no_state():
    lines = ratelimit("inspect", "tb", "ip:10.0.0.3").splitlines()
    assert lines[2:] == [
        "allowed      yes",
        "limit        10",
        "remaining    10",
        "retry after  0 s",
        "reset after  0 s",
        "keys         none: no state under this policy",
    ]


def test_reset_one_policy(policies):
    hit("sl", "ip:10.0.0.4", 5)
    hit("fw", "ip:10.0.0.4", 5)
    assert ratelimit("reset", "sl", "ip:10.0.0.4") == (
        "Reset ip:10.0.0.4 under sl: 1 key deleted.\n"
    )
    assert policies["sl"].peek("ip:10.0.0.4").remaining == 10
    assert policies["fw"].peek("ip:10.0.0.4").remaining == 5
    assert ratelimit("reset", "sl", "ip:10.0.0.4") == (
        "Reset ip:10.0.0.4 under sl: 0 keys deleted.\n"
    )


def test_reset_all_policies(policies):
    for name in POLICIES:
        hit(name, "x-api-key:a b")
    hit("fw", "ip:10.0.0.5")
    digest = safe_identity("x-api-key:a b")
    assert ratelimit("reset", "--all-policies", digest).splitlines() == [
        "fw: 1 key deleted",
        "sl: 1 key deleted",
        "tb: 1 key deleted",
        f"Reset {digest} under 3 policies: 3 keys deleted.",
    ]
    assert policies["fw"].peek("ip:10.0.0.5").remaining == 9


def test_top_lists_the_heaviest_identities_first(redis_client):
    for i, hits in enumerate([3, 10, 7, 1]):
        hit("sl", f"ip:10.1.0.{i}", hits)
    hit("fw", "ip:10.1.0.9", 10)  # another policy: not listed
    redis_client.mset({f"other:{i}": 1 for i in range(200)})
    lines = ratelimit("top", "sl", "--count", "3").splitlines()
    assert [line.split()[:4] for line in lines[1:4]] == [
        ["ip:10.1.0.1", "10", "/", "10"],
        ["ip:10.1.0.2", "7", "/", "10"],
        ["ip:10.1.0.0", "3", "/", "10"],
    ]
    assert "denied, retry in" in lines[1] and "allowed" in lines[2]
    assert lines[4] == "Walked every key in Redis (205)."


def test_top_stops_at_its_budget_and_says_so(redis_client):
    redis_client.mset({f"other:{i}": 1 for i in range(3000)})
    hit("sl", "ip:10.1.0.1")
    lines = ratelimit("top", "sl", "--budget", "500").splitlines()
    assert lines[-1] == (
        "Stopped after SCAN looked at about 500 of 3,001 keys; pass --budget to look at more."
    )


def test_top_with_nothing_to_show():
    assert ratelimit("top", "tb").splitlines() == [
        "No live counters under tb.",
        "Walked every key in Redis (0).",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("inspect", "nope", "ip:1"), "No rate-limit policy named 'nope'. Known policies: 'fw',"),
        (("reset", "nope", "ip:1"), "No rate-limit policy named 'nope'."),
        (("top", "nope"), "No rate-limit policy named 'nope'."),
        (("reset", "sl"), "reset takes POLICY IDENTITY, or --all-policies IDENTITY"),
        (("reset", "--all-policies", "sl", "ip:1"), "reset --all-policies takes one IDENTITY"),
    ],
)
def test_errors_are_command_errors(args, message):
    with pytest.raises(CommandError) as info:
        ratelimit(*args)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    "args",
    [
        ("inspect", "sl", "ip:1"),
        ("reset", "sl", "ip:1"),
        ("reset", "--all-policies", "ip:1"),
        ("top", "sl"),
    ],
)
def test_redis_down_is_a_command_error(args):
    dead = caches_for(f"redis://127.0.0.1:{free_port()}/0")
    with (
        override_settings(CACHES=dead),
        pytest.raises(CommandError, match=r"^could not .*(refused|Connection)"),
    ):
        ratelimit(*args)


def test_errors_exit_with_status_1_and_a_message_on_stderr(redis_server):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.sites.settings",
        "PYTHONPATH": str(ROOT),
        "PYTHONWARNINGS": "error",
    }
    # tests.sites.settings points CACHES at a port where nothing listens.
    down = subprocess.run(
        [sys.executable, "-m", "django", "ratelimit", "inspect", "login", "ip:1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert down.returncode == 1
    assert down.stderr.splitlines()[-1].startswith("CommandError: could not read policy 'login': ")
    unknown = subprocess.run(
        [sys.executable, "-m", "django", "ratelimit", "top", "nope"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == (
        "CommandError: No rate-limit policy named 'nope'. Known policies: 'api', 'burst', "
        "'login', 'per_minute', 'writes'. Define it in settings.DJANGO_RL['POLICIES'] "
        "or with django_rl.register_policy().\n"
    )
