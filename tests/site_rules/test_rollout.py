"""``enforce_percent``: a stable share of identities enforced, the others in shadow mode."""

from __future__ import annotations

import datetime
import math
import subprocess
import sys

import pytest
from django.core.checks import Error
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils import timezone
from prometheus_client import REGISTRY

from django_rl import get_policy, hit_many
from django_rl.checks.system import check_settings
from django_rl.decorators import ratelimit
from django_rl.models import Override
from django_rl.observability.metrics import metrics
from django_rl.overrides.loader import LOADER
from django_rl.policies.rollout import enforced
from django_rl.signals import rate_limited

IDENTITIES = [f"ip:10.{i // 65536}.{i // 256 % 256}.{i % 256}" for i in range(10_000)]
POLICIES = {
    "half": {"algorithm": "fixed_window", "rate": "1/h", "key": "ip", "enforce_percent": 50},
    "full": {"algorithm": "sliding_log", "rate": "5/h", "key": "ip"},
}


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES, "HISTORY": False}


def enforced_set(name: str, percent: float) -> set[str]:
    return {i for i in IDENTITIES if enforced(name, i, percent)}


def test_the_share_enforced_is_within_two_points_at_any_percent():
    for percent in (0, 1, 5, 10, 25, 30, 50, 60, 75, 90, 99, 100):
        share = len(enforced_set("api", percent)) / len(IDENTITIES) * 100
        assert abs(share - percent) <= 2, (percent, share)
    assert 2800 <= len(enforced_set("api", 30)) <= 3200


def test_raising_the_percent_only_adds_identities():
    previous: set[str] = set()
    for percent in range(0, 101, 5):
        now = enforced_set("api", percent)
        assert previous <= now
        previous = now
    assert enforced_set("api", 30) < enforced_set("api", 60)


def test_the_same_identities_in_another_process():
    code = (
        "from django_rl.policies.rollout import enforced\n"
        "ids = [f'ip:10.{i // 65536}.{i // 256 % 256}.{i % 256}' for i in range(10_000)]\n"
        "print(','.join(str(n) for n, i in enumerate(ids) if enforced('api', i, 30)))\n"
    )
    # Another hash seed, another process: the same choice.
    env = {"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()
    there = {IDENTITIES[int(n)] for n in out.split(",")}
    assert there == enforced_set("api", 30)


def test_different_policies_choose_different_identities():
    assert enforced_set("api", 50) != enforced_set("other", 50)


def ok(request):
    return HttpResponse("ok")


def inside_and_outside(name: str, percent: float) -> tuple[str, str]:
    inside = next(i for i in IDENTITIES if enforced(name, i, percent))
    outside = next(i for i in IDENTITIES if not enforced(name, i, percent))
    return inside.removeprefix("ip:"), outside.removeprefix("ip:")


def sample(policy: str, result: str) -> float:
    found = metrics()
    if found is not None:
        found.flush()
    labels = {"policy": policy, "result": result}
    return REGISTRY.get_sample_value("django_rl_decisions_total", labels) or 0.0


def test_an_identity_outside_is_decided_in_shadow_mode(redis_client):
    inside, outside = inside_and_outside("half", 50)
    view = ratelimit("half")(ok)
    factory = RequestFactory()
    sent: list[dict] = []

    def note(sender, **kwargs):
        sent.append(kwargs)

    rate_limited.connect(note)
    shadow_before = sample("half", "shadow_denied")
    denied_before = sample("half", "denied")
    try:
        out = [view(factory.get("/", REMOTE_ADDR=outside)) for _ in range(3)]
        into = [view(factory.get("/", REMOTE_ADDR=inside)) for _ in range(3)]
    finally:
        rate_limited.disconnect(note)
    assert [r.status_code for r in out] == [200, 200, 200]
    assert [r.status_code for r in into] == [200, 429, 429]
    assert sample("half", "shadow_denied") - shadow_before == 2
    assert sample("half", "denied") - denied_before == 2
    assert [(s["identity"], s["shadow"]) for s in sent] == [(f"ip:{outside}", True)] * 2 + [
        (f"ip:{inside}", False)
    ] * 2
    # Policy.hit answers what a shadow policy's does.
    policy = get_policy("half")
    decision = policy.hit(f"ip:{outside}")
    assert (decision.allowed, decision.shadow, decision.denies) == (False, True, False)
    assert policy.peek(f"ip:{outside}").shadow is True
    assert policy.hit(f"ip:{inside}").denies is True


def test_an_identity_outside_does_not_veto_the_others(redis_client):
    _inside, outside = inside_and_outside("half", 50)
    policy = get_policy("half")
    policy.hit(f"ip:{outside}")  # its one hit: the next would be denied
    decisions = hit_many([("half", f"ip:{outside}", 1), ("full", f"ip:{outside}", 1)])
    assert [(d.allowed, d.shadow) for d in decisions] == [(False, True), (True, False)]
    assert get_policy("full").peek(f"ip:{outside}").remaining == 4  # counted


@pytest.mark.django_db
def test_an_admin_override_of_the_percent_applies_without_a_deploy(redis_client):
    inside, outside = inside_and_outside("half", 50)
    policy = get_policy("half")
    Override.objects.create(
        policy="half",
        identity="*",
        action="percent",
        rate="100",
        expires_at=timezone.now() + datetime.timedelta(minutes=10),
        reason="tests",
    )
    assert LOADER.load()
    policy.hit(f"ip:{outside}")
    assert policy.hit(f"ip:{outside}").denies is True  # enforced for everyone now
    Override.objects.update(rate="0")
    assert LOADER.load()
    assert policy.hit(f"ip:{inside}").denies is False  # nobody enforced
    Override.objects.all().delete()
    assert LOADER.load()
    assert policy.partial is True  # its own 50 %
    full = get_policy("full")
    assert full.partial is False


@pytest.mark.parametrize("value", [101, -1, "50", True, math.nan, None])
def test_a_bad_percent_is_a_check_error_with_a_hint(settings, value):
    settings.DJANGO_RL = {
        "POLICIES": {"p": {"algorithm": "fixed_window", "rate": "5/m", "enforce_percent": value}}
    }
    errors = [e for e in check_settings() if e.id == "django_rl.E033"]
    assert len(errors) == 1
    assert isinstance(errors[0], Error)
    assert errors[0].msg.startswith("DJANGO_RL['POLICIES']['p']['enforce_percent'] is ")
    assert "0 to 100" in errors[0].hint and "https://" in errors[0].hint


@pytest.mark.parametrize("value", [0, 30, 99.5, 100])
def test_a_good_percent_is_no_check_error(settings, value):
    settings.DJANGO_RL = {
        "POLICIES": {"p": {"algorithm": "fixed_window", "rate": "5/m", "enforce_percent": value}}
    }
    assert [e for e in check_settings() if e.id == "django_rl.E033"] == []
    assert get_policy("p").enforce_percent == value


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("rate", "valid"), [("30", True), ("0", True), ("150", False), ("x", False)]
)
def test_the_admin_form_takes_a_percent_for_the_whole_policy(rate, valid):
    from django_rl.admin.override_form import OverrideForm

    expires = (timezone.now() + datetime.timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S")
    form = OverrideForm(
        data={
            "policy": "half",
            "identity": "whatever",
            "action": "percent",
            "rate": rate,
            "expires_at": expires,
            "reason": "rollout",
        }
    )
    assert form.is_valid() is valid, form.errors
    if valid:
        saved = form.save()
        assert (saved.identity, saved.rate) == ("*", rate)
        assert str(saved) == f"half: enforced for {rate} % of identities"
    else:
        assert list(form.errors) == ["rate"]


def test_the_live_counters_row_shows_the_percent():
    from django.template.loader import render_to_string

    from django_rl.inspection.rows import Row

    row = Row(
        policy="half",
        identity="ip:10.0.0.1",  # type: ignore[arg-type]
        status="live",
        keys=(),
        algorithm="fixed_window",
        rate="1/h",
        denied=True,
        shadow=True,
        enforce_percent=get_policy("half").enforce_percent,
    )
    html = render_to_string("admin/django_rl/livecounter/rows.html", {"rows": [row]})
    assert "enforced for 50 %" in html
    full = Row(policy="full", identity="ip:10.0.0.1", status="live", keys=())  # type: ignore
    assert "enforced for" not in render_to_string(
        "admin/django_rl/livecounter/rows.html", {"rows": [full]}
    )
