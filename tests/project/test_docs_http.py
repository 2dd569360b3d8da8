"""docs/http.md shows real output: every marked example is produced here and compared.

A block marked ``<!-- example: NAME -->`` in docs/http.md must equal what the
scenario NAME below produces (the Unix time of ``X-RateLimit-Reset`` aside,
which only has to be a number), and the Python examples are the code the
tests run.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from django.http import HttpResponse
from django.test import RequestFactory
from rest_framework.response import Response
from rest_framework.views import APIView

from django_rl.decorators import ratelimit
from tests.sites import views_http

DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "http.md"
EXAMPLE = re.compile(r"<!-- example: (?P<name>[\w-]+) -->\s*```\w*\n(?P<body>.*?)```", re.DOTALL)
POLICIES = {
    "login": {"algorithm": "sliding_log", "rate": "5/m", "key": "ip"},
    "burst": {"algorithm": "token_bucket", "capacity": 5, "rate": "1/s", "key": "ip"},
    "sustained": {"algorithm": "sliding_log", "rate": "100/h", "key": "ip"},
}
SHOWN = [
    "Retry-After",
    "RateLimit-Policy",
    "RateLimit",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "Content-Type",
]


def examples():
    return {m["name"]: m["body"] for m in EXAMPLE.finditer(DOC.read_text(encoding="utf-8"))}


def transcript(response, body=False):
    if hasattr(response, "render"):  # DRF's Response
        response.render()
    lines = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
    lines += [f"{name}: {response[name]}" for name in SHOWN if name in response.headers]
    if body:
        lines += ["", response.content.decode().rstrip("\n")]
    return "\n".join(lines) + "\n"


def ok(request):
    return HttpResponse("ok", content_type="text/plain")


def hits(view, n, client, **headers):
    """Send n GETs from the address ``client`` (each scenario has its own)."""
    factory = RequestFactory(headers=headers, REMOTE_ADDR=client)
    return [view(factory.get("/")) for _ in range(n)]


def scenarios(settings):
    """Return {example name: the text the docs must show}."""
    login = ratelimit("login")(ok)
    out = {}
    responses = hits(login, 6, "192.0.2.1")
    out["allowed"], out["denied"] = transcript(responses[0]), transcript(responses[5])
    out["several"] = transcript(hits(ratelimit("burst", "sustained")(ok), 1, "192.0.2.2")[0])
    out["text"] = transcript(responses[5], body=True)
    problem = hits(login, 6, "192.0.2.3", accept="application/json")[5]
    out["problem"] = transcript(problem, body=True)
    html = hits(login, 6, "192.0.2.4", accept="text/html")[5]
    out["html"] = transcript(html, body=True)
    settings.DJANGO_RL = {**settings.DJANGO_RL, "HEADERS": "legacy"}
    out["legacy"] = transcript(hits(login, 1, "192.0.2.5")[0])

    class Items(APIView):
        throttle_scope = "burst"
        throttle_policies = ("sustained",)

        def get(self, request):
            return Response({"items": []})

    settings.DJANGO_RL = {**settings.DJANGO_RL, "HEADERS": "ietf"}
    out["drf"] = transcript(hits(Items.as_view(), 6, "192.0.2.6")[5], body=True)
    return out


def same(doc, real):
    reset = re.compile(r"^X-RateLimit-Reset: \d+$", re.MULTILINE)
    return reset.sub("X-RateLimit-Reset: <time>", doc) == reset.sub(
        "X-RateLimit-Reset: <time>", real
    )


def test_every_example_in_the_docs_is_real_output(settings):
    settings.DJANGO_RL = {"POLICIES": POLICIES}
    real = scenarios(settings)
    shown = examples()
    assert set(shown) >= set(real), f"docs/http.md lacks examples {set(real) - set(shown)}"
    for name, text in real.items():
        if name == "problem":  # JSON: compare the values, whatever the layout
            doc_head, _, doc_body = shown[name].partition("\n\n")
            real_head, _, real_body = text.partition("\n\n")
            assert (doc_head, json.loads(doc_body)) == (real_head, json.loads(real_body))
        else:
            assert same(shown[name], text), f"example {name!r}:\n{text}"


@pytest.mark.parametrize(
    "function", [views_http.rate_limited, views_http.raises, views_http.recorded]
)
def test_the_python_examples_are_the_tested_views(function):
    assert inspect.getsource(function) in DOC.read_text(encoding="utf-8")
