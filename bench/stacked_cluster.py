"""Several policies on one request on a Redis Cluster: one slot, three slots, refunds.

    python -m bench.stacked_cluster [--rounds N] [--batch N] [--quick] [--json PATH]

Starts its own Redis Cluster (``tests.support.topologies.ClusterTopology``: 3
primaries and their replicas, on free ports) and stops it whatever happens.
Django's cache is that cluster (``RedisClusterClient``); the policies are
``bench/settings.py``'s. Rows, each a call of ``django_rl.hit_many`` with 3
hits (fixed window, sliding log, token bucket, in that order) unless said:

* 1 identity: the 3 policies of one identity, whose keys share its hash
  tag, so one slot (1,000 identities in turn), and the same through
  ``@ratelimit`` naming the 3 policies on a RequestFactory request (1,000
  client addresses);
* 3 identities: each policy for its own identity, the 3 on 3 different
  slots (on 3 different primaries, picked by ``redis.crc.key_slot``;
  1,000 such triples in turn), every request allowed;
* denied by the 3rd slot: one triple whose 3rd policy (a token bucket of
  100 a year) is used up first, so the first two slots are counted, then
  refunded (``refund.lua``); denied by the 1st slot: one triple whose 1st
  policy (a fixed window of 100 a year) is used up, so the two later slots
  are only looked at. Both with the deny cache off (the policies copied
  with ``denials=None``: every request goes through the slots), and with it
  on (the default), where the denying policy is answered in this process
  and the other two slots are only looked at. The other policies' remaining
  is peeked before and after the run and asserted unchanged, exactly.

Times as every bench (``bench/measure.py``: interleaved rounds, median and
p25-p75 of µs per request, CPU µs). Round trips: socket writes
(``sendall``, or ``os.write`` on a socket) in this process (``measure.SendCounter``),
which sees the connections to the cluster's members too (django_rl's cluster
backend runs each slot's script on that primary's own ``redis.Redis``);
commands and EVALSHA calls: ``INFO commandstats`` summed over the primaries.
Both round trips and EVALSHA calls are asserted equal to the expected count. Writes JSON (default
``bench/results/stacked_cluster.json``).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.crc import key_slot

from bench.measure import Decide, SendCounter, command_calls, interleaved
from bench.report import bench_parser, finish, print_table
from bench.stacked import ADDRESSES, POLICIES, django_rl_view
from tests.support.topologies import ClusterTopology

POPULATION = len(ADDRESSES)
COUNTED_DECISIONS = 300
#: The denied triples' policies, a year's period so no window ends during a run.
FLOOD = ("fw-100-flood", "sl-100-flood", "tb-100-flood")
#: Allowed hits made for the denied triples' other policies before the run.
BEFORE_HITS = 3

ONE_SLOT = "hit_many, 3 policies, 1 identity (1 slot)"
DECORATOR = "@ratelimit, 3 policies, 1 identity (1 slot)"
THREE_SLOTS = "hit_many, 3 policies, 3 identities (3 slots), allowed"
LAST = "denied by the 3rd slot"
FIRST = "denied by the 1st slot"
NO_CACHE, CACHE = "deny cache off", "deny cache on (default)"
#: Round trips per request each row must make.
EXPECTED = {
    ONE_SLOT: 1,
    DECORATOR: 1,
    THREE_SLOTS: 3,
    f"{LAST}, {NO_CACHE}": 5,  # 3 slots counted or denied, 2 refunds
    f"{FIRST}, {NO_CACHE}": 3,  # 1 slot denies, 2 slots looked at
    f"{LAST}, {CACHE}": 2,  # the 3rd policy's denial known here: 2 looks
    f"{FIRST}, {CACHE}": 2,
}


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__ or "", "stacked_cluster.json", "5 rounds of 20")
    parser.add_argument("--rounds", type=int, default=100, help="interleaved rounds (default 100)")
    parser.add_argument("--batch", type=int, default=50, help="requests per row per round (50)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batch = 5, 20
    topology = ClusterTopology()
    try:
        topology.start()  # in the try: servers already started are stopped if it fails
        results = run(topology, rounds=args.rounds, batch=args.batch)
    finally:
        topology.close()
    return finish(args.json, results, [], False)


def setup_django(topology: ClusterTopology) -> None:
    """Configure Django with bench/settings.py, its cache the cluster."""
    import django
    from django.conf import settings
    from django.core.management import call_command

    from bench import settings as bench_settings

    values = {name: getattr(bench_settings, name) for name in dir(bench_settings)}
    values = {name: value for name, value in values.items() if name.isupper()}
    settings.configure(**{**values, "CACHES": topology.caches()})
    django.setup()
    # The overrides loader's table (bench/runner.py's django_setup).
    call_command("migrate", verbosity=0)


def identities_by_primary(topology: ClusterTopology, count: int) -> list[list[str]]:
    """Return ``count`` identities per primary, each list's on that primary's slots."""
    owners = sorted(
        (n["port"], n["slots"]) for n in topology.nodes() if n["primary"] and n["slots"]
    )
    found: list[list[str]] = [[] for _ in owners]
    n = 0
    while min(map(len, found)) < count:
        identity = f"user:{n}"
        n += 1
        slot = key_slot(identity.encode())  # the keys' hash tag is the identity
        index = next(
            i for i, (_, slots) in enumerate(owners) if any(a <= slot <= b for a, b in slots)
        )
        if len(found[index]) < count:
            found[index].append(identity)
    return found


def _slots(hits: Sequence[tuple[Any, str, int]]) -> set[int]:
    return {int(key_slot(policy.key(identity).encode())) for policy, identity, _ in hits}


#: Requests made per row (all of them, timed or not).
MADE: dict[str, int] = {}


def hits_decide(
    name: str, all_hits: Sequence[Sequence[tuple[Any, str, int]]], allowed: bool
) -> Decide:
    """Return ``decide(i)``: ``hit_many(all_hits[i % len])``, checking it is ``allowed`` or not."""
    from django_rl import hit_many

    MADE[name] = 0

    def decide(i: int) -> bool:
        MADE[name] += 1
        decisions = hit_many(all_hits[i % len(all_hits)])
        verdict = all(d.allowed for d in decisions)
        assert verdict == allowed, f"expected allowed={allowed}: {decisions}"
        return verdict

    return decide


def use_up(policy: Any, identity: str) -> None:
    while policy.peek(identity).allowed:
        policy.hit(identity)


def build_rows(topology: ClusterTopology) -> tuple[dict[str, Decide], list[tuple[Any, str]]]:
    """Return the rows, and the (policy, identity) pairs a denied request must not charge."""
    from bench.peers import requests_for
    from django_rl import get_policy, hit_many

    policies = [get_policy(name) for name in POLICIES]
    flood = [get_policy(name) for name in FLOOD]
    # The deny cache off: each request reaches the denying slot.
    uncached = [copy.copy(policy) for policy in flood]
    for policy in uncached:
        policy.denials = None
    a, b, c = identities_by_primary(topology, POPULATION + 2)
    one = [[(policy, identity, 1) for policy in policies] for identity in a[:POPULATION]]
    three = [
        list(zip(policies, triple, (1, 1, 1), strict=True))
        for triple in zip(a[:POPULATION], b[:POPULATION], c[:POPULATION], strict=True)
    ]
    last = a[POPULATION], b[POPULATION], c[POPULATION]
    first = a[POPULATION + 1], b[POPULATION + 1], c[POPULATION + 1]
    for hits in (*three, [(p, i, 1) for p, i in zip(flood, last, strict=True)]):
        assert len(_slots(hits)) == 3, f"not 3 slots: {hits}"
    use_up(flood[2], last[2])
    use_up(flood[0], first[0])
    spared = [(flood[0], last[0]), (flood[1], last[1]), (flood[1], first[1]), (flood[2], first[2])]
    for _ in range(BEFORE_HITS):  # a state that is not empty, for the refund to restore
        assert all(d.allowed for d in hit_many([(p, i, 1) for p, i in spared]))
    rows = {
        ONE_SLOT: hits_decide(ONE_SLOT, one, True),
        DECORATOR: django_rl_view(POLICIES, requests_for(ADDRESSES)),
        THREE_SLOTS: hits_decide(THREE_SLOTS, three, True),
    }
    for label, chosen in ((NO_CACHE, uncached), (CACHE, flood)):
        for row, triple in ((f"{LAST}, {label}", last), (f"{FIRST}, {label}", first)):
            hits = [list(zip(chosen, triple, (1, 1, 1), strict=True))]
            rows[row] = hits_decide(row, hits, False)
    return rows, spared


#: Commands the primaries count that no request sends: this bench's, the replicas' acks.
NOT_OURS = ("info", "replconf")


def counted(decide: Decide, primaries: list[redis.Redis]) -> dict[str, Any]:
    """Return round trips, commands and EVALSHA per request over COUNTED_DECISIONS requests."""
    counter = SendCounter()
    before = [command_calls(client) for client in primaries]
    with counter.counting():
        for i in range(COUNTED_DECISIONS):
            decide(i)
        sends = counter.sends
    after = [command_calls(client) for client in primaries]
    by_name: dict[str, float] = {}
    for old, new in zip(before, after, strict=True):
        for name, calls in new.items():
            if name not in NOT_OURS and calls != old.get(name, 0):
                by_name[name] = by_name.get(name, 0) + (calls - old.get(name, 0))
    by_name = {name: calls / COUNTED_DECISIONS for name, calls in sorted(by_name.items())}
    return {
        "round_trips": sends / COUNTED_DECISIONS,
        "evalsha": by_name.get("evalsha", 0.0),
        "commands": sum(by_name.values()),
        "commands_by_name": by_name,
    }


def run(topology: ClusterTopology, *, rounds: int, batch: int) -> dict[str, Any]:
    setup_django(topology)
    started = time.monotonic()
    print(f"{rounds} interleaved rounds of {batch} requests per row; load {os.getloadavg()}")
    rows, spared = build_rows(topology)
    before = [policy.peek(identity).remaining for policy, identity in spared]
    samples = interleaved(rows, rounds=rounds, batch=batch, population=POPULATION)
    primaries = topology.primaries()
    table: dict[str, Any] = {}
    try:
        for name, decide in rows.items():
            for i in range(COUNTED_DECISIONS):  # identities seen before, as in the timed rounds
                decide(i)
            table[name] = {**samples[name].summary(), **counted(decide, primaries)}
            table[name]["expected_round_trips"] = EXPECTED[name]
    finally:
        for client in primaries:
            client.close()
    after = [policy.peek(identity).remaining for policy, identity in spared]
    labels = [f"{policy.name} of {identity}" for policy, identity in spared]
    assert after == before, f"denied requests moved the others: {before} -> {after}"
    for name, row in table.items():
        # The deny cache reads the reset token at most once a second (a fraction here).
        assert round(row["round_trips"], 1) == row["expected_round_trips"], (name, row)
        assert row["evalsha"] == row["expected_round_trips"], (name, row)  # one script each
    denied_requests = {
        triple: sum(made for name, made in MADE.items() if name.startswith(triple))
        for triple in (LAST, FIRST)
    }
    results: dict[str, Any] = {
        "rounds": rounds,
        "batch": batch,
        "population": POPULATION,
        "primaries": topology.shards,
        "policies": list(POLICIES),
        "denied_policies": list(FLOOD),
        "round_trips_counted_by": "socket writes (sendall, os.write on a socket) in this process",
        "commands_counted_by": "INFO commandstats summed over the primaries",
        "rows": table,
        "others_remaining": {
            "denied_requests": denied_requests,
            "before": dict(zip(labels, before, strict=True)),
            "after": dict(zip(labels, after, strict=True)),
        },
    }
    print_table(
        "Several policies on a Redis Cluster (3 primaries): µs and round trips per request",
        ["row", "µs median", "p25-p75", "CPU µs", "round trips", "EVALSHA", "commands"],
        [
            [
                name,
                f"{row['median_us']:.1f}",
                f"{row['p25_us']:.1f}-{row['p75_us']:.1f}",
                f"{row['cpu_median_us']:.1f}",
                f"{row['round_trips']:.2f}",
                f"{row['evalsha']:.2f}",
                f"{row['commands']:.2f}",
            ]
            for name, row in table.items()
        ],
    )
    print(
        f"\ndenied requests made: {denied_requests}; the other policies' remaining:"
        f" {dict(zip(labels, before, strict=True))} -> {after} (unchanged)"
    )
    results["seconds"] = round(time.monotonic() - started, 1)
    print(f"\nbench.stacked_cluster took {results['seconds']} s")
    return results


__all__ = ["main", "run"]

if __name__ == "__main__":
    raise SystemExit(main())
