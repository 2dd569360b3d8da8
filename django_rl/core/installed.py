"""Whether ``"django_rl"`` is in ``INSTALLED_APPS``: one WARNING if a front door is used without it.

Without the app, Django never runs its ``AppConfig.ready``: ``manage.py
check`` judges none of ``DJANGO_RL`` (bad settings go unreported), and the
admin pages and overrides are not there. Limits still apply, so nothing else
would say so.

Recording a request's Decisions (``recording.record``, where every front
door's path ends) and the drop-ins test :data:`looked` on every request and
call :func:`look` only while it is ``False``: a boolean test is all a
request pays. ``AppConfig.ready`` sets it (the usual project never looks);
otherwise the first use with the app registry ready looks once, and logs one
WARNING on logger ``django_rl`` per process if the app is missing.
"""

from __future__ import annotations

import logging
import threading

from django.apps import apps

from django_rl.docs_urls import doc_url

logger = logging.getLogger("django_rl")

#: ``True`` once this process needs no look: ``AppConfig.ready`` ran, or :func:`look` did.
looked = False
#: Two first requests at once log one line: the look is made under it.
_lock = threading.Lock()


def ready() -> None:
    """Note that the app is installed (``AppConfig.ready``): no front door looks again."""
    global looked
    looked = True


def look() -> None:
    """Log one WARNING if ``"django_rl"`` is not in ``INSTALLED_APPS``; once per process.

    A use before the app registry is ready (a script before ``django.setup()``)
    does not count: the next use looks.
    """
    global looked
    with _lock:
        if looked or not apps.apps_ready:
            return
        looked = True
    if apps.is_installed("django_rl"):
        return
    logger.warning(
        'django_rl is used but "django_rl" is not in INSTALLED_APPS: manage.py check does '
        "not judge DJANGO_RL (a bad setting goes unreported), and the admin's pages and "
        'overrides are off. Add "django_rl" to INSTALLED_APPS. See %s',
        doc_url("checks"),
    )


__all__ = ["look", "looked", "ready"]
