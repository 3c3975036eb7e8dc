"""Validation through real Celery worker processes: the validation queue, a worker killed mid-run."""

from __future__ import annotations

import os
import signal

import pytest

from registry.models import Environment, ValidationRun
from registry.services import validation
from tests.support.worker import celery_worker, wait_for
from workers import tasks

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.integration]


def worker_env(settings) -> dict[str, str]:
    """The validation settings of this test, for the worker process (it reads the environment, not our overrides)."""
    return {
        "HUB_SANDBOX_DIR": str(settings.HUB_SANDBOX_DIR),
        "HUB_SANDBOX_PYTHON": settings.HUB_SANDBOX_PYTHON,
        "HUB_PROBE_FIRST_WORK_BUDGET_S": str(settings.HUB_PROBE_FIRST_WORK_BUDGET_S),
        "HUB_SANDBOX_STARTUP_S": str(settings.HUB_SANDBOX_STARTUP_S),
        "HUB_PROBE_DEADLINE_S": str(settings.HUB_PROBE_DEADLINE_S),
        "HUB_VALIDATION_HEARTBEAT_S": "1",
    }


def test_validation_task_contract():
    task = tasks.validate_run
    assert task.name == "registry.validate_run" and task.acks_late and task.reject_on_worker_lost
    assert task.soft_time_limit < task.time_limit
    from django.conf import settings

    assert settings.CELERY_TASK_ROUTES["registry.validate_run"]["queue"] == "validation"
    assert settings.CELERY_VISIBILITY_TIMEOUT_S > task.time_limit


def test_new_revisions_are_validated_by_the_worker(local_envs, validation_settings, tmp_path):
    """Indexing queues a run per new head revision; a worker on the validation queue gives each a verdict."""
    validation_settings.HUB_VALIDATE_NEW_REVISIONS = True
    validation_settings.HUB_LOCAL_SOURCES = [f"fresh={local_envs_root(tmp_path)}"]
    from registry import services

    with celery_worker(queues="validation", env=worker_env(validation_settings), log=tmp_path / "worker.log"):
        services.local_sync()
        runs = ValidationRun.objects.filter(environment__key__startswith="fresh/")
        assert runs.count() == 2 and set(runs.values_list("trigger", flat=True)) == {"new_revision"}
        wait_for(lambda: not runs.filter(state__in=ValidationRun.LIVE_STATES).exists(), timeout=300,
                 what=f"two validations (worker log: {tmp_path / 'worker.log'})")
    outcomes = dict(runs.values_list("environment__name", "outcome"))
    assert outcomes == {"echo_env": "pass", "reward_out_of_range": "fail"}
    assert runs.get(environment__name="reward_out_of_range").failing_checks == ["runtime.reward_well_formed"]


def local_envs_root(tmp_path):
    """A fresh local source holding one good and one broken package (copies, so their digests are new)."""
    import shutil

    from tests.conftest import EXAMPLES, FIXTURE_ENVS

    root = tmp_path / "fresh"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(EXAMPLES / "echo_env", root / "echo_env", ignore=ignore)
    shutil.copytree(FIXTURE_ENVS / "reward_out_of_range", root / "reward_out_of_range", ignore=ignore)
    return root


def test_a_worker_killed_mid_run_loses_no_run(local_envs, validation_settings, tmp_path):
    env = Environment.objects.select_related("head").get(key="local/echo_env")
    env_vars = worker_env(validation_settings)
    with celery_worker(queues="validation", env=env_vars, log=tmp_path / "worker1.log") as first:
        run, _ = validation.validation_run_request(revision=env.head, trigger=ValidationRun.Trigger.REQUEST)
        wait_for(lambda: ValidationRun.objects.get(pk=run.pk).state == "running", timeout=60, what="the run to start")
        wait_for(lambda: sandboxed_servers(validation_settings), timeout=120, what="the sandboxed server to start")
        os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool, mid-run, with no chance to clean up
        first.wait()
    run.refresh_from_db()
    first_worker = run.worker
    assert run.state == "running" and run.attempts == 1  # the row survived; nobody is working on it
    # The sandboxed server died with the worker instead of living on as an orphan.
    wait_for(lambda: not sandboxed_servers(validation_settings), timeout=15, what="the orphaned server to die")

    with celery_worker(queues="validation", env=env_vars, log=tmp_path / "worker2.log"):
        # The heartbeat stops; the reaper requeues the run and the new worker finishes it.
        wait_for(lambda: validation.validation_runs_reap(stale_after_s=4)["requeued"], timeout=60,
                 what="the reaper to find the stale run")
        wait_for(lambda: ValidationRun.objects.get(pk=run.pk).state == "finished", timeout=300,
                 what=f"the requeued run to finish (worker log: {tmp_path / 'worker2.log'})")
    run.refresh_from_db()
    assert (run.outcome, run.attempts) == ("pass", 2), run.reason
    assert run.worker != first_worker


def sandboxed_servers(settings) -> list[int]:
    """Pids of uvicorn processes serving from the sandbox's work folder."""
    work = str(settings.HUB_SANDBOX_DIR / "work")
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "uvicorn" in cmdline and work in cmdline:
            pids.append(int(entry))
    return pids
