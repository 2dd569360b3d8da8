"""A real HTTP client that honours Retry-After never retries early or too often.

``requests`` with urllib3's ``Retry(status_forcelist=[429],
respect_retry_after_header=True)`` against pytest-django's live server: five
requests to a 2-per-second view all succeed, each 429 costs exactly one
retry, and the client's waits are exactly the Retry-After it was sent.
"""

from __future__ import annotations

import time

import pytest
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from tests.conftest import server_ms, sleep_until
from tests.support.sf_headers import policies, ratelimit

pytestmark = [pytest.mark.urls("tests.sites.urls_http"), pytest.mark.slow]

#: A retry may start this late after its Retry-After on a busy machine.
SLACK = 0.3


def test_five_requests_at_two_per_second_wait_exactly_retry_after(
    live_server, settings, redis_client
):
    settings.DJANGO_RL = {
        "POLICIES": {"single": {"algorithm": "fixed_window", "rate": "2/s", "key": "ip"}}
    }
    waits = []  # (Retry-After sent, seconds the client slept)

    class RecordingRetry(Retry):
        def sleep_for_retry(self, response):
            retry_after = self.get_retry_after(response)
            start = time.monotonic()
            slept = super().sleep_for_retry(response)
            waits.append((response.status, retry_after, time.monotonic() - start))
            return slept

    retry = RecordingRetry(
        total=10, status_forcelist=[429], respect_retry_after_header=True, backoff_factor=0
    )
    session = requests.Session()
    session.mount("http://", HTTPAdapter(max_retries=retry))
    url = f"{live_server.url}/single/"
    session.get(f"{live_server.url}/plain-async/")  # connect and warm up, not limited

    # Start 30 ms into a fresh 1 s window of the Redis clock: requests 1-2 are
    # allowed and 3 denied in it; the retry of 3 and request 4 share the next
    # window, 5 is denied, and its retry opens a third.
    now = server_ms(redis_client)
    sleep_until(redis_client, now - now % 1000 + 1030)
    start = time.monotonic()
    try:
        responses = [session.get(url, timeout=10) for _ in range(5)]
    finally:
        session.close()
    elapsed = time.monotonic() - start

    assert [r.status_code for r in responses] == [200] * 5
    # Exactly one retry per 429, each told to wait 1 s (the rest of a window
    # under 1 s, rounded up) and each waiting just that.
    assert [(status, retry_after) for status, retry_after, _ in waits] == [(429, 1), (429, 1)]
    assert all(1.0 <= slept < 1.0 + SLACK for _, _, slept in waits)
    history = [len(r.raw.retries.history) for r in responses]
    assert history == [0, 0, 1, 0, 1]
    assert all(h.status == 429 for r in responses for h in r.raw.retries.history)
    # The whole run: the two waits and five quick requests, no early retries.
    assert 2.0 <= elapsed < 2.0 + 2 * SLACK
    # The headers the client saw say the same as the server's Decisions did.
    assert policies(responses[0].headers) == {"single": {"q": 2, "w": 1}}
    assert [ratelimit(r.headers) for r in responses] == [
        ("single", {"r": 1, "t": 1}),
        ("single", {"r": 0, "t": 1}),
        ("single", {"r": 1, "t": 1}),
        ("single", {"r": 0, "t": 1}),
        ("single", {"r": 1, "t": 1}),
    ]
