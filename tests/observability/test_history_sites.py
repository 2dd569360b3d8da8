"""The history of a whole site: every topology, several processes (observability/history.py)."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
from django.test import override_settings

from django_rl import get_policy
from django_rl.observability import history
from tests.conftest import start_of_fresh_window
from tests.support import history_workers
from tests.support.redis_server import caches_for

#: Policies whose history keys fall in different slots of the test cluster.
POLICIES = {f"p{i}": {"algorithm": "fixed_window", "rate": "4/h", "key": "ip"} for i in range(8)}
POLICIES["shadowed"] = {"algorithm": "fixed_window", "rate": "2/h", "key": "ip", "mode": "shadow"}


def totals(answer, name):
    return [sum(answer["policies"][name][kind]) for kind in history.FIELDS]


def test_every_topology_gets_each_policy_s_counts_on_its_slot(topology, keyspace):
    with override_settings(CACHES=topology.caches(), DJANGO_RL={"POLICIES": POLICIES}):
        for i in range(8):
            for _ in range(i + 1):
                get_policy(f"p{i}").hit("ip:203.0.113.1")
        for _ in range(5):
            get_policy("shadowed").hit("ip:203.0.113.1")
        assert history.flush() is True  # an error reply (MOVED) would have put counts back
        answer = history.read()
    assert sorted(answer["policies"]) == sorted(POLICIES)
    for i in range(8):
        assert totals(answer, f"p{i}") == [min(i + 1, 4), max(i + 1 - 4, 0), 0]
    assert totals(answer, "shadowed") == [2, 0, 3]
    if topology.name == "cluster":
        # One pipeline per primary: the policies' keys are on several of them.
        holders = [c for c in topology.primaries() if any(c.scan_iter("rl:~history:{*"))]
        assert len(holders) > 1


def test_threads_count_exactly(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    decision = get_policy("p0").hit("ip:203.0.113.1")
    recorder = history.Recorder()
    recorder.autostart = False

    def count() -> None:
        for _ in range(5_000):
            recorder.record("p0", decision, "ip:203.0.113.1")

    threads = [threading.Thread(target=count) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert recorder.pending() == 40_000


@pytest.mark.slow
def test_several_processes_add_up_to_the_site(redis_server, redis_client):
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [
        context.Process(
            target=history_workers.decide_and_let_the_thread_write,
            args=(redis_server.url, POLICIES, "p1", 10, results),
        )
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(30)
    assert sum(allowed for allowed, _, _, _ in reports) == 4
    assert [pending for _, _, pending, _ in reports] == [0, 0, 0]
    assert all(flushes >= 1 for _, _, _, flushes in reports)
    # Each thread wrote within its interval (and a margin for a busy machine).
    assert max(seconds for _, seconds, _, _ in reports) < history.FLUSH_INTERVAL + 2
    # (This module's topology fixture may have left CACHES on another server.)
    with override_settings(CACHES=caches_for(redis_server.url), DJANGO_RL={"POLICIES": POLICIES}):
        answer = history.read(["p1"])
    assert totals(answer, "p1") == [4, 26, 0]
    assert answer["policies"]["p1"]["top"] == [["ip:192.0.2.99", 26]]
