"""A run's message reaches the broker after commit, or the reaper sends it: with a real broker that refuses.

The broker URL of the project's own Celery app is pointed at a closed port (a real connection refused,
not a mock); the requests and syncs run on real transactions, so their after-commit sends really happen.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from hub.celery import app
from registry import services
from registry.models import IndexProblem, SyncRun, ValidationRun
from registry.services import validation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once it is closed


def _use_broker(url: str) -> None:
    app.conf.broker_url = url
    # Celery caches its connection and producer pools per app; kombu keys its pools by URL, so dropping
    # the app's references makes the next send connect to `url` (app.close() would deregister the app).
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def dead_broker():
    """The app's broker is a Redis URL where nothing listens; restored afterwards."""
    saved = app.conf.broker_url
    _use_broker(f"redis://127.0.0.1:{_closed_port()}/0")
    yield
    _use_broker(saved)


def _queued():
    return ValidationRun.objects.get(state="queued")


def test_a_run_counts_as_sent_only_once_the_broker_took_it(tiny_envs):
    before = timezone.now()
    run, created = validation.validation_run_request(revision=tiny_envs.head, trigger="request")
    run.refresh_from_db()
    assert created and run.sent_at is not None and run.sent_at >= before and run.due_at <= run.sent_at


def test_the_api_answers_for_a_committed_run_when_the_broker_is_down(tiny_envs, client, dead_broker, settings):
    client.force_login(User.objects.create_user("ops", is_staff=True))
    url = reverse("api:validation-list", kwargs={"owner": "local", "name": "alpha"})
    response = client.post(url, {}, content_type="application/json")
    assert response.status_code == 202, response.content
    run = _queued()
    assert response.json()["id"] == run.pk and run.sent_at is None  # committed, never reached the broker


def test_a_sync_records_no_false_error_when_the_broker_is_down(tiny_envs, dead_broker, settings, tmp_path):
    settings.HUB_VALIDATE_NEW_REVISIONS = True
    (tmp_path / "envs" / "alpha" / "README.md").write_text("A new revision.\n")
    summary = services.local_sync()
    assert summary.run.errors == 0 and summary.run.updated == 1
    assert not IndexProblem.objects.filter(code="index.internal_error").exists()
    assert _queued().sent_at is None and SyncRun.objects.get(pk=summary.run.pk).state == "finished"


def test_the_reaper_sends_a_never_sent_run_within_a_minute(tiny_envs, settings):
    saved = app.conf.broker_url
    _use_broker(f"redis://127.0.0.1:{_closed_port()}/0")
    try:
        validation.validation_run_request(revision=tiny_envs.head, trigger="request")
    finally:
        _use_broker(saved)
    assert _queued().sent_at is None
    assert validation.validation_runs_reap()["resent"] == 0  # it is not past due yet: a publish may be under way
    ValidationRun.objects.update(due_at=timezone.now() - timedelta(seconds=settings.HUB_VALIDATION_UNSENT_GRACE_S + 1))
    assert settings.HUB_VALIDATION_UNSENT_GRACE_S + settings.CELERY_BEAT_SCHEDULE["validation-reap"]["schedule"] <= 60
    assert validation.validation_runs_reap()["resent"] == 1
    assert _queued().sent_at is not None  # the broker is back: it took the message this time
    assert validation.validation_runs_reap()["resent"] == 0
