"""The check of ``STATUS_POLICIES`` (``django_rl.E120``): the status view's policies."""

from __future__ import annotations

from collections.abc import Collection

from django_rl.core.problems import Problem
from django_rl.core.reprs import short_repr
from django_rl.docs_urls import doc_url

#: The hint of every ``STATUS_POLICIES`` problem.
STATUS_HINT = (
    "STATUS_POLICIES is a list of the names of policies (in POLICIES, or registered with "
    "register_policy) that the status view reports, or None for every policy in POLICIES: "
    + doc_url("usage", "the-status-view")
)


def status_policies_problems(value: object, known: Collection[object]) -> list[Problem]:
    """Return what is wrong with ``STATUS_POLICIES``, each naming ``STATUS_POLICIES[i]``.

    :param known: the names of the policies (settings and ``register_policy``).
    """
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        return [
            Problem(
                "django_rl.E120",
                f"DJANGO_RL['STATUS_POLICIES'] is {short_repr(value)}, not a list",
                STATUS_HINT,
            )
        ]
    problems = []
    for index, name in enumerate(value):
        where = f"DJANGO_RL['STATUS_POLICIES'][{index}]"
        if not isinstance(name, str):
            problems.append(
                Problem("django_rl.E120", f"{where} is {short_repr(name)}, not a name", STATUS_HINT)
            )
        elif name not in known:
            problems.append(
                Problem(
                    "django_rl.E120",
                    f"{where} names policy {short_repr(name)}, which does not exist",
                    STATUS_HINT,
                )
            )
    return problems
