"""Code the django-ratelimit drop-in's exactness test runs in child processes (spawn)."""

from __future__ import annotations

import os
import time
from typing import Any

#: The limit of every round: 100 an hour, so no window edge falls in a round.
RATE = "100/h"
GROUP = "exactness"


def hit(identity: str) -> bool:
    """Call ``is_ratelimited(increment=True)`` for ``identity``; return whether it was allowed."""
    from django.test import RequestFactory

    from django_rl.contrib.ratelimit.core import is_ratelimited

    request = RequestFactory().get("/", HTTP_X_CLIENT=identity)
    return not is_ratelimited(
        request, group=GROUP, key="header:x-client", rate=RATE, increment=True
    )


def serve_rounds(caches: dict[str, Any], tasks: Any, results: Any, start: Any) -> None:
    """Hit the drop-in in rounds, one per task ``(identity, attempts)``, until ``None``.

    Reports ``(allowed, wall-clock start, end)`` of each round; every round
    waits on ``start``, a barrier shared with the other processes and the
    parent's threads.
    """
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sites.settings"
    import django

    django.setup()
    from django.test import override_settings

    with override_settings(CACHES=caches):
        hit("warm-up")  # connect, measure the clock, record the rate
        results.put("ready")
        while (task := tasks.get()) is not None:
            identity, attempts = task
            start.wait(60)
            began = time.time()
            allowed = sum(hit(identity) for _ in range(attempts))
            results.put((allowed, began, time.time()))
