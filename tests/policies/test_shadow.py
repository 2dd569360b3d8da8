"""Shadow mode, the ``rate_limited`` signal and the denial log, through both front doors."""

from __future__ import annotations

import logging
import re
import time
from typing import ClassVar

import pytest
from django.core.checks import Error
from django.dispatch import receiver
from django.http import HttpResponse
from django.test import RequestFactory
from rest_framework.response import Response
from rest_framework.test import APIRequestFactory
from rest_framework.views import APIView

from django_rl import get_policy
from django_rl.checks.system import check_settings
from django_rl.decorators import ratelimit
from django_rl.observability.denials import DENIAL_LINES, RECEIVER_ERRORS, LineBudget
from django_rl.signals import rate_limited
from django_rl.throttling import PolicyThrottle
from tests.conftest import start_of_fresh_window

POLICIES = {
    "shadowed": {"algorithm": "fixed_window", "rate": "3/h", "key": "ip", "mode": "shadow"},
    "enforced": {"algorithm": "sliding_log", "rate": "5/h", "key": "ip"},
}
ADDRESS = "198.51.100.23"


@pytest.fixture(autouse=True)
def _limits(settings, redis_client):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    start_of_fresh_window(redis_client, 3_600_000, min_left_ms=60_000)
    DENIAL_LINES.reset()
    RECEIVER_ERRORS.reset()


@pytest.fixture
def sent():
    """Every ``rate_limited`` sent during the test, as its keyword arguments."""
    calls: list[dict] = []

    def note(sender, **kwargs):
        calls.append({"sender": sender, **kwargs})

    rate_limited.connect(note)
    yield calls
    rate_limited.disconnect(note)


def ok(request):
    return HttpResponse("ok")


def get(view, n, address=ADDRESS):
    factory = RequestFactory()
    requests = [factory.get("/", REMOTE_ADDR=address) for _ in range(n)]
    return [(view(r), r) for r in requests]


def test_a_shadow_policy_over_its_limit_answers_200_every_time(redis_client, sent):
    view = ratelimit("shadowed")(ok)
    answers = get(view, 10)
    assert [response.status_code for response, _ in answers] == [200] * 10
    # No rate-limit header names a policy that is not enforced.
    assert all("RateLimit-Policy" not in r and "RateLimit" not in r for r, _ in answers)
    assert [request.limited for _, request in answers] == [False] * 10
    decisions = [request.django_rl_decisions[0] for _, request in answers]
    assert [d.allowed for d in decisions] == [True] * 3 + [False] * 7
    assert all(d.shadow for d in decisions)
    # It counted as usual: the policy itself says the next hit would be denied.
    assert get_policy("shadowed").peek(f"ip:{ADDRESS}").allowed is False
    # Each would-be denial was reported, as a shadow one.
    assert [(c["policy"], c["identity"], c["shadow"]) for c in sent] == [
        ("shadowed", f"ip:{ADDRESS}", True)
    ] * 7
    assert all(c["sender"] == "shadowed" and c["decision"].shadow for c in sent)
    assert [c["decision"] for c in sent] == decisions[3:]
    assert all(c["request"] is request for c, (_, request) in zip(sent, answers[3:], strict=True))


def test_beside_an_enforced_policy_only_the_enforced_one_denies_and_is_reported_in_headers(sent):
    view = ratelimit("shadowed", "enforced")(ok)
    answers = get(view, 7)
    assert [r.status_code for r, _ in answers] == [200] * 5 + [429] * 2
    for response, _ in answers:
        assert "shadowed" not in response["RateLimit-Policy"]
        assert response["RateLimit-Policy"].startswith('"enforced"')
    assert 1 <= int(answers[-1][0]["Retry-After"]) <= 3600
    assert [request.limited for _, request in answers] == [False] * 5 + [True] * 2
    # Would-be denials of the shadow policy from the 4th request; real ones from the 6th.
    assert [(c["policy"], c["shadow"]) for c in sent] == [
        ("shadowed", True),
        ("shadowed", True),
        ("shadowed", True),
        ("enforced", False),
        ("shadowed", True),
        ("enforced", False),
    ]


def test_the_shadow_setting_puts_every_policy_in_shadow(settings, sent):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "SHADOW": True}
    named = ratelimit("enforced")(ok)
    inline = ratelimit(rate="2/h", key="ip", group="shadow-test")(ok)
    assert [r.status_code for r, _ in get(named, 8)] == [200] * 8
    assert [r.status_code for r, _ in get(inline, 4)] == [200] * 4
    assert [(c["policy"], c["shadow"]) for c in sent] == [("enforced", True)] * 3 + [
        ("@shadow-test", True)
    ] * 2


class ShadowThrottled(APIView):
    throttle_classes: ClassVar[list[type]] = [PolicyThrottle]
    throttle_scope = "shadowed"

    def get(self, request):
        return Response({"ok": True})


def test_drf_views_let_a_shadow_policy_through(sent):
    view = ShadowThrottled.as_view()
    factory = APIRequestFactory()
    codes = [view(factory.get("/", REMOTE_ADDR=ADDRESS)).status_code for _ in range(5)]
    assert codes == [200] * 5
    assert [(c["policy"], c["shadow"]) for c in sent] == [("shadowed", True)] * 2


def test_a_receiver_that_raises_does_not_break_the_request(caplog):
    @receiver(rate_limited)
    def broken(sender, **kwargs):
        raise RuntimeError("boom")

    try:
        with caplog.at_level(logging.ERROR, logger="django_rl"):
            view = ratelimit("enforced")(ok)
            codes = [r.status_code for r, _ in get(view, 7)]
    finally:
        rate_limited.disconnect(broken)
    assert codes == [200] * 5 + [429, 429]
    errors = [r for r in caplog.records if r.name == "django_rl"]
    # At most one such line a second: the two denials came well within one.
    assert 1 <= len(errors) <= 2
    assert "raised RuntimeError" in errors[0].getMessage()
    assert errors[0].exc_info is not None


def test_one_log_line_per_denial(caplog):
    with caplog.at_level(logging.INFO, logger="django_rl.denials"):
        view = ratelimit("shadowed", "enforced")(ok)
        get(view, 6)
    lines = [r.getMessage() for r in caplog.records if r.name == "django_rl.denials"]
    shadow = rf"Policy 'shadowed' \(shadow mode\) would have denied 'ip:{ADDRESS}': "
    shadow += r"Retry-After \d+ s; not enforced"
    enforced = rf"Policy 'enforced' denied 'ip:{ADDRESS}': Retry-After \d+ s"
    # 3 would-be denials (the 4th to 6th requests), 1 real one (the 6th).
    assert [bool(re.fullmatch(shadow, line)) for line in lines] == [True, True, True, False]
    assert re.fullmatch(enforced, lines[3])


def test_a_client_chosen_identity_cannot_forge_a_log_line(settings, caplog):
    settings.DJANGO_RL = {
        "POLICIES": {"h": {"algorithm": "fixed_window", "rate": "1/h", "key": "header:X-Id"}}
    }
    view = ratelimit("h")(ok)
    forged = "a\nPolicy 'login' denied 'ip:10.0.0.1': Retry-After 1 s" + "x" * 500
    factory = RequestFactory()
    with caplog.at_level(logging.INFO, logger="django_rl.denials"):
        for _ in range(2):
            view(factory.get("/", HTTP_X_ID=forged))
    (line,) = [r.getMessage() for r in caplog.records if r.name == "django_rl.denials"]
    assert "\n" not in line
    assert len(line) < 200


def wait_for_a_fresh_second() -> None:
    """Sleep until just after a second of the monotonic clock begins."""
    time.sleep(1 - time.monotonic() % 1 + 0.01)


def test_the_log_budget_writes_at_most_its_lines_a_second_and_says_how_many_it_left_out():
    budget = LineBudget(10)
    wait_for_a_fresh_second()
    taken = [budget.take()[0] for _ in range(25)]  # microseconds: well within the second
    assert taken == [True] * 10 + [False] * 15
    wait_for_a_fresh_second()
    may, dropped, since = budget.take()
    assert (may, dropped) == (True, 15)
    assert time.time() - 2.5 < since < time.time()
    assert budget.take()[1] == 0


def test_a_flood_of_denials_writes_ten_lines_a_second(caplog):
    view = ratelimit("enforced")(ok)
    get(view, 5)
    with caplog.at_level(logging.INFO, logger="django_rl.denials"):
        wait_for_a_fresh_second()
        get(view, 40)  # answered by the deny cache: a few ms
        wait_for_a_fresh_second()
        get(view, 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "django_rl.denials"]
    assert len(lines) == 11
    assert "left out" not in lines[9]
    assert re.fullmatch(
        rf"Policy 'enforced' denied 'ip:{ADDRESS}': Retry-After \d+ s \(30 denial lines left "
        r"out since \d\d:\d\d:\d\d: at most 10 a second per process\)",
        lines[10],
    )


@pytest.mark.parametrize(
    ("rl", "expected"),
    [
        (
            {"POLICIES": {"p": {"algorithm": "fixed_window", "rate": "5/m", "mode": "dry"}}},
            Error(
                "DJANGO_RL['POLICIES']['p']['mode'] is 'dry'",
                hint="Use 'enforce' (the default: the policy denies) or 'shadow' (it counts and "
                "reports what it would deny, and never denies).",
                id="django_rl.E032",
            ),
        ),
        (
            {"SHADOW": "yes"},
            Error(
                "DJANGO_RL['SHADOW'] is 'yes'",
                hint="It must be True (every policy in shadow mode: it counts but never denies) "
                "or False.",
                id="django_rl.E002",
            ),
        ),
    ],
)
def test_bad_modes_are_check_errors(settings, rl, expected):
    settings.DJANGO_RL = rl
    settings.ROOT_URLCONF = "tests.sites.urls_without_limits"
    assert expected in check_settings(None)
