"""Schemathesis against the hub's own OpenAPI schema (/api/schema/): generated requests to every operation find
no 5xx and no answer that the schema does not describe (status codes, content types, bodies, headers)."""

from __future__ import annotations

import pytest
import schemathesis
from schemathesis import checks
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings

pytestmark = pytest.mark.django_db

schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())


@pytest.fixture
def wsgi_in_the_test_transaction():
    """As Django's test client does: the WSGI handler must not close the test's database connection."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def data(tiny_envs, wsgi_in_the_test_transaction, hub_stub):
    """Something to find: local/alpha with a finished validation (most generated names still miss: 404s), and a
    Hub (the stand-in) to ask about generated tokens, which it refuses (a Hub that cannot be reached is a 503)."""
    from tests.registry.test_pages import finish

    finish(tiny_envs, "pass")
    return tiny_envs


# What the API promises: never a server error, and every answer is one the schema describes. (Opaque values such
# as a cursor are rejected when made up, so acceptance of generated data is not among the checks.)
CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
          checks.response_schema_conformance, checks.response_headers_conformance]


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_the_api_keeps_its_schema(data, case):
    case.call_and_validate(checks=CHECKS)
