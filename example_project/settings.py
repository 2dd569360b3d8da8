"""A small site that uses both front doors of django_rl.

Redis: ``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Keys are written
under the ``rl-example`` prefix. ``/metrics/`` serves Prometheus metrics when
``prometheus_client`` is installed (``pip install prometheus_client``;
``make demo``'s virtualenv has it). ``/rate_limit/`` answers a client's
standing on every policy (``django_rl.views.rate_limit_status``); with
drf-spectacular installed (``pip install "django_rl[spectacular]"``; ``make
demo``'s virtualenv has it) ``/api/schema/`` serves the OpenAPI schema, its
rate-limited operations documenting their 429s (``django_rl.contrib.spectacular``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-for-production")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True

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
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # Answers a raised django_rl.exceptions.RateLimited with the same 429 as
    # the decorator's (only needed by code that raises it).
    "django_rl.middleware.RateLimitMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DB", str(BASE_DIR / "db.sqlite3")),
    }
}

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]

# The rate limiter's connection. Short socket timeouts keep a request from
# waiting long on a Redis that is down; FAIL_OPEN decides what happens then.
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
    }
}

DJANGO_RL = {
    "CONNECTION": "default",
    "KEY_PREFIX": "rl-example",
    "FAIL_OPEN": True,
    "POLICIES": {
        # 5 login attempts a minute per client address, exact (no edge burst).
        "login": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
        # A cheap counter for the API: 20 a minute per user, else per address.
        "api": {"algorithm": "fixed_window", "rate": "20/m", "key": "user_or_ip"},
        # Bursts of 3, then one a second.
        "burst": {"algorithm": "token_bucket", "capacity": 3, "rate": "1/s", "key": "ip"},
        # In shadow mode: counted and decided, never denied. What it would
        # have denied shows in the admin's charts, the metrics and the log.
        "search": {"algorithm": "fixed_window", "rate": "10/m", "key": "ip", "mode": "shadow"},
    },
}

# One line per denial (and shadow denial) on the console: the
# django_rl.denials logger, rate-limited by django_rl itself.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_rl.denials": {"handlers": ["console"], "level": "INFO"}},
}

REST_FRAMEWORK = {
    "DEFAULT_THROTTLE_CLASSES": ["django_rl.throttling.PolicyThrottle"],
}

#: The OpenAPI schema at /api/schema/, when drf-spectacular is installed.
SPECTACULAR = importlib.util.find_spec("drf_spectacular") is not None
if SPECTACULAR:
    INSTALLED_APPS.append("drf_spectacular")
    REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] = "drf_spectacular.openapi.AutoSchema"
    SPECTACULAR_SETTINGS = {
        "TITLE": "django_rl example",
        "VERSION": "1.0.0",
        "POSTPROCESSING_HOOKS": [
            "drf_spectacular.hooks.postprocess_schema_enums",
            # A 429 with Retry-After and the rate-limit headers on every limited operation.
            "django_rl.contrib.spectacular.postprocess_schema",
        ],
    }
