"""CPU that ``RateLimitMiddleware`` adds to a request that no rule matches (issue: < 5 µs).

One process, no Redis (a request no rule matches sends nothing): Django's
own handler (``BaseHandler.get_response``, every middleware's phase, the URL
resolved, a plain view) answers the same request over and over, in four
set-ups measured round-robin in the same run, so the machine's load falls on
all of them alike:

* ``no middleware``: the floor;
* ``middleware, no RULES``: what every site with the middleware pays;
* ``middleware, 50 rules``: 50 ``^/api/v<i>/`` rules, a path none matches;
* ``middleware, 50 rules, EXEMPT``: the same, with two networks in ``EXEMPT``.

CPU per request is ``time.process_time_ns`` over a batch (the garbage
collector off), the median of the rounds; the last column is the set-up minus the floor.

    python -m bench.site_rules [--quick]
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django

django.setup()

from django.core.handlers.base import BaseHandler  # noqa: E402
from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.test import RequestFactory, override_settings  # noqa: E402
from django.urls import path  # noqa: E402

from bench.report import bench_parser, finish, print_table  # noqa: E402
from django_rl.policies.site_rules import RULES as COMPILED  # noqa: E402

MIDDLEWARE = "django_rl.middleware.RateLimitMiddleware"
RULES = [{"path": rf"^/api/v{i}/", "policies": ["rules_bench"]} for i in range(50)]
POLICIES = {"rules_bench": {"algorithm": "fixed_window", "rate": "100/m", "key": "ip"}}
TARGET_NS = 5_000


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("plain/", plain)]

SETUPS: dict[str, dict[str, Any]] = {
    "no middleware": {"MIDDLEWARE": []},
    "middleware, no RULES": {"MIDDLEWARE": [MIDDLEWARE]},
    "middleware, 50 rules": {"MIDDLEWARE": [MIDDLEWARE], "RULES": RULES},
    "middleware, 50 rules, EXEMPT": {
        "MIDDLEWARE": [MIDDLEWARE],
        "RULES": RULES,
        "EXEMPT": ["10.0.0.0/8", "2001:db8::/32"],
    },
}


def _handler(setup: dict[str, Any]) -> tuple[BaseHandler, override_settings]:
    rl = {"POLICIES": POLICIES, "HISTORY": False, "OVERRIDES": False, "METRICS": False}
    for name in ("RULES", "EXEMPT"):
        if name in setup:
            rl[name] = setup[name]
    overridden = override_settings(
        MIDDLEWARE=setup["MIDDLEWARE"], ROOT_URLCONF="bench.site_rules", DJANGO_RL=rl
    )
    overridden.enable()
    handler = BaseHandler()
    handler.load_middleware()
    overridden.disable()
    return handler, overridden


def _batch(
    handler: BaseHandler, overridden: override_settings, count: int, rules: bool | None
) -> float:
    """CPU ns per request over ``count`` requests (a new request each: Django's way)."""
    factory = RequestFactory()
    requests = [factory.get("/plain/") for _ in range(count)]
    overridden.enable()
    try:
        handler.get_response(factory.get("/plain/"))  # rules compiled, URLconf loaded
        if rules is not None:
            assert COMPILED.on is rules, "the rules measured are not the set-up's"
        gc.collect()
        gc.disable()  # (a collection's pause falls on whichever set-up is running)
        start = time.process_time_ns()
        for request in requests:
            handler.get_response(request)
        spent = time.process_time_ns() - start
    finally:
        gc.enable()
        overridden.disable()
    return spent / count


def main(argv: list[str]) -> int:
    args = bench_parser(__doc__ or "", "site_rules.json", "500 requests, 3 rounds").parse_args(argv)
    count, rounds = (500, 3) if args.quick else (5_000, 15)
    built = {name: _handler(setup) for name, setup in SETUPS.items()}
    spent: dict[str, list[float]] = {name: [] for name in SETUPS}
    for _ in range(rounds):
        for name, (handler, overridden) in built.items():
            # (None: no middleware reads the rules.)
            rules = ("RULES" in SETUPS[name]) if SETUPS[name]["MIDDLEWARE"] else None
            spent[name].append(_batch(handler, overridden, count, rules))
    medians = {name: statistics.median(values) for name, values in spent.items()}
    floor = medians["no middleware"]
    rows = [
        [
            name,
            f"{medians[name] / 1000:.2f}",
            f"{(max(values) - min(values)) / 1000:.2f}",
            "" if name == "no middleware" else f"{(medians[name] - floor) / 1000:+.2f}",
        ]
        for name, values in spent.items()
    ]
    print_table(
        f"CPU per request, Django's handler, {count} requests x {rounds} rounds (median)",
        ["set-up", "µs per request", "spread µs", "over the floor µs"],
        rows,
    )
    added = medians["middleware, 50 rules"] - floor
    missed = [] if added < TARGET_NS else [f"50 rules add {added / 1000:.2f} µs (target < 5 µs)"]
    results = {"count": count, "rounds": rounds, "ns_per_request": spent, "median_ns": medians}
    return finish(args.json, results, missed, args.strict)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
