"""The ASGI application daphne and uvicorn serve in ``tests/websockets/test_websocket_server.py``.

Websockets by path to the consumers of ``consumers.py``; the settings are
``settings_channels.py`` (the test's redis-server from the environment).
"""

from __future__ import annotations

import django

django.setup()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.urls import path  # noqa: E402

from tests.sites import consumers  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": get_asgi_application(),
        "websocket": URLRouter(
            [
                path("ws/async/", consumers.AsyncChat.as_asgi()),
                path("ws/sync/", consumers.SyncChat.as_asgi()),
            ]
        ),
    }
)
