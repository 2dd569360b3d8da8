"""A front door used without ``"django_rl"`` in ``INSTALLED_APPS`` logs one warning naming it.

Without the app, ``manage.py check`` judges none of ``DJANGO_RL``: the
warning is what tells the project. Each case runs in a process of its own
(the look is made once per process), a small Django project configured in
the script, on the suite's Redis.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from django_rl.docs_urls import doc_url

ROOT = Path(__file__).resolve().parent.parent.parent

PROJECT = textwrap.dedent(
    """
    import json, logging, sys

    import django
    from django.conf import settings

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append([record.name, record.levelname, record.getMessage()])

    settings.configure(
        INSTALLED_APPS=json.loads(sys.argv[2]),
        ALLOWED_HOSTS=["testserver"],
        CACHES={"default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": sys.argv[1],
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
        }},
        DJANGO_RL={"KEY_PREFIX": "rl-installed", "HISTORY": False, "OVERRIDES": False,
                   "POLICIES": {"login": {"algorithm": "fixed_window", "rate": "100/m",
                                          "key": "ip"}}},
        REST_FRAMEWORK={"DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
                        "DEFAULT_THROTTLE_RATES": {"anon": "100/m"}},
    )
    django.setup()
    logging.getLogger("django_rl").addHandler(Keep())
    logging.getLogger("django_rl").setLevel(logging.DEBUG)

    from django.http import HttpResponse
    from django.test import RequestFactory
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from django_rl.contrib.drf import AnonRateThrottle
    from django_rl.contrib.ratelimit.decorators import ratelimit as dropin_ratelimit
    from django_rl.decorators import ratelimit
    from django_rl.throttling import PolicyThrottle

    @ratelimit("login")
    def login(request):
        return HttpResponse("ok")

    @ratelimit(rate="100/m", key="ip", methods=["POST"])
    def search(request):
        return HttpResponse("ok")

    class Items(APIView):
        throttle_classes = [PolicyThrottle]
        throttle_scope = "login"
        def get(self, request):
            return Response([])

    class Anon(APIView):
        throttle_classes = [AnonRateThrottle]
        def get(self, request):
            return Response([])

    @dropin_ratelimit(key="ip", rate="100/m")
    def legacy(request):
        return HttpResponse("ok")

    factory = RequestFactory()
    views = {"ratelimit": login, "inline": search, "PolicyThrottle": Items.as_view(),
             "drf drop-in": Anon.as_view(), "django-ratelimit drop-in": legacy}
    codes = []
    for name in sys.argv[3].split(","):
        for _ in range(3):
            codes.append(views[name](factory.get("/")).status_code)
    print(json.dumps({"codes": codes, "records": records}))
    """
)

WITHOUT = ["django.contrib.auth", "django.contrib.contenttypes"]
FRONT_DOORS = ["ratelimit", "inline", "PolicyThrottle", "drf drop-in", "django-ratelimit drop-in"]


def run_project(redis_url: str, installed_apps: list[str], front_doors: list[str]) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROJECT,
            redis_url,
            json.dumps(installed_apps),
            ",".join(front_doors),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("front_door", FRONT_DOORS)
def test_each_front_door_without_the_app_logs_one_warning(redis_server, front_door):
    result = run_project(redis_server.url, WITHOUT, [front_door])
    assert result["codes"] == [200] * 3  # the limits still apply: nothing else says so
    assert result["records"] == [
        [
            "django_rl",
            "WARNING",
            'django_rl is used but "django_rl" is not in INSTALLED_APPS: manage.py check does '
            "not judge DJANGO_RL (a bad setting goes unreported), and the admin's pages and "
            f'overrides are off. Add "django_rl" to INSTALLED_APPS. See {doc_url("checks")}',
        ]
    ]


def test_every_front_door_together_logs_it_once_per_process(redis_server):
    result = run_project(redis_server.url, WITHOUT, FRONT_DOORS)
    assert result["codes"] == [200] * 15
    warnings = [r for r in result["records"] if "INSTALLED_APPS" in r[2]]
    assert len(warnings) == 1, result["records"]


def test_with_the_app_installed_nothing_is_logged(redis_server):
    result = run_project(redis_server.url, [*WITHOUT, "django_rl"], FRONT_DOORS)
    assert result["codes"] == [200] * 15
    assert result["records"] == []
