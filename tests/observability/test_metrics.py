"""Prometheus metrics: exact counts in one process, and across gunicorn workers.

Read back with prometheus_client itself: the registry's samples in process,
and a scrape of the metrics view parsed by ``prometheus_client.parser``
under gunicorn (multiprocess mode).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from django.http import HttpResponse
from django.test import RequestFactory
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from django_rl.decorators import ratelimit
from django_rl.observability.metrics import FLUSH_INTERVAL, metrics, metrics_view
from tests.conftest import start_of_fresh_window
from tests.support.redis_server import caches_for, free_port

ROOT = Path(__file__).resolve().parent.parent.parent
POLICIES = {
    "m-enforced": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"},
    "m-shadowed": {"algorithm": "gcra", "rate": "4/h", "burst": 4, "key": "ip", "mode": "shadow"},
    "m-fallback": {"algorithm": "sliding_log", "rate": "3/h", "key": "ip", "fallback_rate": "2/h"},
    "m-open": {"algorithm": "sliding_log", "rate": "3/h", "key": "ip"},
}


def sample(name: str, **labels: str) -> float:
    found = metrics()
    if found is not None:
        found.flush()  # the latencies this process has not yet put in the histogram
    return REGISTRY.get_sample_value(name, labels) or 0.0


def decisions(policy: str) -> dict[str, float]:
    results = ("allowed", "denied", "shadow_denied", "degraded_allowed", "degraded_denied")
    return {r: sample("django_rl_decisions_total", policy=policy, result=r) for r in results}


def ok(request):
    return HttpResponse("ok")


def hits(view, n, address="198.51.100.77"):
    factory = RequestFactory()
    return [view(factory.get("/", REMOTE_ADDR=address)).status_code for _ in range(n)]


@pytest.fixture(autouse=True)
def _policies(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


def test_each_decision_counts_once_under_its_result():
    before = {p: decisions(p) for p in ("m-enforced", "m-shadowed")}
    cache_before = sample("django_rl_deny_cache_answers_total", policy="m-enforced")
    latency_before = sample("django_rl_redis_seconds_count")
    assert hits(ratelimit("m-enforced")(ok), 7) == [200] * 3 + [429] * 4
    assert hits(ratelimit("m-shadowed")(ok), 6) == [200] * 6
    after = {p: decisions(p) for p in ("m-enforced", "m-shadowed")}
    delta = {p: {r: after[p][r] - before[p][r] for r in after[p]} for p in after}
    assert delta["m-enforced"] == {
        "allowed": 3,
        "denied": 4,
        "shadow_denied": 0,
        "degraded_allowed": 0,
        "degraded_denied": 0,
    }
    assert delta["m-shadowed"] == {
        "allowed": 4,
        "denied": 0,
        "shadow_denied": 2,
        "degraded_allowed": 0,
        "degraded_denied": 0,
    }
    # The process's first denial reads the reset token and is not remembered
    # (deny_cache.py); its second is: the deny cache answered the 6th and 7th.
    assert sample("django_rl_deny_cache_answers_total", policy="m-enforced") - cache_before == 2
    # 13 decisions, of which 2 (enforced) + 1 (shadowed: gcra's denial of cost
    # 1 is remembered, the token already read) came from the deny cache.
    assert sample("django_rl_redis_seconds_count") - latency_before == 13 - 2 - 1


def test_a_request_of_several_policies_counts_each_policys_decision_once():
    names = ("m-enforced", "m-shadowed", "m-open")
    before = {p: decisions(p) for p in names}
    view = ratelimit(*names)(ok)
    assert hits(view, 6, address="198.51.100.78") == [200] * 3 + [429] * 3
    after = {p: decisions(p) for p in names}
    delta = {p: {r: after[p][r] - before[p][r] for r in after[p] if after[p][r] != before[p][r]}
             for p in names}  # fmt: skip
    # From the 4th, m-enforced and m-open (3/h each) deny: nothing is
    # counted, m-shadowed only looks (4/h, 3 counted: it would allow).
    assert delta == {
        "m-enforced": {"allowed": 3, "denied": 3},
        "m-shadowed": {"allowed": 6},
        "m-open": {"allowed": 3, "denied": 3},
    }


def test_decisions_without_redis_count_as_degraded_and_errors_by_kind(settings):
    settings.CACHES = caches_for(
        f"redis://127.0.0.1:{free_port()}/0", SOCKET_CONNECT_TIMEOUT=0.2, SOCKET_TIMEOUT=0.2
    )
    before = {p: decisions(p) for p in ("m-fallback", "m-open")}
    errors_before = sample("django_rl_redis_errors_total", kind="connection")
    assert hits(ratelimit("m-fallback")(ok), 4) == [200, 200, 429, 429]
    assert hits(ratelimit("m-open")(ok), 3) == [200] * 3
    after = {p: decisions(p) for p in ("m-fallback", "m-open")}
    assert after["m-fallback"]["degraded_allowed"] - before["m-fallback"]["degraded_allowed"] == 2
    assert after["m-fallback"]["degraded_denied"] - before["m-fallback"]["degraded_denied"] == 2
    assert after["m-open"]["degraded_allowed"] - before["m-open"]["degraded_allowed"] == 3
    assert sample("django_rl_redis_errors_total", kind="connection") - errors_before == 7


def test_metrics_off_count_nothing(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "METRICS": False}
    before = decisions("m-enforced")
    hits(ratelimit("m-enforced")(ok), 5)
    assert decisions("m-enforced") == before
    assert metrics_view(RequestFactory().get("/metrics/")).status_code == 404


def test_the_view_serves_prometheus_text_with_no_identity_in_any_label():
    hits(ratelimit("m-enforced")(ok), 5, address="203.0.113.250")
    response = metrics_view(RequestFactory().get("/metrics/"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    text = response.content.decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {"django_rl_decisions", "django_rl_redis_seconds"} <= families.keys()
    assert "203.0.113.250" not in text
    labels = {
        k
        for f in families.values()
        if f.name.startswith("django_rl")
        for s in f.samples
        for k in s.labels
    }
    assert labels <= {"policy", "result", "kind", "le"}


# Under gunicorn, several workers ---------------------------------------------

WORKERS = 3


@pytest.fixture
def gunicorn_site(redis_server, tmp_path):
    """The site of tests/sites/metrics_site.py under gunicorn with 3 workers, in multiprocess
    mode."""
    yield from serve(redis_server, tmp_path, {})


@pytest.fixture
def gunicorn_site_decided_at_load(redis_server, tmp_path):
    """:func:`gunicorn_site`, whose master made one decision before forking its workers."""
    yield from serve(redis_server, tmp_path, {"METRICS_DECIDE_AT_LOAD": "1"})


def serve(redis_server, tmp_path, extra_env):
    port = free_port()
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.sites.metrics_site",
        "METRICS_REDIS_URL": redis_server.url,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "PYTHONPATH": str(ROOT),
        **extra_env,
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--workers",
            str(WORKERS),
            "--bind",
            f"127.0.0.1:{port}",
            "--chdir",
            str(ROOT),
            "--config",
            "python:django_rl.observability.gunicorn",
            "--preload",
            "tests.sites.metrics_wsgi:application",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(f"{base}/metrics/", timeout=1)
                break
            except requests.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(process.stderr.read().decode()[-2000:]) from None
                time.sleep(0.1)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


def answered_by_deny_caches(denials: list[tuple[str, str]]) -> int:
    """Return how many of ``denials`` (worker, policy), in order, each worker's deny cache answered.

    deny_cache.py: a process's first denial reads the reset token and is not
    remembered; every later one Redis gives is, and the hits after it on the
    same key are answered locally.
    """
    token_read: set[str] = set()
    remembered: set[tuple[str, str]] = set()
    answered = 0
    for worker, policy in denials:
        if (worker, policy) in remembered:
            answered += 1
        elif worker not in token_read:
            token_read.add(worker)
        else:
            remembered.add((worker, policy))
    return answered


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = requests.get(f"{base}/metrics/", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.slow
def test_every_workers_decisions_add_up_in_one_scrape(gunicorn_site, redis_client):
    # Three at once, each holding its worker for 0.5 s: they are served by
    # different workers (the app is loaded before the workers fork: all are up).
    with ThreadPoolExecutor(WORKERS) as pool:
        slow = list(
            pool.map(
                lambda _: requests.get(f"{gunicorn_site}/enforced/?sleep=0.5", timeout=5),
                range(WORKERS),
            )
        )
    assert len({r.headers["X-Worker"] for r in slow}) >= 2
    # Then one at a time, a new connection each.
    enforced = slow + [requests.get(f"{gunicorn_site}/enforced/", timeout=5) for _ in range(9)]
    shadowed = [requests.get(f"{gunicorn_site}/shadowed/", timeout=5) for _ in range(10)]
    assert [r.status_code for r in enforced] == [200] * 3 + [429] * 9
    assert [r.status_code for r in shadowed] == [200] * 10
    assert all("RateLimit-Policy" not in r.headers for r in shadowed)
    workers = Counter(r.headers["X-Worker"] for r in enforced + shadowed)
    denials = [(r.headers["X-Worker"], "enforced") for r in enforced[3:]]
    denials += [(r.headers["X-Worker"], "shadowed") for r in shadowed[4:]]
    # Each worker's daemon thread puts its pending latencies in the histogram
    # at least once a second (the scraped worker does it when scraped).
    time.sleep(FLUSH_INTERVAL + 0.5)
    values = scrape(gunicorn_site)

    def value(name, **labels):
        return values.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("django_rl_decisions_total", policy="enforced", result="allowed") == 3
    assert value("django_rl_decisions_total", policy="enforced", result="denied") == 9
    assert value("django_rl_decisions_total", policy="shadowed", result="allowed") == 4
    assert value("django_rl_decisions_total", policy="shadowed", result="shadow_denied") == 6
    answered_locally = value("django_rl_deny_cache_answers_total", policy="enforced") + value(
        "django_rl_deny_cache_answers_total", policy="shadowed"
    )
    assert answered_locally == answered_by_deny_caches(denials)
    assert value("django_rl_redis_seconds_count") == 22 - answered_locally
    assert sum(workers.values()) == 22


@pytest.mark.slow
def test_workers_forked_after_their_master_decided_count_without_a_scrape(
    gunicorn_site_decided_at_load, redis_client
):
    # The master (--preload) made one decision, so the workers were forked
    # from a process whose metrics were made: each must count (and flush,
    # once a second, without being scraped) its own, and not the master's.
    base = gunicorn_site_decided_at_load
    with ThreadPoolExecutor(WORKERS) as pool:
        held = list(
            pool.map(
                lambda _: requests.get(f"{base}/shadowed/?sleep=0.5", timeout=5), range(WORKERS)
            )
        )
    served = held + [requests.get(f"{base}/shadowed/", timeout=5) for _ in range(5)]
    assert [r.status_code for r in served] == [200] * 8
    assert len({r.headers["X-Worker"] for r in served}) >= 2
    time.sleep(FLUSH_INTERVAL + 1.0)
    values = scrape(base)

    def value(name, **labels):
        return values.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("django_rl_decisions_total", policy="enforced", result="allowed") == 1
    assert value("django_rl_decisions_total", policy="shadowed", result="allowed") == 4
    assert value("django_rl_decisions_total", policy="shadowed", result="shadow_denied") == 4
