"""``manage.py check`` for Celery tasks limited by django_rl (``django_rl.E160``..``E162``).

Every imported subclass of :class:`~django_rl.contrib.celery.RateLimitedTask`
(those ``@app.task(base=RateLimitedTask, ...)`` and ``@shared_task`` make
included: the loaded Celery apps are finalized first, which makes their
tasks' classes) must name policies that exist (``E160``) and can decide a
task: a list of names, none with per-plan rates, which need a request
(``E161``); its ``rate_key`` must be ``None`` or callable (``E162``).
Imports no Celery: a project without it, or that never imported
``django_rl.contrib.celery``, has nothing to check.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from django.core.checks import CheckMessage, Error, register

from django_rl.checks.names import SETTINGS_TAG
from django_rl.core.reprs import short_repr
from django_rl.docs_urls import doc_url
from django_rl.exceptions import ConfigurationError, UnknownPolicy
from django_rl.policies.registry import get_policy

MODULE = "django_rl.contrib.celery"
HINT = "Name policies of DJANGO_RL['POLICIES'] (or register_policy) in rate_policies: see {url}"


@register(SETTINGS_TAG)
def check_celery_tasks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Report the bad ``rate_policies`` and ``rate_key`` of every imported limited task."""
    module = sys.modules.get(MODULE)
    if module is None:
        return []
    _finalize_celery_apps()
    errors: list[CheckMessage] = []
    for task in _subclasses(module.RateLimitedTask):
        errors += _task_problems(task)
    return errors


def _finalize_celery_apps() -> None:
    """Make the classes of the tasks Celery apps only promised (``@app.task``, ``@shared_task``)."""
    state = sys.modules.get("celery._state")
    if state is None:
        return
    for app in list(state._get_active_apps()):
        try:
            app.finalize(auto=True)
        except Exception:  # an app that will not finalize: check what exists
            continue


def _subclasses(base: type) -> Iterator[type]:
    seen: set[type] = set()
    stack: list[type] = list(base.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.add(cls)
            stack += cls.__subclasses__()
            yield cls


def _task_problems(task: type) -> list[CheckMessage]:
    name = getattr(task, "name", None) or f"{task.__module__}.{task.__qualname__}"
    url = doc_url("tasks", "celery-tasks")
    errors: list[CheckMessage] = []
    names = getattr(task, "rate_policies", ())
    if isinstance(names, str) or not isinstance(names, list | tuple):
        return [
            Error(
                f"Task {name}: rate_policies must be a list of policy names, "
                f"not {short_repr(names)}.",
                hint=HINT.format(url=url),
                obj=task,
                id="django_rl.E161",
            )
        ]
    for policy_name in names:
        errors += _policy_problems(task, name, policy_name, url)
    key = getattr(task, "rate_key", None)
    if key is not None and not callable(key):
        errors.append(
            Error(
                f"Task {name}: rate_key must be a callable of the task's arguments, "
                f"not {short_repr(key)}.",
                hint=f"Return the identity to count from the task's args and kwargs: see {url}",
                obj=task,
                id="django_rl.E162",
            )
        )
    return errors


def _policy_problems(task: type, name: str, policy_name: object, url: str) -> list[CheckMessage]:
    if not isinstance(policy_name, str):
        return [
            Error(
                f"Task {name}: rate_policies holds {short_repr(policy_name)}, not a policy name.",
                hint=HINT.format(url=url),
                obj=task,
                id="django_rl.E161",
            )
        ]
    try:
        policy = get_policy(policy_name)
    except UnknownPolicy:
        return [
            Error(
                f"Task {name} names the rate-limit policy {short_repr(policy_name)}, "
                "which does not exist.",
                hint=HINT.format(url=url),
                obj=task,
                id="django_rl.E160",
            )
        ]
    except ConfigurationError:
        return []  # the policy's own problem: the settings checks report it
    if policy.rates is not None:
        return [
            Error(
                f"Task {name} names the policy {short_repr(policy_name)}, whose rate is "
                "chosen per request (a rate function): a task has no request.",
                hint=f"Give the task a policy with a fixed rate: see {url}",
                obj=task,
                id="django_rl.E161",
            )
        ]
    return []
