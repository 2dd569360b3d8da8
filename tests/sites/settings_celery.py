"""Settings of the Celery workers ``tests/tasks/`` starts (``tests/tasks/celery_app.py``).

``DJANGO_RL_TEST_REDIS``: the URL of the suite's redis-server, where the
policies count (the broker is another server, ``DJANGO_RL_TEST_BROKER``).
"""

from __future__ import annotations

import os

from tests.sites.settings import *  # noqa: F403
from tests.support.redis_server import caches_for
from tests.tasks.policies import POLICIES

# No database in the workers: nothing here reads one.
DATABASES: dict[str, dict[str, str]] = {}
CACHES = caches_for(os.environ["DJANGO_RL_TEST_REDIS"])
DJANGO_RL = {"OVERRIDES": False, "POLICIES": POLICIES}
