"""The example project as ``bench/endtoend.py`` serves it under gunicorn.

Its own settings, with DEBUG off and limits high enough that every request of
the run is allowed: the bench measures what the limiter costs a request that
gets through. ``REDIS_URL`` names the bench's own redis-server.
"""

from __future__ import annotations

from example_project.settings import *  # noqa: F403
from example_project.settings import DJANGO_RL

DEBUG = False
ROOT_URLCONF = "bench.e2e_urls"
DJANGO_RL = {
    **DJANGO_RL,
    "POLICIES": {
        **DJANGO_RL["POLICIES"],
        # The example's policies, at limits no run reaches.
        "api": {"algorithm": "fixed_window", "rate": "100000000/h", "key": "user_or_ip"},
        "burst": {
            "algorithm": "token_bucket",
            "capacity": 100_000_000,
            "rate": "100000000/h",
            "key": "ip",
        },
    },
}
