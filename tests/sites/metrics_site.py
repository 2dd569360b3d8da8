"""Settings of a small site for the metrics test under gunicorn
(``tests/observability/test_metrics.py``).

``DJANGO_SETTINGS_MODULE=tests.sites.metrics_site`` and ``METRICS_REDIS_URL`` (the
test's redis-server); gunicorn serves ``tests.sites.metrics_wsgi:application``;
the views are in ``tests/sites/metrics_urls.py``.
"""

from __future__ import annotations

import os

from tests.support.redis_server import caches_for

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "tests.sites.metrics_urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_rl"]
MIDDLEWARE = ["tests.sites.metrics_urls.worker_header"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
CACHES = caches_for(os.environ.get("METRICS_REDIS_URL", "redis://127.0.0.1:1/0"))
DJANGO_RL = {
    "OVERRIDES": False,
    "POLICIES": {
        "enforced": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip"},
        "shadowed": {"algorithm": "sliding_log", "rate": "4/h", "key": "ip", "mode": "shadow"},
    },
}
