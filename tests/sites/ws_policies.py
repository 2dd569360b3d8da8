"""The policies the websocket consumers of ``consumers.py`` name (no Channels import here).

Sliding logs: no window ends in the middle of a test.
"""

from __future__ import annotations

from typing import Any

POLICIES: dict[str, dict[str, Any]] = {
    "ws_connect": {"algorithm": "sliding_log", "rate": "2/m", "key": "ip"},
    "ws_message": {"algorithm": "sliding_log", "rate": "3/m", "key": "ip"},
    "ws_user_or_ip": {"algorithm": "sliding_log", "rate": "2/m", "key": "user_or_ip"},
    "ws_tenant": {"algorithm": "sliding_log", "rate": "2/m", "key": "header:X-Tenant"},
    "ws_slots": {"algorithm": "concurrency", "limit": 1, "timeout": 60, "key": "ip"},
}
