"""The DRF drop-in's hooks behave as DRF's, whoever calls them (docs/migrating.md).

``throttle_success`` records the request and ``throttle_failure`` records
nothing, exactly once per request, whether the drop-in's ``allow_request``
calls them or a subclass's does; ``self.cache`` reads and writes the
drop-in's own logs. Cases are checked against DRF's own throttle too (its
history in Django's cache, on the suite's Redis server).
"""

from __future__ import annotations

import pytest
import rest_framework.throttling as drf
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from django_rl.contrib import drf as dropin
from django_rl.contrib import throttle_logs
from django_rl.contrib.drf_policies import policy_for
from django_rl.signals import rate_limited
from tests.policies.test_fallback import dead_redis  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

FACTORY = APIRequestFactory()
IP = "192.0.2.40"
KEY = f"throttle_hooks_{IP}"


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {}}
    settings.DJANGO_RL = {}


def copied_body(base, rate="3/min"):
    """A subclass of ``base`` whose allow_request is DRF's body, copied (a common pattern)."""

    class Copied(base):
        scope = "hooks"

        def allow_request(self, request, view):
            if self.rate is None:
                return True
            self.key = self.get_cache_key(request, view)
            if self.key is None:
                return True
            self.history = self.cache.get(self.key, [])
            self.now = self.timer()
            while self.history and self.history[-1] <= self.now - self.duration:
                self.history.pop()
            if len(self.history) >= self.num_requests:
                return self.throttle_failure()
            return self.throttle_success()

    Copied.rate = rate
    return Copied


def failed_logins(base):
    """A throttle that counts failed logins only: it records (throttle_success) on a failure."""

    class FailedLogins(base):
        scope = "hooks"
        rate = "3/min"

        def allow_request(self, request, view):
            self.key = self.get_cache_key(request, view)
            self.history = self.cache.get(self.key, [])
            self.now = self.timer()
            while self.history and self.history[-1] <= self.now - self.duration:
                self.history.pop()
            if len(self.history) >= self.num_requests:
                return self.throttle_failure()
            return True

    class Login(APIView):
        throttle_classes = (FailedLogins,)

        def post(self, request):
            # Every login fails here: the view records it.
            throttle = FailedLogins()
            throttle.allow_request(request, self)
            throttle.throttle_success()
            return Response(status=401)

    return Login


def view_of(*throttles):
    class View(APIView):
        throttle_classes = throttles

        def get(self, request):
            return Response("ok")

    return View.as_view()


def statuses(view, n, method="get"):
    make = getattr(FACTORY, method)
    return [view(make("/", REMOTE_ADDR=IP)).status_code for _ in range(n)]


def _used() -> int:
    policy = policy_for("hooks", 3, 60)
    _, times = policy.backend.run(policy.key(KEY), policy.algorithm.times)
    return len(times)


def test_a_subclass_with_drfs_allow_request_body_is_limited_as_with_drf():
    assert statuses(view_of(copied_body(drf.AnonRateThrottle)), 10) == [200] * 3 + [429] * 7
    assert statuses(view_of(copied_body(dropin.AnonRateThrottle)), 10) == [200] * 3 + [429] * 7
    assert _used() == 3


def test_a_throttle_that_counts_only_failed_logins_is_limited_as_with_drf():
    drf_login = failed_logins(drf.AnonRateThrottle).as_view()
    assert statuses(drf_login, 10, "post") == [401] * 3 + [429] * 7
    login = failed_logins(dropin.AnonRateThrottle).as_view()
    assert statuses(login, 10, "post") == [401] * 3 + [429] * 7
    assert _used() == 3


def test_the_subclass_reads_what_the_dropin_counted_and_the_dropin_sees_its_records():
    class Plain(dropin.AnonRateThrottle):
        scope = "hooks"
        rate = "3/min"

    plain = view_of(Plain)
    assert statuses(plain, 2) == [200, 200]
    reader = copied_body(dropin.AnonRateThrottle)()
    request = Request(FACTORY.get("/", REMOTE_ADDR=IP))
    history = reader.cache.get(KEY, [])
    assert len(history) == 2
    assert history == sorted(history, reverse=True)  # newest first, as DRF keeps it
    # Its own decision sees them: one more is allowed, then none.
    assert reader.allow_request(request, None) is True
    assert len(reader.history) == 3 and reader.history[0] == reader.now
    assert copied_body(dropin.AnonRateThrottle)().allow_request(request, None) is False
    # And the drop-in's decisions see what it recorded.
    assert statuses(plain, 1) == [429]
    assert reader.cache.delete(KEY) is True
    assert (reader.cache.get(KEY), _used(), statuses(plain, 1)) == (None, 0, [200])


def test_each_throttle_success_call_counts_exactly_one():
    class Plain(dropin.AnonRateThrottle):
        scope = "hooks"
        rate = "3/min"

    request = Request(FACTORY.get("/", REMOTE_ADDR=IP))
    throttle = Plain()
    assert throttle.allow_request(request, None) is True  # its own throttle_success: no more
    assert _used() == 1
    assert throttle.throttle_success() is True
    assert _used() == 2
    assert throttle.throttle_success() is True
    assert throttle.throttle_success() is True  # past the limit, as DRF's records
    assert _used() == 4
    assert Plain().allow_request(request, None) is False
    assert throttle.throttle_failure() is False
    assert _used() == 4


def test_an_override_that_calls_ours_counts_once_and_one_that_does_not_counts_nothing():
    seen = []

    class Logged(dropin.AnonRateThrottle):
        scope = "hooks"
        rate = "3/min"

        def throttle_success(self):
            seen.append(self.key)
            return super().throttle_success()

    assert statuses(view_of(Logged), 5) == [200] * 3 + [429] * 2
    assert seen == [KEY] * 3
    assert _used() == 3

    policy_for("hooks", 3, 60).reset(KEY)

    class Uncounted(dropin.AnonRateThrottle):
        # DRF's: allow_request then records nothing; the view records what it wants.
        scope = "hooks"
        rate = "3/min"

        def throttle_success(self):
            return True

    assert statuses(view_of(Uncounted), 5) == [200] * 5
    assert _used() == 0
    throttle = Uncounted()
    throttle.allow_request(Request(FACTORY.get("/", REMOTE_ADDR=IP)), None)
    dropin.SimpleRateThrottle.throttle_success(throttle)
    assert _used() == 1


def test_drfs_throttle_success_body_copied_writes_the_history_back_once():
    class Written(dropin.AnonRateThrottle):
        scope = "hooks"
        rate = "3/min"

        def throttle_success(self):
            self.history.insert(0, self.now)
            self.cache.set(self.key, self.history, self.duration)
            return True

    assert statuses(view_of(copied_body(Written)), 10) == [200] * 3 + [429] * 7
    assert _used() == 3
    policy_for("hooks", 3, 60).reset(KEY)
    # Under the drop-in's own allow_request too: what it writes holds the request once.
    assert statuses(view_of(Written), 10) == [200] * 3 + [429] * 7
    assert _used() == 3


def test_the_dropins_own_decision_stays_one_round_trip(redis_client):
    class Plain(dropin.AnonRateThrottle):
        scope = "hooks"
        rate = "3/min"

    view = view_of(Plain)
    statuses(view, 1)  # connects, loads the script
    before = int(redis_client.info("stats")["total_reads_processed"])
    assert statuses(view, 2) == [200, 200]
    after = int(redis_client.info("stats")["total_reads_processed"])
    assert after - before == 2 + 1  # one read per decision, and the second INFO's
    assert _used() == 3


def test_a_zero_rate_has_drfs_empty_history_and_wait():
    class Zero(dropin.AnonRateThrottle):
        scope = "hooks"
        rate = "0/min"

    class DrfZero(drf.AnonRateThrottle):
        scope = "hooks"
        rate = "0/min"

    request = Request(FACTORY.get("/", REMOTE_ADDR=IP))
    ours, theirs = Zero(), DrfZero()
    assert ours.allow_request(request, None) is theirs.allow_request(request, None) is False
    assert ours.history == theirs.history == []
    assert ours.wait() == theirs.wait() == 60
    assert ours.cache.get(KEY, []) == []
    assert ours.throttle_success() is True  # nothing to count in: every request is denied
    assert statuses(view_of(Zero), 2) == [429, 429]
    assert statuses(view_of(copied_body(Zero, "0/min")), 2) == [429, 429]


def test_a_request_allowed_while_redis_cannot_answer_asks_nothing_more(
    monkeypatch,
    dead_redis,  # noqa: F811
):
    class Plain(dropin.AnonRateThrottle):
        scope = "hooks"
        rate = "3/min"

    class Uncounted(Plain):
        def throttle_success(self):
            return True

    changes = []
    real = throttle_logs.change_log  # what the drop-in's hooks call (contrib/throttle_logs.py)
    monkeypatch.setattr(
        throttle_logs, "change_log", lambda *a, **k: changes.append(a) or real(*a, **k)
    )
    for throttle in (Plain, Uncounted):
        request = Request(FACTORY.get("/", REMOTE_ADDR=IP))
        assert throttle().allow_request(request, None) is True  # FAIL_OPEN
        assert request.django_rl_decisions[0].degraded
    # Neither a record by throttle_success nor a take-back: nothing was counted.
    assert changes == []


@pytest.mark.parametrize("base", [drf.AnonRateThrottle, dropin.AnonRateThrottle])
def test_a_subclass_with_drfs_body_on_a_moved_clock_as_drfs_tests_move_it(base):
    moved = {"now": 1_000_000.0}

    class Moved(copied_body(base)):
        def timer(self):
            return moved["now"]

    view = view_of(Moved)
    assert statuses(view, 4) == [200, 200, 200, 429]
    moved["now"] += 59
    throttle = Moved()
    assert throttle.allow_request(Request(FACTORY.get("/", REMOTE_ADDR=IP)), None) is False
    assert throttle.wait() == pytest.approx(1.0)  # DRF's: the oldest leaves in 1 s
    moved["now"] += 2
    assert statuses(view, 4) == [200, 200, 200, 429]


def test_a_subclass_with_a_cache_of_its_own_has_drfs_writes_there():
    from django.core.cache import caches

    class OwnCache(copied_body(dropin.AnonRateThrottle)):
        cache = caches["default"]  # DRF's: django-redis here, the suite's server

    assert statuses(view_of(OwnCache), 10) == [200] * 3 + [429] * 7
    assert len(caches["default"].get(KEY)) == 3
    assert _used() == 0  # nothing in the drop-in's logs


def test_with_shadow_on_the_dropin_refuses_nothing_and_reports_each_would_be_denial(settings):
    settings.DJANGO_RL = {"SHADOW": True}
    sent = []

    def note(sender, **kwargs):
        sent.append((kwargs["policy"], kwargs["shadow"], kwargs["decision"].allowed))

    class Plain(dropin.AnonRateThrottle):
        scope = "hooks"
        rate = "1/min"

    rate_limited.connect(note)
    try:
        assert statuses(view_of(Plain), 3) == [200, 200, 200]
        # A subclass with DRF's body decides itself, from what was counted: as DRF would.
        assert statuses(view_of(copied_body(dropin.AnonRateThrottle, "1/min")), 1) == [429]
    finally:
        rate_limited.disconnect(note)
    assert sent == [("drf.hooks", True, False)] * 2
    # The allowed request was counted once; the shadow denials counted nothing, took nothing.
    assert (
        len(
            policy_for("hooks", 1, 60).backend.run(
                policy_for("hooks", 1, 60).key(KEY), policy_for("hooks", 1, 60).algorithm.times
            )[1]
        )
        == 1
    )
