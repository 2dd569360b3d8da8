"""Names the modules of checks share (``system.py``, the drop-ins' checks).

It imports nothing, so any of them can import it without an import cycle.
"""

#: The tag of the checks that read only settings and code (no Redis): what
#: ``manage.py ratelimit`` runs before it starts. ``manage.py check`` runs
#: these and the server's (``server_checks.py``).
from __future__ import annotations

SETTINGS_TAG = "django_rl_settings"
#: The cache backend whose connections django_rl decides on.
DJANGO_REDIS_BACKEND = "django_redis.cache.RedisCache"
