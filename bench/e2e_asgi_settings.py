"""``bench/e2e_settings.py`` with no middleware that hops to a thread (``--middleware lean``).

Django's own middleware (sessions, CSRF, auth, messages...) derive from
``MiddlewareMixin``, whose async call runs each request and response phase
in ``sync_to_async``: a thread hop per middleware per request, paid by every
async view of such a project, limited or not. This set-up keeps only
``RateLimitMiddleware`` (sync and async capable, no hop), so what the
decision costs on the loop is not hidden behind those hops.
"""

from __future__ import annotations

from bench.e2e_settings import *  # noqa: F403

MIDDLEWARE = ["django_rl.middleware.RateLimitMiddleware"]
