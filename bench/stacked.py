"""Several policies on one request: django_rl against DRF and django-ratelimit, in one run.

    python -m bench.stacked [--rounds N] [--batch N] [--quick] [--json PATH]

Starts its own redis-server on a free port (and stops it). Every row is a
view called as Django calls it, with a RequestFactory request from one of
1,000 client addresses (built once, outside the timed calls), at limits so
high that every request is allowed:

* a plain function view with django_rl's ``@ratelimit`` naming 1, 2 and 3
  policies (fixed_window, sliding_log, token_bucket), decided together in
  one round trip, and the same view with 1, 2 and 3 stacked decorators of
  django-ratelimit (the real package; block=True, its default) on the
  django-redis cache; the undecorated view is their floor;
* a DRF ``APIView`` (``as_view()``) throttled by ``PolicyThrottle`` with
  ``throttle_scope`` + ``throttle_policies`` naming 1, 2 and 3 policies, and
  the same view with 1, 2 and 3 of DRF's own ``AnonRateThrottle`` subclasses
  (a scope and rate each) on the django-redis cache; the view without
  throttles is their floor;
* denied: one client whose first policy (a fixed window of 100) is used up,
  through ``@ratelimit`` and ``PolicyThrottle`` naming 3 policies: each
  request is refused, and the other two policies' remaining do not move
  (asserted after the run: they are peeked before and after).

Measures, all rows interleaved in the same rounds (``bench/measure.py``):
µs per request (median of the rounds, p25-p75), CPU µs, the limiting's µs
over the floor of its kind (the median of per-round differences, the two
rows measured moments apart), and Redis commands and round trips per
request. Also, not timed: what the other policies are charged for denied
requests, django_rl's against DRF's (whose stacked throttles each count
what they allow). Writes JSON (default ``bench/results/stacked.json``).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.limiters import policy_name
from bench.measure import Samples, commands_and_round_trips, interleaved
from bench.peers import Decide, as_new, requests_for
from bench.report import print_table
from bench.runner import bench_main, setup_django
from tests.support.redis_server import RedisServer

POPULATION = 1000
ADDRESSES = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(POPULATION)]
COUNTED_DECISIONS = 300
LIMIT = 1_000_000
#: django_rl's policies, in the order a view names them (bench/settings.py).
POLICIES = tuple(policy_name(a, LIMIT) for a in ("fixed_window", "sliding_log", "token_bucket"))
#: The denied client's first policy: 100 a year, so no window ends during a run.
DENYING = f"{policy_name('fixed_window', 100)}-flood"
DENIED_ADDRESS = "192.0.2.200"
#: Denied requests made for the "charged to the others" check.
CHARGE_PROBES = 20
COUNTS = (1, 2, 3)

PLAIN, API = "plain view, no limit", "DRF APIView, no throttle"


def main(argv: list[str] | None = None) -> int:
    return bench_main(__doc__ or "", "stacked.json", run, argv)


def _calls(view: Callable[[Any], Any], requests: Sequence[Any]) -> Decide:
    def decide(i: int) -> bool:
        request = requests[i]
        as_new(request)  # a request built once, as new each time (bench/peers.py)
        response = view(request)
        as_new(request, response)  # its headers written again by the next call
        return bool(response.status_code == 200)

    return decide


def _ok() -> Any:
    from django.http import HttpResponse

    return HttpResponse("ok")


def plain_view(requests: Sequence[Any]) -> Decide:
    ok = _ok()
    return _calls(lambda request: ok, requests)


def django_rl_view(names: Sequence[str], requests: Sequence[Any]) -> Decide:
    from django_rl.decorators import ratelimit

    ok = _ok()
    return _calls(ratelimit(*names)(lambda request: ok), requests)


def django_ratelimit_view(count: int, requests: Sequence[Any]) -> Decide:
    """The view under ``count`` stacked decorators, each its own group and rate."""
    from django_ratelimit.decorators import ratelimit

    ok = _ok()

    def plain(request: Any) -> Any:
        return ok

    view: Callable[[Any], Any] = plain
    for k in reversed(range(count)):  # the first is the outermost: it decides first
        view = ratelimit(group=f"s{count}-{k}", key="ip", rate=f"{LIMIT + k}/h")(view)
    return _calls(view, requests)


def api_view(throttles: Sequence[type], requests: Sequence[Any], **attributes: Any) -> Decide:
    from rest_framework.response import Response
    from rest_framework.views import APIView

    def get(self: Any, request: Any) -> Any:
        return Response("ok")

    body = {"throttle_classes": list(throttles), "get": get, **attributes}
    view = type("BenchView", (APIView,), body).as_view()
    return _calls(view, requests)


def policy_throttle_view(names: Sequence[str], requests: Sequence[Any]) -> Decide:
    from django_rl.throttling import PolicyThrottle

    scope, *more = names
    return api_view([PolicyThrottle], requests, throttle_scope=scope, throttle_policies=more)


def drf_throttles(count: int, tag: str, rates: Sequence[str] | None = None) -> list[type]:
    """``count`` subclasses of DRF's ``AnonRateThrottle``, each its own scope and rate."""
    from rest_framework.throttling import AnonRateThrottle

    rates = rates or [f"{LIMIT + k}/hour" for k in range(count)]
    return [
        type(f"Throttle{k}", (AnonRateThrottle,), {"rate": rates[k], "scope": f"{tag}-{k}"})
        for k in range(count)
    ]


def _policies(count: int) -> str:
    return f"{count} {'policy' if count == 1 else 'policies'}"


def build_rows() -> tuple[dict[str, Decide], dict[str, str], dict[str, int]]:
    """Return the rows, the floor of each limiting row, and each row's number of limits.

    In table order: each floor, then the rows measured against it.
    """
    requests = requests_for(ADDRESSES)
    kinds: list[tuple[str, Callable[[int], Decide]]] = [
        (PLAIN, lambda count: plain_view(requests)),
        (
            "django_rl @ratelimit, {}",
            lambda count: django_rl_view(POLICIES[:count], requests),
        ),
        (
            "django-ratelimit, {} x @ratelimit",
            lambda count: django_ratelimit_view(count, requests),
        ),
        (API, lambda count: api_view([], requests)),
        (
            "django_rl PolicyThrottle, {}",
            lambda count: policy_throttle_view(POLICIES[:count], requests),
        ),
        (
            "DRF, {} x AnonRateThrottle",
            lambda count: api_view(drf_throttles(count, f"a{count}"), requests),
        ),
    ]
    rows: dict[str, Decide] = {}
    floor: dict[str, str] = {}
    limits: dict[str, int] = {}
    base = PLAIN
    for pattern, make in kinds:
        if pattern in (PLAIN, API):
            base = pattern
            rows[pattern], limits[pattern] = make(0), 0
            continue
        for count in COUNTS:
            what = _policies(count) if "django_rl" in pattern else str(count)
            name = pattern.format(what)
            rows[name], floor[name], limits[name] = make(count), base, count
    return rows, floor, limits


DENIED_DECORATOR = "denied: django_rl @ratelimit, 3 policies, the first used up"
DENIED_THROTTLE = "denied: django_rl PolicyThrottle, 3 policies, the first used up"
DENIED_NAMES = (DENYING, *POLICIES[1:])


def build_denied() -> dict[str, Decide]:
    """The denied client's two rows, once its first policy is used up (each call refused)."""
    from django_rl import get_policy

    requests = requests_for([DENIED_ADDRESS])
    first = get_policy(DENYING)
    identity = f"ip:{DENIED_ADDRESS}"
    while first.peek(identity).allowed:
        first.hit(identity)
    built = {
        DENIED_DECORATOR: django_rl_view(DENIED_NAMES, requests),
        DENIED_THROTTLE: policy_throttle_view(DENIED_NAMES, requests),
    }
    for name, decide in built.items():
        assert not decide(0), f"{name}: not refused"
    # Every decision is the one client's, whatever its index.
    return {name: (lambda i, decide=decide: decide(0)) for name, decide in built.items()}


def others_remaining() -> dict[str, int]:
    """Return the remaining of the denied client's other policies, counting nothing."""
    from django_rl import get_policy

    identity = f"ip:{DENIED_ADDRESS}"
    return {name: get_policy(name).peek(identity).remaining for name in DENIED_NAMES[1:]}


def run(server: RedisServer, *, rounds: int, batch: int) -> dict[str, Any]:
    admin = setup_django(server)
    started = time.monotonic()
    print(f"{rounds} interleaved rounds of {batch} requests per row; load {os.getloadavg()}")
    rows, floor, limits = build_rows()
    denied = build_denied()
    before = others_remaining()
    for name in denied:
        floor[name], limits[name] = (PLAIN if "@ratelimit" in name else API), 3
    every = {**rows, **denied}
    samples = interleaved(every, rounds=rounds, batch=batch, population=POPULATION)
    table: dict[str, Any] = {}
    for name, decide in every.items():
        for i in range(COUNTED_DECISIONS):  # clients seen before, as in the timed rounds
            decide(i)
        commands, round_trips, by_name = commands_and_round_trips(decide, COUNTED_DECISIONS, admin)
        row: dict[str, Any] = {
            **samples[name].summary(),
            "limits": limits[name],
            "commands": commands,
            "round_trips": round_trips,
            "commands_by_name": by_name,
        }
        if name in floor:
            row["floor"] = floor[name]
            row["over_floor_us"] = _difference(samples, name, floor[name], "wall")
            row["over_floor_cpu_us"] = _difference(samples, name, floor[name], "cpu")
        table[name] = row
    after = others_remaining()
    assert after == before, f"a denied request moved the other policies: {before} -> {after}"
    results: dict[str, Any] = {
        "rounds": rounds,
        "batch": batch,
        "population": POPULATION,
        "policies": list(POLICIES),
        "denied_policies": list(DENIED_NAMES),
        "rows": table,
        "denied_others_remaining": {"before": before, "after": after},
    }
    print_table(
        "Several policies on one request: µs per request (limits 1,000,000/h, 1,000 clients)",
        [
            "row",
            "µs median",
            "p25-p75",
            "CPU µs",
            "limiting µs",
            "limiting CPU µs",
            "commands",
            "round trips",
        ],
        _table_rows(table),
    )
    print(
        f"\ndenied: the other policies' remaining before and after the run: {before} -> {after}"
        " (unchanged)"
    )
    results["charged"] = charged_to_others()
    print_table(
        f"What {CHARGE_PROBES} denied requests (3 limits, the first used up) cost the other two",
        ["row", "counted by the 2nd", "counted by the 3rd"],
        [[name, str(a), str(b)] for name, (a, b) in results["charged"].items()],
    )
    results["seconds"] = round(time.monotonic() - started, 1)
    print(f"\nbench.stacked took {results['seconds']} s")
    return results


def _difference(samples: dict[str, Samples], row: str, base: str, kind: str) -> float:
    """Return the median over rounds of row - base, µs per request (same round, moments apart)."""
    pairs = zip(getattr(samples[row], kind), getattr(samples[base], kind), strict=True)
    return statistics.median(a - b for a, b in pairs)


def charged_to_others() -> dict[str, tuple[int, int]]:
    """Return, per front door, how much its 2nd and 3rd limits counted for denied requests.

    django_rl: the drop in the 2nd and 3rd policies' remaining (sliding_log
    and a fixed window: neither gives back during the check). DRF: the
    entries its 2nd and 3rd throttles added to their histories.
    """
    from django.core.cache import cache

    from django_rl import get_policy

    address = "192.0.2.201"
    identity = f"ip:{address}"
    requests = requests_for([address])
    names = (DENYING, POLICIES[1], POLICIES[0])
    first = get_policy(DENYING)
    while first.peek(identity).allowed:
        first.hit(identity)
    found: dict[str, tuple[int, int]] = {}
    for label, make in (
        ("django_rl @ratelimit", django_rl_view),
        ("django_rl PolicyThrottle", policy_throttle_view),
    ):
        start = [get_policy(name).peek(identity).remaining for name in names[1:]]
        decide = make(names, requests)
        refused = sum(not decide(0) for _ in range(CHARGE_PROBES))
        assert refused == CHARGE_PROBES, f"{label}: {refused} of {CHARGE_PROBES} refused"
        end = [get_policy(name).peek(identity).remaining for name in names[1:]]
        found[label] = (start[0] - end[0], start[1] - end[1])
        assert found[label] == (0, 0), f"{label}: the others were charged {found[label]}"
    throttles = drf_throttles(3, "charged", ["1/day", f"{LIMIT}/hour", f"{LIMIT}/hour"])
    decide = api_view(throttles, requests)
    decide(0)  # the first throttle's one request a day: used up
    histories = [cache.get(t().get_cache_key(requests[0], None)) or [] for t in throttles[1:]]
    start = [len(h) for h in histories]
    refused = sum(not decide(0) for _ in range(CHARGE_PROBES))
    assert refused == CHARGE_PROBES, f"DRF: {refused} of {CHARGE_PROBES} refused"
    histories = [cache.get(t().get_cache_key(requests[0], None)) or [] for t in throttles[1:]]
    grown = [len(history) - length for history, length in zip(histories, start, strict=True)]
    found["DRF, 3 x AnonRateThrottle"] = (grown[0], grown[1])
    return found


def _table_rows(table: dict[str, Any]) -> list[list[str]]:
    return [
        [
            name,
            f"{row['median_us']:.1f}",
            f"{row['p25_us']:.1f}-{row['p75_us']:.1f}",
            f"{row['cpu_median_us']:.1f}",
            f"{row['over_floor_us']:.1f}" if "floor" in row else "(floor)",
            f"{row['over_floor_cpu_us']:.1f}" if "floor" in row else "(floor)",
            f"{row['commands']:.2f}",
            f"{row['round_trips']:.2f}",
        ]
        for name, row in table.items()
    ]


__all__ = ["main", "run"]

if __name__ == "__main__":
    raise SystemExit(main())
