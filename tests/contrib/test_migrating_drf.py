"""docs/migrating.md, "From DRF's throttles": the code before and after runs, and decides the same.

The section's blocks run in order (as ``test_docs.py`` runs every doc); then
the "after" code, under its own ``REST_FRAMEWORK``, decides as the section
says: the anonymous rate, a scope with a rate and one with ``None``, the
custom ``get_cache_key``, and a subclass's own rate.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import override_settings
from rest_framework.test import APIRequestFactory

DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "migrating.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)

pytestmark = pytest.mark.django_db


def section_blocks() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## From DRF's throttles")
    end = text.find("\n## ", start + 1)
    return BLOCK.findall(text[start : end if end != -1 else None])


def run(block: str) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "docs_migrating_drf"}
    exec(compile(block, "docs/migrating.md", "exec"), namespace)
    return namespace


def test_the_section_has_before_and_after_that_differ_only_in_the_module_path():
    before, after = section_blocks()
    assert "rest_framework.throttling" in before
    assert "rest_framework.throttling" not in after
    assert before.replace("rest_framework.throttling", "django_rl.contrib.drf") == after


def test_the_before_code_runs_on_drf():
    namespace = run(section_blocks()[0])
    assert namespace["AnonRateThrottle"].__module__ == "rest_framework.throttling"


def test_the_after_code_decides_as_the_section_says(settings):
    namespace = run(section_blocks()[1])
    settings.REST_FRAMEWORK = namespace["REST_FRAMEWORK"]
    factory = APIRequestFactory()
    upload = namespace["UploadView"].as_view()

    def post(**extra):
        return upload(factory.post("/", REMOTE_ADDR="192.0.2.30", **extra)).status_code

    # anon 3/min and uploads 2/min on one view: the scope denies the third.
    assert [post() for _ in range(3)] == [200, 200, 429]
    # The anonymous throttle counted what it allowed: 3, so one more is its fourth.
    assert [post() for _ in range(1)] == [429]

    from rest_framework.response import Response
    from rest_framework.views import APIView

    class Reports(APIView):
        throttle_classes = (namespace["ScopedRateThrottle"],)
        throttle_scope = "reports"

        def get(self, request):
            return Response("ok")

    class Tenants(APIView):
        throttle_classes = (namespace["TenantRateThrottle"], namespace["BurstRateThrottle"])

        def get(self, request):
            return Response("ok")

    reports = Reports.as_view()
    assert [reports(factory.get("/")).status_code for _ in range(10)] == [200] * 10
    tenants = Tenants.as_view()

    def tenant_get(tenant):
        return tenants(factory.get("/", HTTP_X_TENANT=tenant, REMOTE_ADDR="192.0.2.31"))

    assert [tenant_get("acme").status_code for _ in range(3)] == [200, 200, 429]
    assert tenant_get("other").status_code == 200
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "NUM_PROXIES": 0}):
        assert namespace["BurstRateThrottle"]().num_requests == 5
