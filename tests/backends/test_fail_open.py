"""Redis down, hung, loading or read-only: decisions follow FAIL_OPEN within one timeout."""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest
import redis
from django.test import Client, override_settings

from django_rl import get_policy
from django_rl.algorithms import sliding_log, token_bucket
from django_rl.backends import get_backend
from tests.conftest import point_caches_at
from tests.support.redis_server import RedisServer, caches_for, free_port


@pytest.fixture
def dead_port():
    return free_port()


def test_fail_open_allows_and_says_degraded(settings, dead_port):
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{dead_port}/0")):
        decision = get_policy("login").hit("ip:1")
    assert (decision.allowed, decision.degraded, decision.remaining) == (True, True, 5)


def test_fail_closed_denies_with_a_short_retry_after(settings, dead_port):
    settings.DJANGO_RL = {**settings.DJANGO_RL, "FAIL_OPEN": False}
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{dead_port}/0")):
        decision = get_policy("login").hit("ip:1")
        response = Client().get("/limited/")
        api = Client().get("/api/scoped/")
    assert (decision.allowed, decision.degraded, decision.retry_after) == (False, True, 1.0)
    assert (response.status_code, response["Retry-After"]) == (429, "1")
    assert (api.status_code, api["Retry-After"]) == (429, "1")


def test_one_warning_per_outage_and_one_line_when_back(settings, dead_port, caplog):
    caplog.set_level(logging.INFO, logger="django_rl")
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{dead_port}/0")):
        policy = get_policy("login")
        assert all(policy.hit("ip:1").degraded for _ in range(5))
        (record,) = caplog.records
        assert record.levelname == "WARNING"
        assert re.fullmatch(
            r"Redis for rate limiting \(CACHES\['default'\]\) is unavailable "
            r"\(ConnectionError: .*refused.*\); "
            r"decisions follow fail_open \(default FAIL_OPEN\) until it answers again\.",
            record.getMessage(),
        )
        server = RedisServer()
        server.start(port=dead_port)
        try:
            caplog.clear()
            decisions = [policy.hit("ip:1") for _ in range(3)]
        finally:
            server.close()
    assert [(d.allowed, d.degraded, d.remaining) for d in decisions] == [
        (True, False, 4),
        (True, False, 3),
        (True, False, 2),
    ]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "Redis for rate limiting (CACHES['default']) is back.")
    ]


def test_every_decision_redis_could_not_answer_is_counted_by_kind(settings, dead_port):
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{dead_port}/0")):
        policy = get_policy("login")
        assert [policy.hit(f"ip:{i}").degraded for i in range(5)] == [True] * 5
        assert dict(get_backend("default").health.errors) == {"connection": 5}


POLICIES = {
    "fixed_window": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"},
    "sliding_log": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
    "token_bucket": {"algorithm": "token_bucket", "capacity": 5, "rate": "5/m", "key": "ip"},
}
#: The socket timeout of the tests that time decisions against a hung Redis:
#: long enough that a margin for a busy machine still tells one timeout from
#: two (a retry).
HUNG_TIMEOUT = 0.5
#: What a decision may take beyond the socket timeout on a busy 2-core machine.
MARGIN = 0.45


@pytest.mark.parametrize(("default", "override"), [(True, False), (False, True)])
def test_a_policy_overrides_fail_open(settings, dead_port, default, override):
    settings.DJANGO_RL = {
        "FAIL_OPEN": default,
        "POLICIES": {
            "follows": POLICIES["sliding_log"],
            "overrides": {**POLICIES["sliding_log"], "fail_open": override},
        },
    }
    with override_settings(CACHES=caches_for(f"redis://127.0.0.1:{dead_port}/0")):
        follows = get_policy("follows").hit("ip:1")
        overrides = get_policy("overrides").hit("ip:1")
    assert (follows.allowed, follows.degraded) == (default, True)
    assert (overrides.allowed, overrides.degraded) == (override, True)


def timed_hit(policy, identity):
    started = time.monotonic()
    decision = policy.hit(identity)
    return decision, time.monotonic() - started


@pytest.mark.parametrize("name", list(POLICIES))
def test_a_hung_redis_costs_each_decision_one_socket_timeout(settings, private_redis, name):
    point_caches_at(settings, private_redis, HUNG_TIMEOUT)
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy(name)
    assert not policy.hit("ip:1").degraded  # connected, clock measured, script loaded
    private_redis.pause()
    try:
        # On the pooled connection, then on a new one (its handshake hangs).
        timed = [timed_hit(policy, "ip:1") for _ in range(2)]
    finally:
        private_redis.resume()
    assert [(d.allowed, d.degraded) for d, _ in timed] == [(True, True)] * 2
    # Each one waited for the timeout (the pause took), and only once.
    for _, elapsed in timed:
        assert HUNG_TIMEOUT * 0.9 <= elapsed <= HUNG_TIMEOUT + MARGIN
    assert not policy.hit("ip:2").degraded


def test_threads_of_a_fresh_process_do_not_queue_behind_a_hung_redis(settings, private_redis):
    # A fixed window needs the server clock first. With no offset measured
    # yet, every thread waits for one measurement; when it times out they
    # must all give up, not measure again one after another (8 timeouts).
    point_caches_at(settings, private_redis, HUNG_TIMEOUT)
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policy = get_policy("fixed_window")
    private_redis.pause()
    barrier = threading.Barrier(8)
    timed = [None] * 8

    def worker(index: int) -> None:
        barrier.wait()
        timed[index] = timed_hit(policy, f"ip:{index}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        private_redis.resume()
    assert [(d.allowed, d.degraded) for d, _ in timed] == [(True, True)] * 8
    assert max(elapsed for _, elapsed in timed) <= HUNG_TIMEOUT + MARGIN
    assert not policy.hit("ip:1").degraded


@pytest.mark.parametrize("fail_open", [True, False])
def test_a_loading_redis_is_an_outage_until_loaded(settings, private_redis, fail_open):
    point_caches_at(settings, private_redis, HUNG_TIMEOUT)
    settings.DJANGO_RL = {"FAIL_OPEN": fail_open, "POLICIES": POLICIES}
    policy = get_policy("sliding_log")
    assert policy.hit("ip:1").remaining == 4
    private_redis.save_filler()
    private_redis.restart_loading()
    decision, elapsed = timed_hit(policy, "ip:1")
    assert (decision.allowed, decision.degraded) == (fail_open, True)
    assert elapsed < HUNG_TIMEOUT * 0.9  # LOADING is an answer: no timeout to wait for
    private_redis.wait_until_answering()
    # The count was saved with the dataset and goes on; the script is loaded again.
    assert [policy.hit("ip:1").remaining for _ in range(2)] == [3, 2]


def rate_limiter_connections(client: redis.Redis) -> list[int]:
    """Return the ids of the connections the rate limiter holds (named by the URL)."""
    return [c["id"] for c in client.client_list() if c["name"].startswith("django_rl_")]


@pytest.mark.parametrize("fail_open", [True, False])
def test_a_replica_answering_readonly_fails_and_its_connection_is_dropped(
    settings, private_redis, fail_open
):
    settings.DJANGO_RL = {"FAIL_OPEN": fail_open, "POLICIES": POLICIES}
    policies = [get_policy(name) for name in POLICIES]
    assert [p.hit("ip:1").degraded for p in policies] == [False] * 3
    admin = private_redis.client()
    primary = RedisServer()
    primary.start()
    try:
        # This thread's kept connection: every decision goes over it, the
        # fixed window's MULTI/EXEC too.
        before = set(rate_limiter_connections(admin))
        assert len(before) == 1
        admin.replicaof("127.0.0.1", primary.port)  # demoted, as in a failover
        decisions = [p.hit("ip:1") for p in policies]
        assert [(d.allowed, d.degraded) for d in decisions] == [(fail_open, True)] * 3
        # Every connection opened before the demotion was closed: a READONLY
        # answer makes them all suspect (idle ones closed, kept ones replaced).
        assert before & set(rate_limiter_connections(admin)) == set()
        admin.replicaof("NO", "ONE")  # promoted again
        assert [p.hit("ip:2").remaining for p in policies] == [4, 4, 4]
    finally:
        admin.close()
        primary.close()


def test_hits_work_again_after_script_flush(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    policies = [get_policy("sliding_log"), get_policy("token_bucket")]
    assert [p.hit("ip:1").remaining for p in policies] == [4, 4]
    redis_client.script_flush()
    assert [p.hit("ip:1").remaining for p in policies] == [3, 3]
    # Reloaded by the hit that met NOSCRIPT (as EVAL, in the same round trip).
    assert redis_client.script_exists(sliding_log.SCRIPT.sha, token_bucket.SCRIPT.sha) == [
        True,
        True,
    ]
