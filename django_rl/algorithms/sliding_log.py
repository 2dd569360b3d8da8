"""Sliding log: exact, no edge burst, memory proportional to the hits in a window.

State: a ZSET per identity, one entry per allowed hit whatever its cost,
scored by the server time of the hit; ``sliding_log.lua`` does check-then-add
in one EVALSHA. The hits are laid end to end on a line of units (an entry
holds where its hit starts and its cost), so the units in the window are the
newest entry's end less the oldest's start: a decision reads two entries,
never the whole log, and takes the same time at cost 1 or 1,000,000. Denied
hits add nothing. Retry-After is the time until enough of the oldest entries
leave the window for this hit to fit (a binary search over the entries).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from django_rl.algorithms.base import (
    PRELUDE,
    Outcome,
    RateAlgorithm,
    Reading,
    ScriptAlgorithm,
    algorithm_script,
    new_tuple,
)
from django_rl.backends import LuaScript, RedisNode
from django_rl.core.reprs import counted

SCRIPT = algorithm_script("sliding_log")
#: What the DRF drop-in writes besides its decisions (``sliding_log_points.lua``).
POINTS = LuaScript.from_parts(
    __package__ or "django_rl.algorithms",
    (PRELUDE, "sliding_log.lua", "sliding_log_points.lua"),
    "\nreturn sliding_log_points(KEYS, clock(ARGV[#ARGV]), ARGV)\n",
    name="sliding_log_points.lua",
)

#: Redis memory of one entry of a log kept as a skiplist (more than 128
#: entries), by ``MEMORY USAGE ... SAMPLES 0`` on Redis 7.0: 104 to 123 bytes
#: measured from 129 to 100,000 entries, and for limits up to 10^9 (longer
#: members); see docs/algorithms.md.
BYTES_PER_ENTRY = 120
#: Redis memory of a log of at most 128 entries (a listpack): 2,632 bytes
#: measured at 128, rounded up.
SMALL_LOG_BYTES = 2_700
#: Entries up to which Redis keeps a ZSET as a listpack (``zset-max-listpack-entries``).
LISTPACK_ENTRIES = 128


class SlidingLog(ScriptAlgorithm, RateAlgorithm):
    name: ClassVar[str] = "sliding_log"
    # 2: one entry per hit, with its cost (1: one entry per unit of cost).
    state_version: ClassVar[int] = 2
    denial_holds_for_any_cost: ClassVar[bool] = False
    script: ClassVar[LuaScript] = SCRIPT

    @property
    def worst_case_bytes(self) -> int:
        """Return the most Redis memory one identity's log can take.

        That is a full window of hits of cost 1: one entry each, ``limit``
        entries. An estimate from measurements (:data:`BYTES_PER_ENTRY`).
        """
        if self.rate.limit <= LISTPACK_ENTRIES:
            return SMALL_LOG_BYTES
        return self.rate.limit * BYTES_PER_ENTRY

    def script_args(self, cost: int, commit: str) -> tuple[int, int, int, str]:
        return (self.rate.period_ms, self.rate.limit, cost, commit)

    def outcome(self, reply: Sequence[int]) -> Outcome:
        allowed, used, retry_ms, reset_ms = reply[:4]
        return new_tuple(
            Outcome, (bool(allowed), max(self.rate.limit - used, 0), retry_ms, reset_ms)
        )

    def times(self, node: RedisNode, key: str, now_ms: int | None = None) -> tuple[int, list[int]]:
        """Return ``(now, times)`` in ms: the scores of the entries in the window, newest first.

        One entry per allowed hit, scored by its time: for hits of cost 1
        (the DRF drop-in's), the times of the hits the window holds. ``now``
        is ``now_ms``, or else the decisions' clock (``node.now_ms``).
        """
        now = node.now_ms() if now_ms is None else now_ms
        # An entry is in the window while now < its score + the window. Scores
        # never go down, so one later than now (a clock that stepped back) is in.
        horizon = now - self.rate.period_ms
        # ZRANGE ... BYSCORE REV (Redis 6.2), not ZREVRANGEBYSCORE: the
        # least-privilege ACL rule (checks/acl.py) grants ZRANGE.
        _, (entries,) = node.pipeline(
            lambda pipe: pipe.zrange(
                key, "+inf", f"({horizon}", desc=True, byscore=True, withscores=True
            )
        )
        return now, [int(score) for _member, score in entries]

    def change(self, node: RedisNode, key: str, what: str, times: Sequence[int] = ()) -> Outcome:
        """Change the log without deciding; return what a hit of cost 1 would be told after.

        ``what``: ``"add"`` counts one hit at the decisions' time whatever
        the limit; ``"take"`` takes back the newest hit; ``"set"`` makes the
        log hold one hit at each of ``times`` (ms, oldest first). One round
        trip (see ``sliding_log_points.lua``).
        """
        args: list[int | str] = [self.rate.period_ms, self.rate.limit, what, *times]
        args.append(node.script_time())
        return self.outcome(POINTS.run(node.client, (key,), args))

    def reading(self, reply: Sequence[int]) -> Reading:
        used, entries = int(reply[1]), int(reply[4])
        detail = f"{counted(entries, 'entry', 'entries')} in the log"
        if used != entries:
            detail += f", {counted(used, 'unit')} of cost"
        return Reading(self.outcome(reply), used, detail)
