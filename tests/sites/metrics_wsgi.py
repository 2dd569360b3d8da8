"""The metrics test site's WSGI application (``tests/sites/metrics_site.py``).

With ``METRICS_DECIDE_AT_LOAD`` set, the process that loads it (gunicorn's
master under ``--preload``) makes one decision of the ``enforced`` policy
before the workers are forked from it.
"""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.sites.metrics_site")
application = get_wsgi_application()

if os.environ.get("METRICS_DECIDE_AT_LOAD"):
    from django_rl import get_policy

    assert get_policy("enforced").hit("ip:192.0.2.250").allowed
