"""Index tasks run in a real Celery worker process, through the real broker, against the test database."""

from __future__ import annotations

import pytest

from registry.models import Environment, Revision, SyncRun
from tests.support.worker import celery_worker, wait_for
from workers import tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def test_tasks_are_idempotent_and_late_acked():
    for task in (tasks.sync_hub, tasks.index_space):
        assert task.acks_late and task.reject_on_worker_lost
    assert tasks.sync_hub.name == "registry.sync_hub" and tasks.index_space.name == "registry.index_space"


def test_index_space_and_sync_hub_in_a_worker(corpus_stub, tmp_path):
    log = tmp_path / "worker.log"
    with celery_worker(log=log) as worker:
        tasks.index_space.delay("openenv/echo_env")
        tasks.index_space.delay("openenv/echo_env")  # a duplicate delivery changes nothing
        wait_for(lambda: SyncRun.objects.filter(kind="space", state="finished").count() == 2,
                 what=f"two index_space runs (worker log: {log})")
        assert Revision.objects.filter(environment__key="openenv/echo_env").count() == 1
        assert sorted(SyncRun.objects.filter(kind="space").values_list("new", "unchanged")) == [(0, 1), (1, 0)]

        tasks.sync_hub.delay()
        run = wait_for(lambda: SyncRun.objects.filter(kind="hub", state="finished").first(), what="sync_hub")
        assert (run.found, run.new, run.unchanged, run.errors) == (34, 33, 1, 0)
        assert Environment.objects.filter(status="active").count() == 34
        assert worker.poll() is None


def test_every_task_ends_before_the_broker_would_redeliver_it(settings):
    """A redelivered message of a task still running would run it twice (two syncs racing, two probes)."""
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from hub.celery import our_tasks

    assert {t.name for t in our_tasks()} >= {"registry.sync_hub", "registry.validation_reap"}
    assert all(t.time_limit and t.time_limit < settings.CELERY_VISIBILITY_TIMEOUT_S for t in our_tasks())
    call_command("check")
    # Longer than validation's limit but shorter than a full sync's: the sync is caught too, not only validation.
    settings.CELERY_VISIBILITY_TIMEOUT_S = tasks.validate_run.time_limit + 60
    with pytest.raises(SystemCheckError, match="registry.sync_hub may run"):
        call_command("check")


def test_a_worker_refuses_to_start_with_a_short_visibility_timeout(tmp_path):
    log = tmp_path / "worker.log"
    with celery_worker(env={"CELERY_VISIBILITY_TIMEOUT_S": "600"}, log=log) as proc:
        proc.wait(timeout=60)
    text = log.read_text()
    assert proc.returncode != 0 and "may run 11100 s, not less than CELERY_VISIBILITY_TIMEOUT_S (600 s)" in text
