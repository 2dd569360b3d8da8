"""The example project as an ASGI application, for ``bench/endtoend_asgi.py`` (uvicorn)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.e2e_settings")

application = get_asgi_application()
