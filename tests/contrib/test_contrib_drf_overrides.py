"""Admin overrides of the DRF drop-in's policies, by address as well as by cache key.

The drop-in counts a request under its throttle's cache key
(``throttle_anon_192.0.2.7``). An override whose target is an address or a
network (stored as ``ip:...``, as for the ``ip`` key) applies to every
request whose cache key stands for that address.
"""

from __future__ import annotations

import datetime

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory, force_authenticate
from rest_framework.views import APIView

from django_rl.admin.override_form import OverrideForm
from django_rl.contrib.drf import AnonRateThrottle, UserRateThrottle
from django_rl.models import Override
from django_rl.overrides import LOADER

pytestmark = pytest.mark.django_db

FACTORY = APIRequestFactory()


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"anon": "2/min", "user": "2/min"}}
    settings.DJANGO_RL = {}


class Anon(APIView):
    throttle_classes = (AnonRateThrottle,)

    def get(self, request):
        return Response("ok")


class PerUser(APIView):
    throttle_classes = (UserRateThrottle,)

    def get(self, request):
        return Response("ok")


def statuses(view, n, ip, user=None):
    codes = []
    for _ in range(n):
        request = FACTORY.get("/", REMOTE_ADDR=ip)
        if user is not None:
            force_authenticate(request, user)
        codes.append(view.as_view()(request).status_code)
    return codes


def save(policy, identity, action, rate=""):
    """Save an override through the admin's form, as an operator would; load it."""
    expires = timezone.now() + datetime.timedelta(hours=1)
    form = OverrideForm(
        data={
            "policy": policy,
            "identity": identity,
            "action": action,
            "rate": rate,
            "expires_at_0": expires.strftime("%Y-%m-%d"),
            "expires_at_1": expires.strftime("%H:%M:%S"),
            "expires_at": expires.strftime("%Y-%m-%d %H:%M:%S"),
            "reason": "tests",
        }
    )
    assert form.is_valid(), form.errors
    form.save()
    assert LOADER.load()


def test_an_address_override_of_drf_anon_applies_to_that_clients_requests():
    assert statuses(Anon, 1, "192.0.2.7") == [200]  # the process now knows drf.anon
    save("drf.anon", "192.0.2.7", "block")
    assert statuses(Anon, 2, "192.0.2.7") == [429, 429]
    assert statuses(Anon, 3, "192.0.2.8") == [200, 200, 429]  # others as before


def test_a_network_or_ipv6_address_override_of_drf_anon_applies():
    statuses(Anon, 1, "198.51.100.1")
    save("drf.anon", "198.51.100.0/24", "exempt")
    assert statuses(Anon, 5, "198.51.100.9") == [200] * 5
    save("drf.anon", "2001:db8::1", "rate", "4/min")  # stored as its /64, as requests count
    assert statuses(Anon, 5, "2001:db8::5") == [200] * 4 + [429]
    assert statuses(Anon, 3, "2001:db8:1::5") == [200, 200, 429]


def test_the_cache_key_as_target_still_applies_and_an_authenticated_users_key_is_not_an_address():
    Override.objects.create(
        policy="drf.anon",
        identity="throttle_anon_192.0.2.20",
        action="block",
        expires_at=timezone.now() + datetime.timedelta(hours=1),
    )
    Override.objects.create(
        policy="drf.user",
        identity="ip:192.0.2.21",
        action="exempt",
        expires_at=timezone.now() + datetime.timedelta(hours=1),
    )
    assert LOADER.load()
    assert statuses(Anon, 1, "192.0.2.20") == [429]
    assert statuses(PerUser, 4, "192.0.2.21") == [200] * 4  # anonymous: counted by address
    user = User.objects.create(username="u")
    # Counted by user id: the address override is not about this client.
    assert statuses(PerUser, 3, "192.0.2.21", user=user) == [200, 200, 429]
