"""django-ratelimit 4.x's API, decided by django_rl: switch by replacing ``django_ratelimit``.

``from django_rl.contrib.ratelimit.decorators import ratelimit`` and the rest
of the original's modules (``.core``, ``.exceptions``, ``.middleware``) keep
its names, arguments, settings (``RATELIMIT_*``) and answers; the counting is
django_rl's: exact under concurrency, one round trip to Redis per decision.
Where it differs on purpose is listed in docs/migrating.md.
"""

from __future__ import annotations

#: Every HTTP method (``method=ALL``, the default); a sentinel, as in django-ratelimit.
ALL: tuple[None] = (None,)
#: The methods that change state: ``method=UNSAFE``.
UNSAFE: list[str] = ["DELETE", "PATCH", "POST", "PUT"]
