"""Settings for the test suite. CACHES is pointed at the suite's own redis-server
by ``conftest.py`` once it has started."""

from __future__ import annotations

import os
import tempfile

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "tests.sites.urls"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
STATIC_URL = "static/"  # pytest-django's live_server needs it

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_rl",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"
# Test users log in many times; a slow hasher would cost seconds.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        # Not ":memory:", even outside the tests: pytest-django's live_server
        # shares the main thread's connection with every request thread when
        # NAME is in memory at the moment it starts, which for a browser test
        # run alone is before the test database exists; concurrent requests on
        # one SQLite connection then crash the process (a segfault in execute).
        # Nothing opens it: the tests use the test database below.
        "NAME": os.path.join(tempfile.gettempdir(), "django_rl_tests_unused.sqlite3"),
        # The test database is a file, not memory: the browser tests' live
        # server answers the page's concurrent polls in threads of their own,
        # and Django would have them all share the test thread's one
        # in-memory connection, which SQLite does not allow ("bad parameter
        # or other API misuse"). With a file, each thread connects alone.
        "TEST": {
            "NAME": os.path.join(tempfile.gettempdir(), f"django_rl_tests_{os.getpid()}.sqlite3")
        },
    }
}

# Replaced by conftest.py with the URL of the suite's own redis-server.
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
    }
}

DJANGO_RL = {
    "KEY_PREFIX": "rl",
    "POLICIES": {
        "login": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
        "per_minute": {"algorithm": "fixed_window", "rate": "5/m", "key": "ip"},
        "api": {"algorithm": "fixed_window", "rate": "5/m", "key": "user_or_ip"},
        "burst": {"algorithm": "token_bucket", "capacity": 3, "rate": "1/s", "key": "ip"},
        "writes": {"algorithm": "fixed_window", "rate": "2/m", "key": "ip"},
    },
}

REST_FRAMEWORK = {
    "DEFAULT_THROTTLE_CLASSES": ["django_rl.throttling.PolicyThrottle"],
}

# DJANGO_RL_TEST_MODE=app-clock: every policy's decisions go by this host's
# clock (CLOCK "app"), whatever DJANGO_RL a test sets (see tests/support/servers.py).
from tests.support import servers  # noqa: E402

servers.apply_clock_mode()
