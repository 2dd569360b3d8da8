"""``manage.py check`` asks the server: version, eviction, credentials, TLS, a trial decision.

Each misconfiguration is made for real on a private redis-server: an ACL
user without a command, a server that refuses ``TIME`` to scripts (an ACL
user without it stands in for the managed services that do), an evicting
``maxmemory-policy``, a wrong password, a certificate signed by another CA.
"""

from __future__ import annotations

import itertools

import pytest
from django.core.management import call_command

from django_rl.checks.acl import acl_rule
from django_rl.checks.server_checks import check_server
from tests.support.redis_server import RedisServer, caches_for
from tests.support.servers import Certificates

POLICIES = {
    "fw": {"algorithm": "fixed_window", "rate": "5/m"},
    "sl": {"algorithm": "sliding_log", "rate": "5/m"},
    "tb": {"algorithm": "token_bucket", "capacity": 5, "rate": "5/m"},
}
_names = itertools.count()


def messages() -> list[tuple[str, str]]:
    return [(m.id, m.msg) for m in check_server()]


def ids() -> list[str]:
    return [m.id for m in check_server()]


def connect_as(settings, server: RedisServer, url_head: str, **options) -> None:
    """Point CACHES at ``server`` through ``url_head`` (scheme, credentials, host, port)."""
    url = f"{url_head}/0?client_name=django_rl_check_{next(_names)}"
    settings.CACHES = caches_for(url, SOCKET_CONNECT_TIMEOUT=1, SOCKET_TIMEOUT=1, **options)


def with_user(settings, server: RedisServer, rule: str, **rl) -> None:
    """Give ``server`` a user ``checker`` with ``rule``, and make django_rl connect as it."""
    client = server.client()
    try:
        client.execute_command("ACL", "SETUSER", "checker", *rule.split(), ">secret")
    finally:
        client.close()
    connect_as(settings, server, f"redis://checker:secret@127.0.0.1:{server.port}")
    settings.DJANGO_RL = {"POLICIES": POLICIES, **rl}


def without(rule: str, command: str) -> str:
    return " ".join(part for part in rule.split() if part != f"+{command}")


def test_the_documented_acl_rule_passes_with_a_note_that_config_get_is_refused(
    settings, private_redis
):
    with_user(settings, private_redis, acl_rule())
    assert ids() == ["django_rl.I070"]
    note = check_server()[0]
    assert "does not let this connection read its maxmemory-policy (NoPermissionError" in note.msg
    assert "Make sure it is 'noeviction'" in note.hint


def test_with_config_get_granted_the_check_is_silent_and_leaves_no_key(settings, private_redis):
    with_user(settings, private_redis, acl_rule() + " +config|get")
    assert messages() == []
    admin = private_redis.client()
    assert admin.keys("*") == []
    admin.close()


def test_a_command_the_acl_user_lacks_is_named(settings, private_redis):
    with_user(settings, private_redis, without(acl_rule() + " +config|get", "pexpireat"))
    [(check_id, msg)] = messages()
    assert check_id == "django_rl.E071"
    assert msg.startswith(
        "Redis for rate limiting (CACHES['default']) refuses the fixed_window algorithm "
        "(policy 'fw') to this connection's ACL user, which lacks the command PEXPIREAT: "
    )


def test_a_command_a_script_lacks_is_named(settings, private_redis):
    with_user(settings, private_redis, without(acl_rule() + " +config|get", "zadd"))
    [(check_id, msg)] = messages()
    assert check_id == "django_rl.E071"
    assert "the sliding_log algorithm (policy 'sl')" in msg and "the command ZADD" in msg


def test_manage_py_check_fails_on_a_missing_permission(settings, private_redis):
    from django.core.management.base import SystemCheckError

    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    with_user(settings, private_redis, without(acl_rule() + " +config|get", "evalsha"))
    with pytest.raises(SystemCheckError) as info:
        call_command("check")
    text = str(info.value)
    assert "(django_rl.E071)" in text and "lacks the command EVALSHA" in text


def test_a_server_that_refuses_time_to_scripts_passes_with_clock_app(settings, private_redis):
    rule = without(acl_rule() + " +config|get", "time")
    with_user(settings, private_redis, rule)
    found = messages()
    # Every algorithm reads the server's clock: the scripts with TIME, the
    # fixed window's clock estimate too.
    assert [check_id for check_id, _ in found] == ["django_rl.E071"] * 3
    assert all("lacks the command TIME" in msg for _, msg in found)
    with_user(settings, private_redis, rule, CLOCK="app")
    assert messages() == []


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl", "allkeys-random"])
def test_an_eviction_policy_that_evicts_keys_with_a_ttl_is_a_warning(
    settings, private_redis, policy
):
    admin = private_redis.client()
    admin.config_set("maxmemory-policy", policy)
    admin.close()
    connect_as(settings, private_redis, f"redis://127.0.0.1:{private_redis.port}")
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    [warning] = check_server()
    assert warning.id == "django_rl.W070"
    assert warning.msg == (
        f"Redis for rate limiting (CACHES['default']) has maxmemory-policy {policy!r}, which "
        "evicts keys that have a TTL before they expire once maxmemory is reached: an evicted "
        "counter lets its client start again from zero (over-admission)"
    )


def test_noeviction_is_silent(settings, private_redis):
    connect_as(settings, private_redis, f"redis://127.0.0.1:{private_redis.port}")
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    assert messages() == []


def test_a_wrong_password_is_an_error(settings, private_redis):
    with_user(settings, private_redis, acl_rule())
    connect_as(settings, private_redis, f"redis://checker:wrong@127.0.0.1:{private_redis.port}")
    [(check_id, msg)] = messages()
    assert check_id == "django_rl.E072"
    assert msg.startswith(
        "Redis for rate limiting (CACHES['default']) refuses this connection's credentials "
        "(AuthenticationError: "
    )


def test_a_server_that_is_down_is_a_warning(settings, private_redis):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    private_redis.stop()
    [(check_id, msg)] = messages()
    assert check_id == "django_rl.W071"
    assert msg.startswith("Redis for rate limiting (CACHES['default']) could not be reached (")
    assert msg.endswith("its version, eviction policy and permissions were not checked")


@pytest.fixture(scope="module")
def certificates():
    made = Certificates()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def tls_redis(settings, certificates):
    server = RedisServer()
    server.tls = False  # started with TLS options of this test's own
    server.start(extra_args=certificates.server_args(tls_port := _tls_port()))
    server.tls_port = tls_port
    try:
        yield server
    finally:
        server.close()


def _tls_port() -> int:
    from tests.support.redis_server import free_port

    return free_port()


def test_tls_with_the_right_ca_and_password_passes(settings, tls_redis, certificates):
    with_user(settings, tls_redis, acl_rule() + " +config|get")
    connect_as(
        settings,
        tls_redis,
        f"rediss://checker:secret@127.0.0.1:{tls_redis.tls_port}",
        CONNECTION_POOL_KWARGS={"ssl_ca_certs": certificates.ca, "ssl_cert_reqs": "required"},
    )
    assert messages() == []


def test_a_certificate_of_another_ca_is_an_error(settings, tls_redis, certificates):
    with_user(settings, tls_redis, acl_rule())
    connect_as(
        settings,
        tls_redis,
        f"rediss://checker:secret@127.0.0.1:{tls_redis.tls_port}",
        CONNECTION_POOL_KWARGS={"ssl_ca_certs": certificates.other_ca, "ssl_cert_reqs": "required"},
    )
    [(check_id, msg)] = messages()
    assert check_id == "django_rl.E073"
    assert msg.startswith(
        "Redis for rate limiting (CACHES['default']) could not be reached over TLS (ConnectionError"
    )
    assert "certificate verify failed" in msg


def test_plain_redis_on_the_tls_port_is_an_error(settings, tls_redis):
    with_user(settings, tls_redis, acl_rule())
    connect_as(settings, tls_redis, f"redis://checker:secret@127.0.0.1:{tls_redis.tls_port}")
    check_id = ids()
    assert check_id in (["django_rl.E073"], ["django_rl.W071"])


def test_docs_give_the_rule_the_code_makes():
    from tests.support.servers import ROOT

    text = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
    assert f"ACL SETUSER django_rl {acl_rule('rl')} >PASSWORD" in text
    cluster = " +cluster|slots +cluster|shards +command"
    assert acl_rule("rl", cluster=True) == acl_rule("rl") + cluster


def test_static_and_per_plan_policies_are_not_tried_and_their_algorithm_is(settings, private_redis):
    # rate None and "0/<period>" keep no state, a rate function has no one rate:
    # the trial decision of their algorithm runs on a policy with a rate.
    connect_as(settings, private_redis, f"redis://127.0.0.1:{private_redis.port}")
    settings.DJANGO_RL = {
        "POLICIES": {
            "off": {"algorithm": "fixed_window", "rate": None},
            "closed": {"algorithm": "sliding_log", "rate": "0/m"},
            "plans": {
                "algorithm": "token_bucket",
                "capacity": 5,
                "rate": "tests.support.plans.exact_rate",
            },
            **POLICIES,
        }
    }
    before = private_redis.client().info("commandstats")
    assert [m for m in check_server() if m.id != "django_rl.I070"] == []
    after = private_redis.client().info("commandstats")
    assert after.get("cmdstat_evalsha", {}).get("calls", 0) > before.get("cmdstat_evalsha", {}).get(
        "calls", 0
    )
