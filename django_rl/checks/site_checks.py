"""The checks of the site-wide settings ``EXEMPT`` (``django_rl.E100``) and ``RULES``.

Reported by ``manage.py check`` only: a broken entry never stops the other
settings (``conf.get_settings`` does not raise for it); at request time it is
left out and logged once (``policies/exempt.py``).
"""

from __future__ import annotations

from collections.abc import Collection

from asgiref.sync import iscoroutinefunction
from django.utils.module_loading import import_string

from django_rl.core.problems import Problem
from django_rl.core.reprs import short_repr
from django_rl.docs_urls import doc_url
from django_rl.policies.exempt import is_callable_form, parse_entry
from django_rl.policies.site_rules import rule_problems

#: The hint of every ``EXEMPT`` problem.
EXEMPT_HINT = (
    "EXEMPT is a list of CIDR networks such as '10.0.0.0/8' or '2001:db8::/32' (an address "
    "alone for one host), or the dotted path of a function(request) -> bool: "
    + doc_url("security", "exempt-networks")
)


def exempt_problems(value: object) -> list[Problem]:
    """Return what is wrong with ``EXEMPT`` (``django_rl.E100``), each naming ``EXEMPT[i]``."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return []
    if is_callable_form(value):
        return _function_problems(value)
    if not isinstance(value, (list, tuple)):
        return [
            Problem(
                "django_rl.E100",
                f"DJANGO_RL['EXEMPT'] is {short_repr(value)}, not a list of networks or a function",
                EXEMPT_HINT,
            )
        ]
    problems = []
    for index, item in enumerate(value):
        entry = parse_entry(item)
        if entry.problem is not None:
            problems.append(
                Problem(
                    "django_rl.E100", f"DJANGO_RL['EXEMPT'][{index}] {entry.problem}", EXEMPT_HINT
                )
            )
    return problems


def _function_problems(value: object) -> list[Problem]:
    where = f"DJANGO_RL['EXEMPT'] {short_repr(value)}"
    function = value
    if isinstance(value, str):
        try:
            function = import_string(value)
        except ImportError as exc:
            return [Problem("django_rl.E100", f"{where} could not be imported: {exc}", EXEMPT_HINT)]
    if not callable(function):
        return [Problem("django_rl.E100", f"{where} is not callable", EXEMPT_HINT)]
    if iscoroutinefunction(function):
        return [Problem("django_rl.E100", f"{where} is an async function", EXEMPT_HINT)]
    return []


#: The hint of every ``RULES`` problem.
RULES_HINT = (
    "Each rule is {'path': '<regex>', 'policies': ['<name>', ...]}, with 'methods': "
    "['GET', 'POST', ...] optional; the regex is searched in request.path: "
    + doc_url("settings", "site-wide-rules")
)


def rules_problems(value: object, known: Collection[object]) -> list[Problem]:
    """Return what is wrong with ``RULES`` (``django_rl.E101``), each naming ``RULES[i]``.

    :param known: the names of the policies (settings and ``register_policy``).
    """
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return []
    if not isinstance(value, (list, tuple)):
        return [
            Problem(
                "django_rl.E101",
                f"DJANGO_RL['RULES'] is {short_repr(value)}, not a list",
                RULES_HINT,
            )
        ]
    problems = []
    for index, rule in enumerate(value):
        where = f"DJANGO_RL['RULES'][{index}]"
        found = rule_problems(index, rule)
        problems += [Problem("django_rl.E101", f"{where} {p}", RULES_HINT) for p in found]
        if found:
            continue
        for name in rule["policies"]:
            if name not in known:
                problems.append(
                    Problem(
                        "django_rl.E101",
                        f"{where} names policy {short_repr(name)}, which does not exist",
                        RULES_HINT,
                    )
                )
    return problems
