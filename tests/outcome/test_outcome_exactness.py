"""Exactness of ``count_when="failure"``: 16 threads in each of 3 processes on one login view.

Each process (``workers.py``) hits a login view limited by ``login``, 5 per
client address counting failures only, from 16 threads at once, with
failures and successes mixed, every request from one address; meanwhile
a client of another address logs in right, one request at a time, here.
Asserted, for every algorithm but ``concurrency``:

* never more than 5 failures let through (401s) in the window;
* once every request has ended, the policy's count (read from Redis) is
  exactly the failures let through: every success was given back;
* the honest client is never refused.

And with a limit of 1, a client whose requests all succeed one at a time
is never refused. Rates: ``sliding_log`` at 5/m (the login of the issue);
the others at 5/h, so that no window edge or refill falls inside a run.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.http import HttpResponse
from django.test import RequestFactory, override_settings

from django_rl import get_policy
from django_rl.decorators import ratelimit
from tests.conftest import start_of_fresh_window
from tests.outcome import workers
from tests.outcome.site import ALGORITHMS, spec
from tests.support import figures

pytestmark = pytest.mark.slow

HONEST = "192.0.2.10"


@pytest.fixture(scope="module")
def pool(redis_server: Any) -> Iterator[tuple[list[Any], Any]]:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers.PROCESSES)
    results = context.Queue()
    tasks = [context.Queue() for _ in range(workers.PROCESSES)]
    children = [
        context.Process(target=workers.serve, args=(redis_server.url, q, results, barrier))
        for q in tasks
    ]
    for child in children:
        child.start()
    try:
        assert [results.get(timeout=90) for _ in children] == ["ready"] * workers.PROCESSES
        yield tasks, results
    finally:
        for q in tasks:
            q.put(None)
        for child in children:
            child.join(60)
            if child.is_alive():
                child.kill()
                child.join()
    assert [child.exitcode for child in children] == [0] * workers.PROCESSES


def login_policy(algorithm: str) -> dict[str, Any]:
    rate = "5/m" if algorithm == "sliding_log" else "5/h"
    return spec(algorithm, rate, count_when="failure")


def login_view() -> Any:
    @ratelimit("login")
    def login(request: Any) -> HttpResponse:
        return HttpResponse("welcome")

    return login


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_never_more_failures_than_the_limit_and_the_count_is_exact(
    pool, redis_client, algorithm, pytestconfig
):
    tasks, results = pool
    policies = {"login": login_policy(algorithm)}
    if algorithm in ("fixed_window", "sliding_window"):
        start_of_fresh_window(redis_client, 3_600_000, 60_000)
    honest: list[int] = []
    done = threading.Event()
    with override_settings(DJANGO_RL={"POLICIES": policies}):
        view = login_view()

        def log_in_right() -> None:
            factory = RequestFactory()
            while not done.is_set():
                response = view(factory.post("/", REMOTE_ADDR=HONEST))
                response.close()
                honest.append(response.status_code)

        client = threading.Thread(target=log_in_right)
        client.start()
        try:
            for q in tasks:
                q.put((policies,))
            reports = [results.get(timeout=120) for _ in tasks]
        finally:
            done.set()
            client.join()
        statuses = Counter(s for report in reports for s in report[0])
        decision = get_policy("login").peek(f"ip:{workers.ATTACKER}")
    total = workers.THREADS * workers.PROCESSES * workers.ATTEMPTS
    assert sum(statuses.values()) == total
    assert set(statuses) <= {200, 401, 429}
    assert statuses[401] <= 5
    assert statuses[401] >= 1  # the race let some through
    # Every request has ended: what is counted is exactly the failures let through.
    assert decision.limit - decision.remaining == statuses[401]
    assert honest and set(honest) == {200}
    figures.record(
        pytestconfig,
        "count_when exactness",
        f"{algorithm}: {total} requests from 16 threads x 3 processes: "
        f"{statuses[401]} failures and {statuses[200]} successes let through, "
        f"{statuses[429]} refused; count after {decision.limit - decision.remaining}; "
        f"honest client {len(honest)} logins, none refused",
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_successes_one_at_a_time_are_never_refused(algorithm):
    with override_settings(DJANGO_RL={"POLICIES": {"login": spec(algorithm, "1/h")}}):

        @ratelimit("login", count_when="failure")
        def login(request: Any) -> HttpResponse:
            return HttpResponse("welcome")

        factory = RequestFactory()
        statuses = [login(factory.post("/", REMOTE_ADDR=HONEST)).status_code for _ in range(50)]
        assert set(statuses) == {200}
