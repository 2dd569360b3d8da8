"""The example project serves the status view and an OpenAPI schema that documents its 429s."""

from __future__ import annotations

import json

import jsonschema
import pytest
from openapi_spec_validator import validate

from tests.project.test_example_project import ROOT, run

pytestmark = pytest.mark.slow

SCRIPT = """
import json
import django
django.setup()
from django.test import Client
c = Client()
print(c.get('/login/').status_code)
r = c.get('/rate_limit/')
print(json.dumps({"status": r.status_code, "cache": r['Cache-Control'],
                  "type": r['Content-Type'], "body": r.json()}))
r = c.get('/api/schema/', {'format': 'json'})
print(json.dumps({"status": r.status_code, "schema": json.loads(r.content)}))
"""


def test_status_and_schema(redis_server):
    result = run(redis_server.url, "-c", SCRIPT)
    assert result.returncode == 0, result.stderr
    _, status_line, schema_line = result.stdout.splitlines()
    status = json.loads(status_line)
    assert (status["status"], status["cache"], status["type"]) == (
        200,
        "no-store",
        "application/json",
    )
    schema_of_status = json.loads((ROOT / "docs/schemas/rate_limit_status.schema.json").read_text())
    jsonschema.validate(status["body"], schema_of_status)
    # Every policy of the example applies to an anonymous client's address.
    assert set(status["body"]["policies"]) == {"login", "api", "burst", "search"}
    assert status["body"]["policies"]["login"]["limit"] == 5
    served = json.loads(schema_line)
    assert served["status"] == 200
    schema = served["schema"]
    validate(schema)
    items = schema["paths"]["/api/items/"]["get"]["responses"]
    assert set(items["429"]["headers"]) == {"Retry-After", "RateLimit-Policy", "RateLimit"}
    assert "`api`: fixed_window 20/m" in items["429"]["description"]
