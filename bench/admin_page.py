"""Time the admin's live counters with 1,000,000 keys in Redis.

Run with ``make bench-admin`` (or ``.venv/bin/python bench/admin_page.py``).
It starts its own redis-server on a free port (the test suite's
``RedisServer``), fills it with pipelines with keys of the exact form the
algorithms write (fixed-window counters, sliding-log ZSETs, token-bucket
hashes, every one with a TTL), then times through Django's test client,
logged in as a superuser:

* the page (HTML) and the JSON endpoint, first page, no filter;
* the JSON endpoint: a later page, a policy filter that matches 1% of the
  keys, one that matches none (the scan budget is spent), an identity prefix,
  an exact identity;

and the first page again over HTTP, from a wsgiref server in a thread of
this process (a new connection per request); and, in the same run, the
floors: one PING, one DBSIZE, one ``SCAN 0 MATCH ... COUNT 50``. It prints a
table (median, 90th percentile and worst of the runs, in ms), writes
``bench/results/admin_page.json`` and stops both servers. The test client
runs the whole Django stack (middleware, session, permission check,
template) but no HTTP server or socket.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.sites.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.db import connections  # noqa: E402
from django.test import Client, override_settings  # noqa: E402

from django_rl import get_policy  # noqa: E402
from tests.support.redis_server import RedisServer, caches_for  # noqa: E402

PREFIX = "rl"
POLICIES = {
    # A 30-day window: the filled counters cannot meet a window edge mid-run.
    "api": {"algorithm": "fixed_window", "rate": "1000/30d", "key": "user_or_ip"},
    "login": {"algorithm": "sliding_log", "rate": "5/h", "key": "ip"},
    "burst": {"algorithm": "token_bucket", "capacity": 10, "rate": "10/h", "key": "ip"},
    "rare": {"algorithm": "sliding_log", "rate": "100/h", "key": "ip"},
    "empty": {"algorithm": "fixed_window", "rate": "10/m", "key": "ip"},
}
PAGE = "/admin/django_rl/livecounter/"
DATA = PAGE + "data/"
BATCH = 20_000


def identity(i: int) -> str:
    return f"ip:10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"


def fill(client, total: int) -> float:
    """Write ``total`` keys: 1% under "rare", the rest split over api, login and burst."""
    started = time.perf_counter()
    seconds, micros = client.time()
    now = int(seconds) * 1000 + int(micros) // 1000
    api, login, burst, rare = (get_policy(n) for n in ("api", "login", "burst", "rare"))
    window_ms = api.algorithm.rate.period_ms
    window = now // window_ms
    window_end = (window + 1) * window_ms
    pipe = client.pipeline(transaction=False)
    queued = 0
    for i in range(total):
        who = identity(i)
        kind = 3 if i % 100 == 99 else i % 3
        if kind == 0:
            pipe.set(f"{api.key(who)}:{window}", 1 + i % 1200, pxat=window_end)
            queued += 1
        elif kind in (1, 3):
            policy = login if kind == 1 else rare
            key = policy.key(who)
            hits = 1 + i % policy.limit
            pipe.zadd(key, {str(1000 + n): now - 1000 * n for n in range(hits)})
            pipe.pexpire(key, 3_600_000)
            queued += 2
        else:
            key = burst.key(who)
            units = (i % 10) * burst.algorithm.rate.period_ms
            pipe.hset(key, mapping={"units": units, "ts": now})
            pipe.pexpire(key, 3_600_000)
            queued += 2
        if queued >= BATCH:
            pipe.execute()
            queued = 0
    pipe.execute()
    return time.perf_counter() - started


def timed(call: Callable[[], object], runs: int) -> list[float]:
    for _ in range(2):  # warm up: connections, scripts, templates
        call()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def checked(client: Client, url: str, params: dict[str, str] | None = None) -> Callable[[], object]:
    def call() -> object:
        response = client.get(url, params or {})
        if response.status_code != 200:
            raise SystemExit(f"{url} {params} answered {response.status_code}")
        return response

    return call


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def http_server() -> Iterator[int]:
    """Serve the Django site on a free loopback port in a thread; yield the port."""
    server = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=QuietHandler)
    # The database is SQLite in memory: the server thread must use this
    # thread's connection, as Django's own live server does.
    database = connections["default"]
    database.inc_thread_sharing()

    def serve() -> None:
        connections["default"] = database
        server.serve_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        database.dec_thread_sharing()


def over_http(port: int, path: str, session: str) -> Callable[[], object]:
    def call() -> object:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", path, headers={"Cookie": f"sessionid={session}"})
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        if response.status != 200:
            raise SystemExit(f"HTTP {path} answered {response.status}")
        return body

    return call


def query(client: Client, params: dict[str, str]) -> tuple[Callable[[], object], dict[str, str]]:
    return checked(client, DATA, params), params


def measure(
    client: Client,
    name: str,
    call: Callable[[], object],
    params: dict[str, str] | None,
    runs: int,
) -> dict[str, object]:
    """Time ``call``; print and return its line of the table."""
    times = sorted(timed(call, runs))
    data = client.get(DATA, params).json() if params is not None else None
    p90 = times[max(0, int(len(times) * 0.9) - 1)]
    rows = len(data["rows"]) if data else None
    examined = data["examined"] if data else None
    print(
        f"{name:<33} {statistics.median(times):7.2f} {p90:7.2f} {times[-1]:7.2f}"
        f" {'' if rows is None else rows:>6}  {'' if examined is None else format(examined, ',')}"
    )
    return {
        "name": name,
        "median_ms": statistics.median(times),
        "p90_ms": p90,
        "max_ms": times[-1],
        "rows": rows,
        "examined": examined,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()

    server = RedisServer()
    server.start()
    try:
        redis = server.client()
        with override_settings(
            CACHES=caches_for(server.url),
            DJANGO_RL={"KEY_PREFIX": PREFIX, "POLICIES": POLICIES},
        ):
            call_command("migrate", verbosity=0)
            from django.contrib.auth import get_user_model

            user = get_user_model().objects.create_superuser("bench", "bench@example.com", "x")
            client = Client()
            client.force_login(user)

            fill_seconds = fill(redis, args.keys)
            keys = redis.dbsize()
            memory = redis.info("memory")["used_memory"]
            print(
                f"Filled {keys:,} keys in {fill_seconds:.1f} s "
                f"({keys / fill_seconds:,.0f} keys/s); Redis uses {memory / 2**20:,.0f} MiB."
            )
            later = client.get(DATA).json()["next_cursor"]
            # (name, what to time, the JSON query whose page it shows)
            cases: list[tuple[str, Callable[[], object], dict[str, str] | None]] = [
                ("floor: PING", redis.ping, None),
                ("floor: DBSIZE", redis.dbsize, None),
                (
                    "floor: SCAN 0 MATCH rl:* COUNT 50",
                    lambda: redis.scan(0, match=f"{PREFIX}:*", count=50),
                    None,
                ),
                ("page (HTML), first page", checked(client, PAGE), {}),
                ("JSON, first page", checked(client, DATA), {}),
                ("JSON, a later page", checked(client, DATA, {"cursor": later}), {"cursor": later}),
                ("JSON, policy with 1% of keys", *query(client, {"policy": "rare"})),
                ("JSON, policy with no keys", *query(client, {"policy": "empty"})),
                ("JSON, identity prefix", *query(client, {"q": "ip:10.3."})),
                ("JSON, exact identity", *query(client, {"q": identity(4242), "match": "exact"})),
            ]
            session = client.cookies["sessionid"].value
            results = []
            print(f"\n{args.runs} runs each, ms   median     p90   worst   rows  SCAN looked at")
            with http_server() as port:
                cases += [
                    ("HTTP: page (HTML), first page", over_http(port, PAGE, session), {}),
                    ("HTTP: JSON, first page", over_http(port, DATA, session), {}),
                ]
                for name, call, params in cases:
                    results.append(measure(client, name, call, params, args.runs))

        out = ROOT / "bench" / "results"
        out.mkdir(parents=True, exist_ok=True)
        report = {
            "keys": keys,
            "fill_seconds": fill_seconds,
            "used_memory": memory,
            "runs": args.runs,
            "results": results,
        }
        (out / "admin_page.json").write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nWrote {out / 'admin_page.json'}")
    finally:
        server.close()


if __name__ == "__main__":
    main()
