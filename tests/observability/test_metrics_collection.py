"""Who sees the metrics, and when: any collection of the registry, forked children, no package.

* Any collection of prometheus_client's default registry (``get_sample_value``,
  ``generate_latest``, ``make_wsgi_app``) sees every decision made before it,
  with no wait for the flush thread and no call of django_rl's own.
* A child forked (a real ``os.fork()``) after its parent decided puts its
  own decisions in the metrics within about a second without any
  collection, and never waits on a lock held in the parent at the fork.
* ``metrics_view`` without prometheus_client says the package is missing
  and how to install it (a subprocess where it cannot be imported).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import pytest
from django.http import HttpResponse
from django.test import RequestFactory
from prometheus_client import REGISTRY, generate_latest, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

from django_rl.decorators import ratelimit
from django_rl.observability.metrics import metrics
from tests.conftest import start_of_fresh_window

ROOT = Path(__file__).resolve().parent.parent.parent
POLICY = {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"}


@pytest.fixture(autouse=True)
def _policies(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": {"c-one": POLICY, "c-fork": POLICY, "c-held": POLICY}}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)


def ok(request):
    return HttpResponse("ok")


def hits(policy: str, n: int, address: str) -> list[int]:
    view = ratelimit(policy)(ok)
    return [view(RequestFactory().get("/", REMOTE_ADDR=address)).status_code for _ in range(n)]


def registry_value(policy: str, result: str) -> float:
    labels = {"policy": policy, "result": result}
    return REGISTRY.get_sample_value("django_rl_decisions_total", labels) or 0.0


def exposition_value(text: str, policy: str, result: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "django_rl_decisions_total" and s.labels == {
                "policy": policy,
                "result": result,
            }:
                return s.value
    return 0.0


def scrape_wsgi() -> str:
    """Return what prometheus_client's own WSGI exporter serves."""
    environ: dict[str, object] = {}
    setup_testing_defaults(environ)
    answer: list[str] = []
    body = make_wsgi_app()(environ, lambda status, headers: answer.append(status))
    assert answer == ["200 OK"]
    return b"".join(body).decode()


def test_any_collection_sees_every_decision_made_before_it():
    before = (registry_value("c-one", "allowed"), registry_value("c-one", "denied"))
    assert hits("c-one", 5, "198.51.100.1") == [200] * 3 + [429] * 2
    # At once, without a flush of our own: the flush thread's second is not waited for.
    assert registry_value("c-one", "allowed") - before[0] == 3
    assert registry_value("c-one", "denied") - before[1] == 2
    assert hits("c-one", 1, "198.51.100.1") == [429]
    assert exposition_value(generate_latest(REGISTRY).decode(), "c-one", "denied") == before[1] + 3
    assert hits("c-one", 1, "198.51.100.1") == [429]
    assert exposition_value(scrape_wsgi(), "c-one", "denied") == before[1] + 4


# --- forks -----------------------------------------------------------------


def in_child(work, timeout: float = 10.0) -> object:
    """Run ``work()`` in a child made by ``os.fork()``; return what it returned (JSON).

    The child exits with ``os._exit`` (no test teardown in it). A child that
    has not answered within ``timeout`` seconds is killed and the test fails.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        status = 0
        try:
            answer = json.dumps({"value": work()})
        except BaseException as exc:  # reported to the parent
            answer = json.dumps({"error": repr(exc)})
            status = 1
        os.write(write_end, answer.encode())
        os._exit(status)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], timeout)
        if not ready:
            os.kill(pid, 9)
            raise AssertionError(f"the forked child did not answer within {timeout} s")
        data = b""
        while chunk := os.read(read_end, 65536):
            data += chunk
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    answer = json.loads(data)
    assert "error" not in answer, answer["error"]
    return answer["value"]


def counter_value(policy: str, result: str) -> float:
    """The counter's own value: no collection, so nothing is flushed by reading it."""
    found = metrics()
    assert found is not None
    return float(found.decisions.labels(policy, result)._value.get())


def wait_for_counter(policy: str, result: str, expected: float, within: float) -> list[float]:
    """Poll the counter until it reads ``expected`` or ``within`` s pass; ``[value, seconds]``."""
    began = time.monotonic()
    while True:
        value = counter_value(policy, result)
        if value == expected or time.monotonic() - began > within:
            return [value, time.monotonic() - began]
        time.sleep(0.02)


def test_a_forked_childs_decisions_reach_the_metrics_within_a_second():
    assert hits("c-fork", 1, "198.51.100.2") == [200]
    parent = registry_value("c-fork", "allowed")  # a collection: the parent's 1 is in

    def child():
        assert hits("c-fork", 2, "198.51.100.2") == [200, 200]
        return wait_for_counter("c-fork", "allowed", parent + 2, within=3.0)

    value, seconds = in_child(child)
    assert value == parent + 2
    assert seconds < 2.0  # the flush thread's second, with a margin for a busy machine


def test_pending_counts_at_the_fork_are_counted_once_by_the_parent():
    base = registry_value("c-fork", "allowed")
    assert hits("c-fork", 2, "198.51.100.3") == [200, 200]  # pending in the parent at the fork

    def child():
        # What the parent had flushed at the fork: base, or base + 2 if its
        # thread flushed in between; never its pending counts on top.
        inherited = counter_value("c-fork", "allowed")
        assert hits("c-fork", 1, "198.51.100.3") == [200]
        return [inherited, *wait_for_counter("c-fork", "allowed", inherited + 1, within=3.0)]

    inherited, value, _ = in_child(child)
    assert inherited in (base, base + 2)
    assert value == inherited + 1
    assert registry_value("c-fork", "allowed") == base + 2  # the parent counts its own, once


@pytest.mark.parametrize("lock", ["counting", "_lock", "_flushing", "pending"])
def test_a_child_never_waits_on_a_lock_held_at_the_fork(lock):
    assert hits("c-held", 1, "198.51.100.4") == [200]
    found = metrics()
    assert found is not None
    base = registry_value("c-held", "allowed")
    held = found.pending._lock if lock == "pending" else getattr(found, lock)
    taken, release = threading.Event(), threading.Event()

    def hold():
        with held:
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        assert taken.wait(5)

        def child():
            assert hits("c-held", 2, "198.51.100.4") == [200, 200]
            return wait_for_counter("c-held", "allowed", base + 2, within=3.0)

        value, _ = in_child(child)
    finally:
        release.set()
        holder.join(5)
    assert value == base + 2


# --- without prometheus_client ---------------------------------------------

WITHOUT_PROMETHEUS = """
import sys
sys.modules["prometheus_client"] = None  # import prometheus_client raises ImportError
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django_rl"],
    DJANGO_RL={"METRICS": METRICS},
    SECRET_KEY="x",
    ALLOWED_HOSTS=["*"],
)
django.setup()
from django.test import RequestFactory
from django_rl.observability.metrics import metrics_view
response = metrics_view(RequestFactory().get("/metrics/"))
print(response.status_code)
print(response.content.decode())
"""


@pytest.mark.parametrize("on", [True, False])
def test_the_view_says_why_there_are_no_metrics(on):
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PROMETHEUS.replace("METRICS}", f"{on}}}")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status, text = done.stdout.split("\n", 1)
    assert status == "404"
    if on:
        assert "prometheus_client is not installed" in text
        assert "pip install prometheus_client" in text
        assert "`prometheus` extra" in text
        assert "off" not in text
    else:
        assert 'DJANGO_RL["METRICS"] is False' in text


RELOADED = """
import importlib
import sys
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["django_rl"], SECRET_KEY="x", ALLOWED_HOSTS=["*"])
django.setup()
from django.test import RequestFactory
from django_rl.observability import metrics
metrics.count_result("@reloaded", "allowed")
real = sys.modules["prometheus_client"]
sys.modules["prometheus_client"] = None  # hidden, as a test of the view without it does
importlib.reload(metrics)
print(metrics.metrics_view(RequestFactory().get("/metrics/")).status_code)
sys.modules["prometheus_client"] = real
importlib.reload(metrics)
metrics.count_result("@reloaded", "allowed")
metrics.count_result("@reloaded", "allowed")
labels = {"policy": "@reloaded", "result": "allowed"}
print(real.REGISTRY.get_sample_value("django_rl_decisions_total", labels))
print(metrics.metrics_view(RequestFactory().get("/metrics/")).status_code)
"""


def test_a_reloaded_metrics_module_counts_again():
    # A test that hides prometheus_client and reloads the module, then
    # brings it back: the new metrics replace the old ones in the registry
    # (prometheus_client refuses two of one name), and decisions count.
    done = subprocess.run(
        [sys.executable, "-c", RELOADED],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["404", "2.0", "200"]
    assert "could not be made" not in done.stderr
