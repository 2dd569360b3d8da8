"""The DRF drop-in's history and cache under the documented least-privilege ACL rule.

A subclass that reads DRF's history itself (``self.cache.get(self.key,
[])``) must see what the drop-in counted when django_rl connects as the
user of ``acl_rule()`` (docs/security.md): the log is read with a command
that rule grants.
"""

from __future__ import annotations

import pytest
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from django_rl.checks.acl import acl_rule
from django_rl.contrib.drf import AnonRateThrottle
from tests.checks.test_server_checks import connect_as

pytestmark = pytest.mark.django_db


def test_history_and_cache_read_the_log_as_the_acl_user(settings, private_redis):
    admin = private_redis.client()
    try:
        admin.execute_command("ACL", "SETUSER", "checker", *acl_rule().split(), ">secret")
    finally:
        admin.close()
    connect_as(settings, private_redis, f"redis://checker:secret@127.0.0.1:{private_redis.port}")
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "3/min"}}
    settings.DJANGO_RL = {}
    request = Request(APIRequestFactory().get("/", REMOTE_ADDR="192.0.2.1"))
    throttle = AnonRateThrottle()
    assert throttle.allow_request(request, None) is True
    assert len(throttle.history) == 1
    assert throttle.throttle_success() is True  # a second request recorded
    reader = AnonRateThrottle()
    assert len(reader.cache.get("throttle_anon_192.0.2.1", [])) == 2
    reader.cache.set("throttle_anon_192.0.2.1", [*throttle.history, throttle.now - 1])
    assert len(reader.cache.get("throttle_anon_192.0.2.1", [])) == 3
    assert AnonRateThrottle().allow_request(request, None) is False
