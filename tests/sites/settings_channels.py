"""Settings of the site daphne and uvicorn serve in ``tests/websockets/test_websocket_server.py``.

``DJANGO_RL_TEST_REDIS``: the URL of the test's redis-server.
"""

from __future__ import annotations

import os

from tests.sites.settings import *  # noqa: F403
from tests.sites.ws_policies import POLICIES
from tests.support.redis_server import caches_for

ASGI_APPLICATION = "tests.sites.asgi_channels.application"
DATABASES: dict[str, dict[str, str]] = {}
CACHES = caches_for(os.environ["DJANGO_RL_TEST_REDIS"])
# Behind a proxy: the client says its address by X-Forwarded-For (each test client its own).
DJANGO_RL = {"POLICIES": POLICIES, "OVERRIDES": False, "NUM_PROXIES": 1}
