"""Django settings of the decision benchmarks. ``BENCH_REDIS_URL`` names the
bench's own redis-server (``decisions.py`` starts it and sets the variable).

Every limiter talks to that server through redis-py with the same socket
timeouts, so no one pays for options another does not have.
"""

from __future__ import annotations

import os

from bench.limiters import ALGORITHMS, policy_name
from tests.support.redis_server import caches_for

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:1/0")
#: The socket timeouts ``caches_for`` gives django-redis, given to every peer too.
SOCKET_TIMEOUT = 1.0

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "rest_framework",
    "django_rl",
]
# In memory, shared by this process's threads (":memory:" would give each
# connection a database of its own, and the overrides loader's thread, which
# reads the overrides table, an empty one). bench/runner.py migrates it.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": "file:django_rl_bench?mode=memory&cache=shared",
    }
}

CACHES = {
    **caches_for(REDIS_URL),
    # Where nothing listens (port 1: refused at once): the fallback bench's outage.
    "dead": caches_for("redis://127.0.0.1:1/0?client_name=dead")["default"],
}

#: The limits every limiter is measured at: a large one for the speed table
#: (every decision allowed), 100 for memory and over-admission.
LIMITS = (100, 1_000_000)


def _policy(algorithm: str, limit: int) -> dict[str, object]:
    spec: dict[str, object] = {"algorithm": algorithm, "rate": f"{limit}/h", "key": "ip"}
    if algorithm == "token_bucket":
        spec["capacity"] = limit
    if algorithm == "gcra":
        spec["burst"] = limit
    return spec


DJANGO_RL = {
    "POLICIES": {
        policy_name(algorithm, limit): _policy(algorithm, limit)
        for algorithm in ALGORITHMS
        for limit in LIMITS
    },
}
# The flood's policies (bench/flood.py): 100 a year, so that no token comes
# back, no entry leaves the log and no window ends during a long flood on a
# loaded machine (at 100/h a token bucket gives one back every 36 s).
for _algorithm in ALGORITHMS:
    DJANGO_RL["POLICIES"][f"{policy_name(_algorithm, 100)}-flood"] = {
        **_policy(_algorithm, 100),
        "rate": "100/365d",
    }
# The twin of fw-1000000 in shadow mode (bench/observability.py).
DJANGO_RL["POLICIES"]["fw-1000000-shadow"] = {
    **_policy("fixed_window", 1_000_000),
    "mode": "shadow",
}
# The twin of fw-1000000 that has overrides in force (bench/overrides.py).
DJANGO_RL["POLICIES"]["fw-1000000-overrides"] = _policy("fixed_window", 1_000_000)

# Each algorithm's twin with block_for and escalate (bench/blocks.py).
for _algorithm in ALGORITHMS:
    DJANGO_RL["POLICIES"][f"{policy_name(_algorithm, 1_000_000)}-blocks"] = {
        **_policy(_algorithm, 1_000_000),
        "block_for": "15m",
        "escalate": {"after": 3, "within": "1h", "block_for": "1d"},
    }

REST_FRAMEWORK = {"DEFAULT_THROTTLE_CLASSES": []}

# django-ratelimit: on the same django-redis cache, under its own prefix.
RATELIMIT_USE_CACHE = "default"
RATELIMIT_CACHE_PREFIX = "drl:"

# django-smart-ratelimit: its Redis backend, its default sliding window.
RATELIMIT_BACKEND = "redis"
RATELIMIT_REDIS = {
    "url": REDIS_URL,
    "socket_timeout": SOCKET_TIMEOUT,
    "socket_connect_timeout": SOCKET_TIMEOUT,
}
RATELIMIT_KEY_PREFIX = "srl:"
