"""A Ninja API throttled by the drop-in (``/rl/``) and by Ninja's own throttles (``/ninja/``).

Each API limits its operations by ``AnonRateThrottle("50/m")``, the
drop-in's or Ninja's, plus one async operation and one with a second
throttle (``/rl/two``: 50/m and 3/m per address; the 3/m denies first).
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("NINJA_SKIP_REGISTRY", "yes")

from django.urls import path
from ninja import NinjaAPI
from ninja import throttling as original

from django_rl.contrib import ninja as dropin

RATE = "50/m"

ours = NinjaAPI(urls_namespace="rl", throttle=dropin.AnonRateThrottle(RATE))
theirs = NinjaAPI(urls_namespace="ninja", throttle=original.AnonRateThrottle(RATE))


@ours.get("/hello")
def hello(request: Any) -> str:
    return "OK"


@ours.get("/hello-async")
async def hello_async(request: Any) -> str:
    return "OK"


class Burst(dropin.AnonRateThrottle):
    scope = "burst"


@ours.get("/two", throttle=[dropin.AnonRateThrottle(RATE), Burst("3/m")])
def two(request: Any) -> str:
    return "OK"


@ours.get("/scoped", throttle=dropin.UserRateThrottle())
def scoped(request: Any) -> str:
    return "OK"


@theirs.get("/hello")
def hello_theirs(request: Any) -> str:
    return "OK"


urlpatterns = [path("rl/", ours.urls), path("ninja/", theirs.urls)]
