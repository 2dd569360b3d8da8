"""Drive Django's real ASGI handler in-process, the way an ASGI server does.

Unlike the test ``AsyncClient``, ``ASGIHandler`` gives every request its own
``ThreadSensitiveContext`` (its own thread for sync code), as in production.
"""

from __future__ import annotations

import asyncio
from typing import Any


def get_scope(
    path: str, client_ip: str = "127.0.0.1", headers: tuple[tuple[bytes, bytes], ...] = ()
) -> dict[str, Any]:
    """Return the ASGI scope of a GET of ``path`` from ``client_ip``, with ``headers`` added."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": (client_ip, 50000),
        "server": ("testserver", 80),
    }


async def asgi_messages(app: Any, path: str, client_ip: str = "127.0.0.1") -> list[dict[str, Any]]:
    """Send one GET through ``app``; return the messages it sent (start, then body)."""
    scope = get_scope(path, client_ip)
    pending = [{"type": "http.request", "body": b"", "more_body": False}]
    finished = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await finished.wait()  # the server only reports a disconnect after the response
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            finished.set()

    await app(scope, receive, send)
    return sent


def body_of(sent: list[dict[str, Any]]) -> bytes:
    """Return the body of an ASGI response's messages."""
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


async def asgi_get(app: Any, path: str, client_ip: str = "127.0.0.1") -> tuple[int, bytes]:
    """Send one GET through ``app``; return the status and the body."""
    sent = await asgi_messages(app, path, client_ip)
    return sent[0]["status"], body_of(sent)
