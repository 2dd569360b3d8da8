"""A policy's ``block_for`` and ``escalate`` keys, judged and parsed (``spec.py``'s part).

Durations: a positive number of seconds, or ``"<n><s|m|h|d>"`` (``"30s"``,
``"15m"``, ``"1h"``, ``"1d"``), at most :data:`MAX_DURATION_S` (a year).
``escalate``: a dict of exactly ``after`` (a whole number from 1),
``within`` and ``block_for`` (durations).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from django_rl.algorithms.blocking import BLOCKABLE, Blocking, Blocks
from django_rl.core.problems import Problem
from django_rl.core.reprs import short_repr
from django_rl.docs_urls import doc_url

#: The policy keys of blocks.
BLOCK_KEYS = frozenset({"block_for", "escalate"})
#: The longest duration: a year.
MAX_DURATION_S = 366 * 86_400
#: The most denials ``escalate`` may wait for.
MAX_AFTER = 1_000_000
_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}
_DURATION = re.compile(r"([0-9]{1,6})([smhd])")
_ESCALATE_KEYS = frozenset({"after", "within", "block_for"})

DURATION_HINT = "Write a positive number of seconds, or '30s', '15m', '1h', '1d' (at most a year). "
ESCALATE_HINT = (
    "Write e.g. {'after': 3, 'within': '1h', 'block_for': '1d'}: an identity denied 3 times "
    "within an hour is blocked for a day. "
)


def duration_ms(value: object) -> int | None:
    """Return ``value`` as a duration in ms, or ``None`` if it is not a valid one."""
    seconds: float
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.strip())
        if match is None:
            return None
        seconds = int(match[1]) * _UNITS[match[2]]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value
    else:
        return None
    if not (0 < seconds <= MAX_DURATION_S) or math.isnan(seconds):
        return None
    return max(1, math.ceil(seconds * 1000))


def blocks_problems(spec: Mapping[str, Any], where: str) -> tuple[Blocks | None, list[Problem]]:
    """Return the policy's :class:`Blocks` (``None``: no blocks) and what is wrong with them."""
    if not BLOCK_KEYS & set(spec):
        return None, []
    problems: list[Problem] = []
    hint = doc_url("settings", "blocks-and-escalation")
    block_ms = 0
    if "block_for" in spec:
        parsed = duration_ms(spec["block_for"])
        if parsed is None:
            problems.append(
                Problem(
                    "django_rl.E130",
                    f"{where}['block_for'] is {short_repr(spec['block_for'])}",
                    DURATION_HINT + hint,
                )
            )
        else:
            block_ms = parsed
    after = within = escalate_ms = 0
    if "escalate" in spec:
        escalate = spec["escalate"]
        why = _escalate_problem(escalate)
        if why is not None:
            problems.append(
                Problem("django_rl.E131", f"{where}['escalate'] {why}", ESCALATE_HINT + hint)
            )
        else:
            after = escalate["after"]
            within = duration_ms(escalate["within"]) or 0
            escalate_ms = duration_ms(escalate["block_for"]) or 0
    algorithm = spec.get("algorithm")
    if isinstance(algorithm, str) and algorithm not in BLOCKABLE:
        problems.append(
            Problem(
                "django_rl.E132",
                f"{where} sets {' and '.join(sorted(BLOCK_KEYS & set(spec)))}, which "
                f"{algorithm} does not take",
                f"Blocks apply to {', '.join(sorted(BLOCKABLE))}. " + hint,
            )
        )
    if problems:
        return None, problems
    return Blocks(block_ms, after, within, escalate_ms), []


def _escalate_problem(escalate: object) -> str | None:
    if not isinstance(escalate, Mapping):
        return f"must be a dict, not {short_repr(escalate)}"
    if set(escalate) != _ESCALATE_KEYS:
        return f"must have exactly the keys after, within and block_for, not {short_repr(escalate)}"
    after = escalate["after"]
    if type(after) is not int or not 1 <= after <= MAX_AFTER:
        return f"['after'] is {short_repr(after)}, not a whole number from 1 to {MAX_AFTER:,}"
    for name in ("within", "block_for"):
        if duration_ms(escalate[name]) is None:
            return f"[{name!r}] is {short_repr(escalate[name])}, not a duration"
    return None


def with_blocks(algorithm: Any, blocks: Blocks | None) -> Any:
    """Return ``algorithm`` with ``blocks`` in front (a static rate, or none: as it is)."""
    if blocks is None or algorithm is None or getattr(algorithm, "name", None) not in BLOCKABLE:
        return algorithm
    if isinstance(algorithm, Blocking):
        return algorithm
    return Blocking(algorithm, blocks)
