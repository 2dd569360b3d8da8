"""Settings of the processes the overrides tests spawn: a database file they share.

``DJANGO_RL_TEST_DB`` is the SQLite file (``none``: no database at all),
``DJANGO_RL_TEST_REDIS`` the URL of the test's redis-server.
"""

from __future__ import annotations

import os

from tests.sites.settings import *  # noqa: F403
from tests.support.redis_server import caches_for

_DB = os.environ["DJANGO_RL_TEST_DB"]
DATABASES = (
    {}
    if _DB == "none"
    else {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": _DB, "TEST": {"NAME": _DB}}}
)
CACHES = caches_for(os.environ["DJANGO_RL_TEST_REDIS"])
DJANGO_RL = {
    "POLICIES": {
        # Never denied by its count in a test: a denial is an override's.
        "big": {"algorithm": "fixed_window", "rate": "1000000/h", "key": "ip"},
        "small": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"},
    },
}
