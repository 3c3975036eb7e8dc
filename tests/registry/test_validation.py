"""Validation runs as a state machine on the real database: request, start, heartbeat, finish, cancel, reap."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from registry import services
from registry.conformance import POLICY_VERSION, VALIDATOR_VERSION
from registry.models import Environment, ValidationRun
from registry.services import validation

pytestmark = pytest.mark.django_db

State, Outcome = ValidationRun.State, ValidationRun.Outcome


@pytest.fixture
def env(tiny_envs):
    return tiny_envs


def test_request_writes_the_row_and_sends_the_task_only_after_commit(env, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        run, created = validation.validation_run_request(revision=env.head, trigger="request")
        assert created and run.state == State.QUEUED and callbacks == []  # not yet committed: nothing sent
    assert len(callbacks) == 1
    assert (run.runner, run.trigger, run.validator_version, run.policy_version) == (
        "local", "request", VALIDATOR_VERSION, POLICY_VERSION)
    assert run.environment == env and run.outcome is None and run.queued_at is not None


def test_one_live_run_per_revision(env):
    first, created = validation.validation_run_request(revision=env.head, trigger="request")
    again, created_again = validation.validation_run_request(revision=env.head, trigger="schedule")
    assert created and not created_again and again.pk == first.pk
    with pytest.raises(IntegrityError), transaction.atomic():
        ValidationRun.objects.create(environment=env, revision=env.head, validator_version=VALIDATOR_VERSION,
                                     policy_version=POLICY_VERSION, runner="local", trigger="request")
    validation.validation_run_start(run_id=first.pk)
    assert validation.validation_run_finish(run_id=first.pk, outcome=Outcome.PASS, report={"results": []})
    later, created_later = validation.validation_run_request(revision=env.head, trigger="request")
    assert created_later and later.pk != first.pk


def test_start_is_compare_and_set(env):
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    started = validation.validation_run_start(run_id=run.pk, worker="w1")
    assert started.state == State.RUNNING and started.attempts == 1 and started.worker == "w1"
    assert validation.validation_run_start(run_id=run.pk, worker="w2") is None  # a redelivered message
    run.refresh_from_db()
    assert run.worker == "w1" and run.attempts == 1
    report = {"results": [{"check_id": "a.b", "status": "fail"}, {"check_id": "c.d", "status": "pass"},
                          {"check_id": "e.f", "status": "error"}]}
    assert validation.validation_run_finish(run_id=run.pk, outcome=Outcome.FAIL, report=report)
    assert not validation.validation_run_finish(run_id=run.pk, outcome=Outcome.PASS, report={})  # already over
    run.refresh_from_db()
    assert run.state == State.FINISHED and run.outcome == Outcome.FAIL and run.failing_checks == ["a.b", "e.f"]
    assert validation.validation_run_start(run_id=run.pk) is None


def test_cancel_stops_heartbeats(env):
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    validation.validation_run_start(run_id=run.pk)
    validation.validation_run_heartbeat(run_id=run.pk)
    assert validation.validation_run_cancel(run_id=run.pk, reason="operator")
    with pytest.raises(validation.RunNotRunning):
        validation.validation_run_heartbeat(run_id=run.pk)
    run.refresh_from_db()
    assert run.state == State.CANCELLED and run.outcome is None and run.reason == "operator"
    assert not validation.validation_run_cancel(run_id=run.pk, reason="again")


def test_reaper_requeues_then_gives_up(env, settings, django_capture_on_commit_callbacks):
    settings.HUB_VALIDATION_MAX_ATTEMPTS = 2
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    validation.validation_run_start(run_id=run.pk, worker="gone@host")
    fresh, _ = validation.validation_run_request(
        revision=Environment.objects.get(key="local/beta").head, trigger="request")
    validation.validation_run_start(run_id=fresh.pk)
    stale_at = timezone.now() - timedelta(seconds=settings.HUB_VALIDATION_STALE_S + 5)
    ValidationRun.objects.filter(pk=run.pk).update(heartbeat_at=stale_at)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert validation.validation_runs_reap() == {"requeued": 1, "errored": 0, "resent": 0}
    assert len(callbacks) == 1  # the task is sent again
    run.refresh_from_db()
    assert run.state == State.QUEUED and "gone@host" in run.reason
    assert ValidationRun.objects.get(pk=fresh.pk).state == State.RUNNING  # its heartbeat is fresh

    validation.validation_run_start(run_id=run.pk)  # attempt 2, which dies too
    ValidationRun.objects.filter(pk=run.pk).update(heartbeat_at=stale_at)
    assert validation.validation_runs_reap() == {"requeued": 0, "errored": 1, "resent": 0}
    run.refresh_from_db()
    assert run.state == State.FINISHED and run.outcome == Outcome.ERROR
    assert "Gave up after 2 attempts" in run.reason


def test_reaper_resends_queued_runs_whose_message_was_lost(env, settings, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    long_ago = timezone.now() - timedelta(seconds=settings.CELERY_VISIBILITY_TIMEOUT_S + 1)
    ValidationRun.objects.filter(pk=run.pk).update(queued_at=long_ago)
    assert validation.validation_runs_reap()["resent"] == 0  # queued long ago, but its message was sent just now
    ValidationRun.objects.filter(pk=run.pk).update(due_at=long_ago, sent_at=long_ago)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert validation.validation_runs_reap()["resent"] == 1
    assert len(callbacks) == 1
    # One new message per visibility timeout, not one per reaper tick.
    assert validation.validation_runs_reap()["resent"] == 0
    assert ValidationRun.objects.get(pk=run.pk).due_at > timezone.now() - timedelta(seconds=60)


def test_a_backoff_is_not_cut_short_by_the_reaper(env, settings):
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    validation.validation_run_start(run_id=run.pk)
    long_ago = timezone.now() - timedelta(seconds=settings.CELERY_VISIBILITY_TIMEOUT_S + 1)
    ValidationRun.objects.filter(pk=run.pk).update(queued_at=long_ago)
    assert validation.validation_run_requeue(run_id=run.pk, reason="Hub down", countdown=120)
    assert ValidationRun.objects.get(pk=run.pk).due_at > timezone.now() + timedelta(seconds=100)
    assert validation.validation_runs_reap()["resent"] == 0


def test_the_reaper_spares_a_worker_that_beat_after_it_judged(env, settings):
    """The reaper judged the run dead; the worker beat before the reaper's write: the run stays the worker's."""
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    validation.validation_run_start(run_id=run.pk, worker="slow@host")
    judged_at = timezone.now()
    ValidationRun.objects.filter(pk=run.pk).update(
        heartbeat_at=judged_at - timedelta(seconds=settings.HUB_VALIDATION_STALE_S + 5))
    stale_before = judged_at - timedelta(seconds=settings.HUB_VALIDATION_STALE_S)
    validation.validation_run_heartbeat(run_id=run.pk, attempt=1)  # just in time
    for max_attempts in (3, 1):  # requeue while attempts remain, error when they are spent: both conditional
        assert validation.validation_run_reap_one(run_id=run.pk, attempt=1, stale_before=stale_before,
                                                  max_attempts=max_attempts) is None
    run.refresh_from_db()
    assert (run.state, run.attempts, run.worker) == (State.RUNNING, 1, "slow@host")
    validation.validation_run_heartbeat(run_id=run.pk, attempt=1)  # and it keeps its attempt


def test_a_superseded_attempt_is_fenced_off(env, settings):
    """Attempt 1 goes silent, the reaper hands the run to attempt 2; attempt 1 wakes up and must change nothing."""
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    first = validation.validation_run_start(run_id=run.pk, worker="w1")
    ValidationRun.objects.filter(pk=run.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.HUB_VALIDATION_STALE_S + 5))
    assert validation.validation_runs_reap()["requeued"] == 1
    second = validation.validation_run_start(run_id=run.pk, worker="w2")
    assert (first.attempts, second.attempts) == (1, 2)
    with pytest.raises(validation.RunNotRunning):
        validation.validation_run_heartbeat(run_id=run.pk, attempt=1)
    assert not validation.validation_run_finish(run_id=run.pk, outcome=Outcome.FAIL, report={}, attempt=1)
    assert not validation.validation_run_cancel(run_id=run.pk, reason="late", attempt=1)
    assert not validation.validation_run_requeue(run_id=run.pk, reason="late", attempt=1)
    validation.validation_run_heartbeat(run_id=run.pk, attempt=2)
    assert validation.validation_run_finish(run_id=run.pk, outcome=Outcome.PASS, report={"results": []}, attempt=2)
    run.refresh_from_db()
    assert (run.state, run.outcome, run.worker) == (State.FINISHED, Outcome.PASS, "w2")


def test_scheduled_reprobe_skips_fresh_results(env):
    assert validation.validation_reprobe_schedule(older_than_s=3600) == 2
    assert set(ValidationRun.objects.values_list("trigger", "wake")) == {("schedule", False)}
    assert validation.validation_reprobe_schedule(older_than_s=3600) == 0


def test_a_new_head_revision_is_validated_automatically(settings, tmp_path):
    root = tmp_path / "envs"
    (root / "gamma").mkdir(parents=True)
    (root / "gamma" / "openenv.yaml").write_text("name: gamma\n")
    settings.HUB_LOCAL_SOURCES = [f"acme={root}"]
    settings.HUB_VALIDATE_NEW_REVISIONS = True
    services.local_sync()
    first = ValidationRun.objects.get()
    assert first.trigger == "new_revision" and first.revision.environment.key == "acme/gamma"
    services.local_sync()  # nothing changed: no new run
    assert ValidationRun.objects.count() == 1
    (root / "gamma" / "openenv.yaml").write_text("name: gamma\ndescription: changed\n")
    services.local_sync()
    assert ValidationRun.objects.count() == 2
    assert ValidationRun.objects.order_by("-id").first().revision == Environment.objects.get(key="acme/gamma").head


def test_outcome_only_when_finished_is_a_database_rule(env):
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    with pytest.raises(IntegrityError), transaction.atomic():
        ValidationRun.objects.filter(pk=run.pk).update(outcome="pass")
