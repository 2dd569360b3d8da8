"""Child processes of the reset-propagation tests (multiprocessing, spawn).

Each child sets Django up itself, pointed at the suite's redis-server, and
floods one identity whose limit is used up, answering from its own deny
cache, as a worker of a deployment would.
"""

from __future__ import annotations

import os
import time
from typing import Any


def flood_until_allowed(
    redis_url: str, policies: dict[str, Any], name: str, identity: str, ready: Any, go: Any,
    results: Any, seconds: float,
) -> None:  # fmt: skip
    """Flood ``identity`` from ``go`` on; report what the flood saw.

    Reports ``(hits, denied, token_reads, flood_started, last_denied,
    first_allowed)``: times are ``time.time()`` (one clock for every process
    of the host). ``last_denied`` is the start of the last denied hit before
    the first allowed one; the flood stops at the first allowed hit, or
    after ``seconds``.
    """
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import override_settings

    from django_rl import get_policy
    from tests.support.redis_server import caches_for

    # No overrides, no history: their reads and writes once a second (the
    # overrides' loader, the history's flush) would blur the count of commands.
    rl = {"POLICIES": policies, "OVERRIDES": False, "HISTORY": False}
    with override_settings(CACHES=caches_for(redis_url), DJANGO_RL=rl):
        policy = get_policy(name)
        # The first denial reads the reset token; the next ones are remembered.
        assert [policy.hit(identity).allowed for _ in range(2)] == [False, False]
        reads = policy.denials.token_reads
        ready.set()
        go.wait(30)
        hits = denied = 0
        started = time.time()
        last_denied = first_allowed = None
        end = started + seconds
        while True:
            at = time.time()
            if at >= end:
                break
            hits += 1
            if policy.hit(identity).allowed:
                first_allowed = at
                break
            denied += 1
            last_denied = at
        reads = policy.denials.token_reads - reads
    results.put((hits, denied, reads, started, last_denied, first_allowed))
