"""The suite's settings with the DRF drop-in as DRF's default throttles (a fresh process)."""

from __future__ import annotations

from tests.sites.settings import *  # noqa: F403

REST_FRAMEWORK = {
    "DEFAULT_THROTTLE_CLASSES": [
        "django_rl.contrib.drf.AnonRateThrottle",
        "django_rl.contrib.drf.UserRateThrottle",
        "django_rl.contrib.drf.ScopedRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {"anon": "3/min", "user": "10/min"},
}
