"""The metrics test site's WSGI application (``tests/metrics_site.py``)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.metrics_site")
application = get_wsgi_application()
