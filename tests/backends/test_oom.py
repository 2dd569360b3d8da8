"""Redis at ``maxmemory`` (OOM, noeviction): an error reply of a live server, not an outage.

Writes fail while reads, and scripts whose first write is not one that grows
memory, still succeed. Were each failure an outage and each success its end,
the state would flap: a log line and a new connection per thread at every
"back", and a failed MULTI would drop its connection too (the audit measured
18,700 new connections and 7,000 log lines in 10 s). Here four threads decide
through 3 s of OOM on one process: the connections are kept, one warning is
logged, each failed decision is counted, and counting is exact again the
moment memory frees.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter

import pytest
import redis
from django.test import Client

from django_rl import get_policy
from django_rl.backends import get_backend
from tests.conftest import point_caches_at
from tests.support import figures

pytestmark = [pytest.mark.slow, pytest.mark.faults]

POLICIES = {
    "per_minute": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"},
    "log": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
    # Fails closed: a decision Redis cannot count is a 429.
    "bucket": {
        "algorithm": "token_bucket",
        "capacity": 5,
        "rate": "5/m",
        "key": "ip",
        "fail_open": False,
    },
}
FAIL_OPEN = {"per_minute": True, "log": True, "bucket": False}
#: The views of tests/sites/urls_faults.py of the policies whose every hit writes
#: before it reads (MULTI's INCRBY; the bucket's HSET): under OOM each fails.
FAILING_URLS = {
    "/window/": 200,
    "/window-async/": 200,
    "/window-class/": 200,
    "/api/window/": 200,
    "/bucket/": 429,
    "/api/bucket/": 429,
}
THREADS = 4
OOM_SECONDS = 3.0
#: Socket timeouts long enough that a busy machine never makes a timeout (an
#: outage, which replaces connections): this test is about error replies.
TIMEOUT = 2.0
SECTION = f"Redis at maxmemory ({THREADS} threads deciding through {OOM_SECONDS:g} s of OOM)"


def connections_received(admin) -> int:
    """Return the TCP connections the server has accepted since it started (its own count)."""
    return int(admin.info("stats")["total_connections_received"])


def fill_then_cap(admin) -> None:
    """Fill some memory, then cap ``maxmemory`` below what is used: writes answer OOM."""
    pipe = admin.pipeline(transaction=False)
    for i in range(2000):
        pipe.set(f"filler:{i}", "x" * 500)
    pipe.execute()
    admin.config_set("maxmemory-policy", "noeviction")
    used = int(admin.info("memory")["used_memory"])
    admin.config_set("maxmemory", used // 2)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        admin.set("probe", "1")


def lines_on_django_rl(caplog) -> list[logging.LogRecord]:
    """Return the log records of logger ``django_rl`` and its children, denial lines aside."""
    return [
        r
        for r in caplog.records
        if (r.name == "django_rl" or r.name.startswith("django_rl."))
        and not r.name.startswith("django_rl.denials")
    ]


def test_four_threads_through_three_seconds_of_oom(request, settings, private_redis, caplog):
    point_caches_at(settings, private_redis, TIMEOUT)
    settings.ROOT_URLCONF = "tests.sites.urls_faults"
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    caplog.set_level(logging.INFO, logger="django_rl")
    policies = {name: get_policy(name) for name in POLICIES}
    health = get_backend("default").health
    admin = private_redis.client()
    ready, go = threading.Barrier(THREADS + 1), threading.Barrier(THREADS + 1)
    stop = threading.Event()
    decisions: list[list[tuple[str, object]]] = [[] for _ in range(THREADS)]

    def decide(index: int) -> None:
        for policy in policies.values():
            policy.hit(f"ip:10.{index}.255.1")  # connected, clock measured, scripts loaded
        ready.wait(10)
        go.wait(10)
        sent = 0
        while not stop.is_set():
            name = list(POLICIES)[sent % 3]
            # A new identity every 8 hits of each policy: some are denied.
            identity = f"ip:10.{index}.{sent // 24 % 250}.{sent // 6000}"
            decisions[index].append((name, policies[name].hit(identity)))
            sent += 1

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    http = Client(raise_request_exception=False)  # a crash would be a 500
    try:
        for policy in policies.values():
            policy.hit("ip:10.255.255.1")  # this thread's connection, for the HTTP checks
        ready.wait(10)
        before = connections_received(admin)
        fill_then_cap(admin)
        go.wait(10)
        time.sleep(OOM_SECONDS)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    made = [d for per_thread in decisions for d in per_thread]
    failed_in_threads = dict(health.errors)
    # Through the HTTP stack, still at maxmemory: no 500, each policy per its fail_open.
    answers = {url: http.get(url, REMOTE_ADDR="10.255.255.2") for url in FAILING_URLS}
    failed_in_all = dict(health.errors)
    new_connections = connections_received(admin) - before
    lines = lines_on_django_rl(caplog)

    # Memory frees: the very next hits are counted exactly.
    admin.config_set("maxmemory", 0)
    after = {
        name: [(d.allowed, d.degraded) for d in (p.hit("ip:192.0.2.77") for _ in range(7))]
        for name, p in policies.items()
    }
    admin.close()

    degraded = Counter(name for name, d in made if d.degraded)
    figures.record(
        request.config,
        SECTION,
        f"{len(made):,} decisions ({', '.join(f'{n}: {degraded[n]:,} failed' for n in POLICIES)}); "
        f"{new_connections} new TCP connections; {len(lines)} lines on logger django_rl",
    )
    assert new_connections == 0
    (line,) = lines
    assert line.levelname == "WARNING"
    # The server's message ends with the script's name when a script met it first.
    assert re.fullmatch(
        r"Redis for rate limiting \(CACHES\['default'\]\) is out of memory \(OutOfMemoryError: "
        r"command not allowed when used memory > 'maxmemory'\.( script: .*)?\); decisions it "
        r"cannot answer follow fail_open, and each asks it again\. Raise its maxmemory or free "
        r"memory\. Logged once per incident: until a call succeeds 1 s or more after the last "
        r"such error\.",
        line.getMessage(),
    )
    assert (health.outages, health.down) == (0, False)
    # Every decision Redis could not count followed its policy's fail_open...
    for name, decision in made:
        if decision.degraded:
            assert decision.allowed is FAIL_OPEN[name]
            assert decision.retry_after == (0.0 if FAIL_OPEN[name] else 1.0)
    # ...a fixed window's MULTI always fails at maxmemory (the server refuses
    # to queue anything), and each failed decision was counted, by kind.
    assert degraded["per_minute"] == sum(name == "per_minute" for name, _ in made) > 0
    assert failed_in_threads == {"oom": sum(degraded.values())}
    assert {url: r.status_code for url, r in answers.items()} == FAILING_URLS
    assert answers["/bucket/"]["Retry-After"] == "1"
    assert failed_in_all == {"oom": sum(degraded.values()) + len(FAILING_URLS)}
    assert after == {name: [(True, False)] * 5 + [(False, False)] * 2 for name in POLICIES}
