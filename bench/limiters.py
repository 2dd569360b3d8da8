"""The limiters the benchmarks compare, each behind one signature.

``Limiter.build(limit, addresses)`` returns ``decide(i) -> allowed``: one
decision for the client at ``addresses[i]``, at ``limit`` hits an hour. Each
limiter prepares what does not belong to a decision (request objects, key
tables for the raw floors) in ``build``, outside the timed calls.

Rows:

* floors: PING on an ordinary (pooled) redis-py client, the yardstick; PING,
  one ``INCRBY`` (the yardstick throttled-py publishes its limiters against)
  and EVALSHA of a trivial script on django_rl's client (a connection kept per
  thread); the raw redis-py call of each django_rl algorithm (its own Lua
  script by EVALSHA, or its MULTI pipeline) on that client with the keys
  ``Policy.hit`` uses, so the ratio to it is django_rl's own Python work;
* django_rl: each algorithm through ``Policy.hit``, through ``@ratelimit`` on
  a RequestFactory request, and through DRF's ``PolicyThrottle``; and the
  fixed window as an inline policy (``@ratelimit(rate=...)``), to set beside
  the named one;
* peers: DRF's ``AnonRateThrottle`` (a ``SimpleRateThrottle``) on
  django-redis, django-ratelimit's ``is_ratelimited`` on django-redis, limits'
  three Redis strategies, django-smart-ratelimit's Redis backend.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.peers import (
    Build,
    Decide,
    as_new,
    django_ratelimit,
    drf_dropin,
    drf_throttle,
    limits_strategy,
    requests_for,
    smart_ratelimit,
)

ALGORITHMS = ("fixed_window", "sliding_log", "token_bucket", "gcra", "sliding_window")


@dataclass(frozen=True)
class Limiter:
    name: str
    group: str  # "floor", "django_rl" or "peer"
    build: Build
    #: The row this one is compared with as its raw floor (django_rl rows).
    floor: str | None = None

    @property
    def limits_requests(self) -> bool:
        """Return whether this row is a rate limiter (floors are not)."""
        return self.group != "floor"


def policy_name(algorithm: str, limit: int) -> str:
    """Return e.g. ``fw-100``: short, like real policy names, since names are in keys."""
    return f"{''.join(word[0] for word in algorithm.split('_'))}-{limit}"


def _client() -> Any:
    """Return django_rl's client: this thread's kept connection, as Policy.hit uses."""
    from django_rl.backends import get_backend

    return get_backend("default").client


def _policy(algorithm: str, limit: int) -> Any:
    from django_rl import get_policy

    return get_policy(policy_name(algorithm, limit))


# Floors ---------------------------------------------------------------------


def ping(limit: int, addresses: Sequence[str]) -> Decide:
    """PING on an ordinary redis-py client (django-redis's, pooled): the yardstick."""
    from django_rl.backends import get_backend

    client = get_backend("default").pooled_client
    return lambda i: bool(client.ping())


def ping_kept(limit: int, addresses: Sequence[str]) -> Decide:
    client = _client()
    return lambda i: bool(client.ping())


#: One INCRBY on django_rl's kept connection: the cheapest write a limiter can make.
INCRBY_ROW = "INCRBY on django_rl's kept connection"


def incrby(limit: int, addresses: Sequence[str]) -> Decide:
    """One ``INCRBY`` of a key per client on the connection ``Policy.hit`` uses."""
    client = _client()
    keys = [f"bench:incrby:{{ip:{address}}}" for address in addresses]
    return lambda i: client.incrby(keys[i], 1) <= limit


def trivial_script(limit: int, addresses: Sequence[str]) -> Decide:
    client = _client()
    sha = client.script_load("return 1")
    return lambda i: client.evalsha(sha, 0) == 1


def raw_fixed_window(limit: int, addresses: Sequence[str]) -> Decide:
    """The fixed window's MULTI pipeline, the window taken from this host's clock."""
    client = _client()
    policy = _policy("fixed_window", limit)
    period = policy.algorithm.rate.period_ms
    keys = [policy.key(f"ip:{address}") for address in addresses]

    def decide(i: int) -> bool:
        window = int(time.time() * 1000) // period
        key = f"{keys[i]}:{window}"
        pipe = client.pipeline(transaction=True)
        pipe.incrby(key, 1)
        pipe.pexpireat(key, (window + 1) * period, nx=True)
        pipe.pttl(key)
        count, _, _ = pipe.execute()
        return bool(count <= limit)

    return decide


FIXED_WINDOW_LUA = """
local count = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[2], 'NX')
return {count, redis.call('PTTL', KEYS[1])}
"""


def lua_fixed_window(limit: int, addresses: Sequence[str]) -> Decide:
    """The fixed window's three commands in a Lua script instead of MULTI (not used by
    django_rl: measured to show what the pipeline costs in redis-py)."""
    client = _client()
    policy = _policy("fixed_window", limit)
    period = policy.algorithm.rate.period_ms
    keys = [policy.key(f"ip:{address}") for address in addresses]
    sha = client.script_load(FIXED_WINDOW_LUA)

    def decide(i: int) -> bool:
        window = int(time.time() * 1000) // period
        count, _ = client.evalsha(sha, 1, f"{keys[i]}:{window}", 1, (window + 1) * period)
        return bool(count <= limit)

    return decide


def raw_script(algorithm: str, *, pooled: bool = False) -> Build:
    """EVALSHA of the algorithm's own Lua script, with the arguments Policy.hit sends.

    On django_rl's kept connection, or (``pooled``) on an ordinary redis-py
    client, as code calling redis-py directly would.
    """

    def build(limit: int, addresses: Sequence[str]) -> Decide:
        from django_rl.backends import get_backend

        client = get_backend("default").pooled_client if pooled else _client()
        policy = _policy(algorithm, limit)
        keys = [policy.key(f"ip:{address}") for address in addresses]
        # The arguments Policy.hit sends, bar the time ('': the server's TIME).
        args = (*policy.algorithm.script_args(1, "1"), "")
        sha = client.script_load(policy.algorithm.script.source)
        return lambda i: client.evalsha(sha, 1, keys[i], *args)[0] == 1

    return build


# django_rl --------------------------------------------------------------------


def policy_hit(algorithm: str) -> Build:
    def build(limit: int, addresses: Sequence[str]) -> Decide:
        hit = _policy(algorithm, limit).hit
        identities = [f"ip:{address}" for address in addresses]
        return lambda i: hit(identities[i]).allowed

    return build


def decorator(algorithm: str) -> Build:
    def build(limit: int, addresses: Sequence[str]) -> Decide:
        from django.http import HttpResponse

        from django_rl.decorators import ratelimit

        ok = HttpResponse("ok")
        view = ratelimit(_policy(algorithm, limit).name)(lambda request: ok)
        return _as_new_each_time(view, ok, requests_for(addresses))

    return build


def inline_decorator(limit: int, addresses: Sequence[str]) -> Decide:
    """``@ratelimit(rate=...)``: the same fixed window as the named row, a policy of its own."""
    from django.http import HttpResponse

    from django_rl.decorators import ratelimit

    ok = HttpResponse("ok")
    view = ratelimit(rate=f"{limit}/h", key="ip", group=f"bench-{limit}")(lambda request: ok)
    return _as_new_each_time(view, ok, requests_for(addresses))


def _as_new_each_time(view: Any, ok: Any, requests: Sequence[Any]) -> Decide:
    """Call ``view`` (which returns ``ok``) with each request as a new one (``as_new``)."""

    def decide(i: int) -> bool:
        request = requests[i]
        as_new(request, ok)  # no Decisions of earlier calls; the headers written again
        return view(request) is ok

    return decide


def policy_throttle(algorithm: str) -> Build:
    def build(limit: int, addresses: Sequence[str]) -> Decide:
        from django_rl.throttling import PolicyThrottle

        class View:
            throttle_scope = _policy(algorithm, limit).name
            headers: dict[str, str]

        view = View()
        requests = requests_for(addresses)

        def decide(i: int) -> bool:
            request = requests[i]
            as_new(request)
            view.headers = {}  # as APIView.dispatch sets it: the throttle writes the headers in it
            return PolicyThrottle().allow_request(request, view)

        return decide

    return build


RAW = {
    "fixed_window": "raw MULTI pipeline (fixed_window)",
    "sliding_log": "raw EVALSHA sliding_log.lua",
    "token_bucket": "raw EVALSHA token_bucket.lua",
    "gcra": "raw EVALSHA gcra.lua",
    "sliding_window": "raw EVALSHA sliding_window.lua",
}

LIMITERS: list[Limiter] = [
    Limiter("PING", "floor", ping),
    Limiter("PING on django_rl's kept connection", "floor", ping_kept),
    Limiter(INCRBY_ROW, "floor", incrby),
    Limiter("raw EVALSHA of `return 1`", "floor", trivial_script),
    Limiter(RAW["fixed_window"], "floor", raw_fixed_window),
    Limiter("raw EVALSHA of the same as Lua (not used)", "floor", lua_fixed_window),
    Limiter(RAW["sliding_log"], "floor", raw_script("sliding_log")),
    Limiter(RAW["token_bucket"], "floor", raw_script("token_bucket")),
    Limiter(RAW["gcra"], "floor", raw_script("gcra")),
    Limiter(RAW["sliding_window"], "floor", raw_script("sliding_window")),
    Limiter(
        f"{RAW['sliding_log']}, pooled client", "floor", raw_script("sliding_log", pooled=True)
    ),
    Limiter(
        f"{RAW['token_bucket']}, pooled client", "floor", raw_script("token_bucket", pooled=True)
    ),
]
#: The inline row, and the named row it is compared with in the same run.
INLINE_ROW = "fixed_window: @ratelimit(rate=...) inline"
NAMED_ROW = "fixed_window: @ratelimit"
for _algorithm in ALGORITHMS:
    LIMITERS += [
        Limiter(f"{_algorithm}: Policy.hit", "django_rl", policy_hit(_algorithm), RAW[_algorithm]),
        Limiter(f"{_algorithm}: @ratelimit", "django_rl", decorator(_algorithm), RAW[_algorithm]),
        Limiter(
            f"{_algorithm}: PolicyThrottle",
            "django_rl",
            policy_throttle(_algorithm),
            RAW[_algorithm],
        ),
    ]
    if _algorithm == "fixed_window":
        LIMITERS.append(Limiter(INLINE_ROW, "django_rl", inline_decorator, RAW[_algorithm]))
LIMITERS += [
    Limiter("DRF AnonRateThrottle (django-redis)", "peer", drf_throttle),
    Limiter("django-ratelimit is_ratelimited (django-redis)", "peer", django_ratelimit),
    Limiter("limits fixed window", "peer", limits_strategy("FixedWindowRateLimiter")),
    Limiter("limits moving window", "peer", limits_strategy("MovingWindowRateLimiter")),
    Limiter(
        "limits sliding window counter", "peer", limits_strategy("SlidingWindowCounterRateLimiter")
    ),
    Limiter("django-smart-ratelimit sliding window", "peer", smart_ratelimit("sliding_window")),
    Limiter("django-smart-ratelimit fixed window", "peer", smart_ratelimit("fixed_window")),
]
#: The drop-ins, each beside the original it replaces (bench/dropin_*.py);
#: not in the speed table of bench.decisions.
DRF_ORIGINAL = "DRF AnonRateThrottle (django-redis)"
DRF_DROPIN = "django_rl.contrib.drf AnonRateThrottle"
DROPIN_LIMITERS: list[Limiter] = [
    Limiter(DRF_DROPIN, "dropin", drf_dropin),
]
BY_NAME = {limiter.name: limiter for limiter in [*LIMITERS, *DROPIN_LIMITERS]}
