"""``DJANGO_RL["RULES"]``: limits by path (and method) over the whole site, compiled once.

``RULES`` is a list of ``{"path": "<regex>", "methods": [...] (optional),
"policies": [names]}``. ``RateLimitMiddleware`` asks :data:`RULES`
``.matching(request)`` before the view runs and decides the Limits it gets
together with the view's own (``engine.decide_together``).

The regexes are the project's, never a client's: a request's path is
matched by at most one ``re.search`` per rule (and one more, of all the
rules joined, that answers "none" for the usual path at once). Rules are
compiled on first use and again after a settings change
(``conf.forget_on_change``). A rule that is broken (a regex that does not
compile, an unknown method, no policies, a policy that does not exist or is
invalid: ``manage.py check`` reports each, ``django_rl.E101``) is left out
and logged once; the others apply. Never a 500.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django_rl.conf import forget_on_change, get_settings
from django_rl.core.reprs import short_repr
from django_rl.exceptions import ConfigurationError
from django_rl.policies.engine import Limit
from django_rl.policies.exempt import EXEMPTIONS
from django_rl.policies.registry import get_policy

logger = logging.getLogger("django_rl")

#: The methods a rule may name (HEAD is counted wherever GET is, as for ``@ratelimit``).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"})
#: The keys a rule may have.
RULE_KEYS = frozenset({"path", "methods", "policies"})
#: A back reference: patterns with one are never joined (their group numbers would move).
_BACK_REFERENCE = re.compile(r"\\[1-9]|\(\?P=")


@dataclass(frozen=True)
class Rule:
    """One rule compiled: its regex's ``search``, and the Limit of its policies and methods."""

    index: int
    search: Any
    limit: Limit


def rule_problems(index: int, rule: object) -> list[str]:
    """Return what is wrong with ``RULES[index]`` on its own (not whether its policies exist)."""
    if not isinstance(rule, Mapping):
        return [f"is {short_repr(rule)}, not a dict with 'path' and 'policies'"]
    problems = []
    unknown = sorted(set(rule) - RULE_KEYS, key=short_repr)
    if unknown:
        problems.append(f"has unknown keys: {', '.join(map(short_repr, unknown))}")
    path = rule.get("path")
    if not isinstance(path, str):
        problems.append(f"'path' is {short_repr(path)}, not a regex string")
    else:
        try:
            re.compile(path)
        except re.error as exc:
            problems.append(f"'path' {short_repr(path)} does not compile: {exc}")
    methods = rule.get("methods")
    if methods is not None:
        if not isinstance(methods, (list, tuple, set, frozenset)) or not methods:
            problems.append(f"'methods' is {short_repr(methods)}, not a list of HTTP methods")
        else:
            bad = [m for m in methods if not isinstance(m, str) or m.upper() not in METHODS]
            if bad:
                problems.append(f"'methods' has unknown methods: {', '.join(map(short_repr, bad))}")
    policies = rule.get("policies")
    if (
        not isinstance(policies, (list, tuple))
        or not policies
        or not all(isinstance(p, str) for p in policies)
    ):
        problems.append(f"'policies' is {short_repr(policies)}, not a list of policy names")
    return problems


def _methods(rule: Mapping[str, Any]) -> frozenset[str] | None:
    methods = rule.get("methods")
    if methods is None:
        return None
    upper = frozenset(str(m).upper() for m in methods)
    return upper | {"HEAD"} if "GET" in upper else upper


def compile_rules(value: object) -> tuple[list[Rule], Any]:
    """Return the usable rules of ``RULES`` and a search of them all joined (or ``None``)."""
    if not isinstance(value, (list, tuple)):
        if value:
            _once(f" is {short_repr(value)}, not a list of rules")
        return [], None
    rules = []
    for index, rule in enumerate(value):
        problems = rule_problems(index, rule)
        if problems:
            _once(f"[{index}] {problems[0]}: left out")
            continue
        names = tuple(dict.fromkeys(rule["policies"]))
        try:
            for name in names:
                get_policy(name)
        except ConfigurationError as exc:
            _once(f"[{index}] names a policy that cannot be used ({exc}): left out")
            continue
        limit = Limit(names, methods=_methods(rule))
        rules.append(Rule(index, re.compile(rule["path"]).search, limit))
    joined = None
    sources = [value[r.index]["path"] for r in rules]
    if rules and not any(_BACK_REFERENCE.search(s) for s in sources):
        try:
            joined = re.compile("|".join(f"(?:{s})" for s in sources)).search
        except re.error:  # e.g. one name for groups of two rules: no shortcut
            joined = None
    return rules, joined


_logged: set[str] = set()
_logged_lock = threading.Lock()


def _once(cause: str) -> None:
    with _logged_lock:
        if cause in _logged or len(_logged) >= 256:
            return
        _logged.add(cause)
    logger.error("DJANGO_RL['RULES']%s; the other rules apply (run manage.py check)", cause)


class SiteRules:
    """``RULES`` compiled once per settings generation; :meth:`matching` per request.

    :ivar on: ``False`` once read and empty (the middleware's one test).
    """

    __slots__ = ("_joined", "_rules", "on")

    def __init__(self) -> None:
        self.on = True
        self._rules: list[Rule] | None = None
        self._joined: Any = None

    def matching(self, request: Any) -> list[Limit]:
        """Return the Limits of the rules that match ``request`` (path and method), in order."""
        rules = self._rules
        if rules is None:
            rules = self._compile()
        path = request.path
        joined = self._joined
        if joined is not None and joined(path) is None:
            return []
        method = request.method
        return [
            rule.limit
            for rule in rules
            if rule.search(path) is not None
            and (rule.limit.methods is None or method in rule.limit.methods)
        ]

    def _compile(self) -> list[Rule]:
        try:
            raw = get_settings().rules
        except ConfigurationError as exc:
            _once(f": not read, the settings are wrong: {exc}")
            raw = ()
        rules, joined = compile_rules(raw)
        self._rules, self._joined = rules, joined
        self.on = bool(rules)
        EXEMPTIONS.predeciding(self.on)
        return rules

    def forget(self) -> None:
        """Compile ``RULES`` again on next use (the settings changed)."""
        self._rules = None
        self._joined = None
        self.on = True
        with _logged_lock:
            _logged.clear()


#: The process's one reader of ``RULES``.
RULES = SiteRules()
forget_on_change(RULES.forget, "DJANGO_RL", "CACHES")


def rule_sources(value: object) -> Sequence[object]:
    """Return ``RULES`` as a sequence of entries (empty when it is not a list)."""
    return value if isinstance(value, (list, tuple)) else ()


__all__ = ["METHODS", "RULES", "Rule", "SiteRules", "compile_rules", "rule_problems"]
