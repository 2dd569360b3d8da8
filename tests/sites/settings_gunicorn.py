"""Settings of the site ``tests/policies/test_fallback_gunicorn.py`` serves under gunicorn.

One policy with a ``fallback_rate``, behind a decorated view and a DRF view
(``tests/sites/urls_gunicorn.py``). The environment names what the test started:

``DJANGO_RL_TEST_REDIS``
    the URL of the test's redis-server (or of the proxy in front of it);
``DJANGO_RL_TEST_TIMEOUT``
    the socket timeouts (seconds) of the connection to it;
``DJANGO_RL_TEST_LOG``
    a file every worker appends the ``django_rl`` log lines to (its child
    loggers' too, such as the denials'), each with its pid and logger, so
    the test can read each process's outage lines.
"""

from __future__ import annotations

import os

from tests.sites.settings import *  # noqa: F403
from tests.sites.settings import MIDDLEWARE
from tests.support.gunicorn_server import FALLBACK, LIMIT
from tests.support.redis_server import caches_for

ROOT_URLCONF = "tests.sites.urls_gunicorn"
# Outermost: it sees the 429s the front doors answer, as well as the 200s.
MIDDLEWARE = ["tests.sites.urls_gunicorn.decided_by", *MIDDLEWARE]
# No database in the workers: nothing here reads one.
DATABASES: dict[str, dict[str, str]] = {}
_TIMEOUT = float(os.environ["DJANGO_RL_TEST_TIMEOUT"])
CACHES = caches_for(
    os.environ["DJANGO_RL_TEST_REDIS"], SOCKET_CONNECT_TIMEOUT=_TIMEOUT, SOCKET_TIMEOUT=_TIMEOUT
)
DJANGO_RL = {
    # Every request must reach the limiter (Redis or the fallback): with the
    # deny cache, a client Redis denied would be answered from memory, and
    # the fault would never be seen for it.
    "DENY_CACHE_SIZE": 0,
    # No loader thread reading the overrides' marker in Redis: only the
    # decisions the test makes talk to Redis (and there is no database).
    "OVERRIDES": False,
    # The client address comes from X-Real-IP, as behind a proxy: every
    # request of the test comes from 127.0.0.1.
    "IP_META_KEY": "HTTP_X_REAL_IP",
    "POLICIES": {
        "login": {
            "algorithm": "sliding_log",
            "rate": f"{LIMIT}/h",
            "key": "ip",
            "fallback_rate": f"{FALLBACK}/h",
        },
    },
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"pid": {"format": "%(process)d %(name)s %(levelname)s %(message)s"}},
    "handlers": {
        "file": {
            "class": "logging.FileHandler",
            "filename": os.environ["DJANGO_RL_TEST_LOG"],
            "formatter": "pid",
        }
    },
    "loggers": {"django_rl": {"handlers": ["file"], "level": "INFO", "propagate": False}},
}
