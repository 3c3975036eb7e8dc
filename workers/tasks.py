"""Celery tasks: look up by key, call one service, decide retry.

Every task is idempotent and acknowledged late, so a worker that dies
mid-task leaves its message to be delivered again, and a second delivery
changes nothing.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.utils import timezone

from registry import runners, services
from registry.models import EvaluationRun, ValidationRun
from registry.services import evaluation, validation, webhooks
from registry.services.heartbeat import Heartbeat

logger = logging.getLogger(__name__)


@shared_task(name="registry.sync_hub", acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             soft_time_limit=3 * 3600, time_limit=3 * 3600 + 300)
def sync_hub() -> str:
    """Full reconcile: the local sources (fast, offline), then the Hub listing. Returns the summary line."""
    local = services.local_sync()
    hub = services.hub_sync()
    summary = f"hub: {hub}; local: {local}"
    logger.info("sync_hub: %s", summary)
    return summary


@shared_task(name="registry.index_space", acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             soft_time_limit=600, time_limit=660)
def index_space(repo_id: str) -> str:
    """Index one Space by id (webhooks and operators use this)."""
    summary = services.space_index_by_id(repo_id=repo_id)
    logger.info("index_space %s: %s", repo_id, summary)
    return str(summary)


@shared_task(name="registry.handle_webhook", bind=True, acks_late=True, reject_on_worker_lost=True,
             ignore_result=True, soft_time_limit=600, time_limit=660)
def handle_webhook(self, delivery_id: int) -> str:
    """Act on one recorded Hub webhook delivery: ask the Hub about its Space and follow it (services.webhooks).

    A delivery no longer queued is left alone, so a redelivered message changes nothing; when the Hub fails,
    or does not serve the pushed commit yet, the service asks for a retry after a backoff, a few times at most.
    """
    handled = webhooks.webhook_delivery_handle(delivery_id=delivery_id, attempt=self.request.retries)
    if handled.retry_in is not None:
        raise self.retry(countdown=handled.retry_in, max_retries=webhooks.MAX_RETRIES)
    return handled.status


@shared_task(name="registry.validate_run", bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             soft_time_limit=settings.HUB_VALIDATION_SOFT_LIMIT_S, time_limit=settings.HUB_VALIDATION_HARD_LIMIT_S)
def validate_run(self, run_id: int) -> str:
    """Validate one revision: start by compare-and-set, run the runner, record the verdict.

    An environment's own faults are a verdict, never a retry; only our
    transient failures (the Hub or PyPI unreachable) requeue the run, up to
    HUB_VALIDATION_MAX_ATTEMPTS starts in all.
    """
    run = validation.validation_run_start(run_id=run_id, worker=self.request.hostname or "")
    if run is None:
        return "ignored"
    # Every write below is fenced by this attempt: if the reaper gave the run to another worker meanwhile,
    # this one's heartbeats stop and its verdict is dropped.
    attempt = run.attempts

    def error(reason: str) -> str:
        validation.validation_run_finish(run_id=run_id, outcome=ValidationRun.Outcome.ERROR, report=None,
                                         reason=reason, attempt=attempt)
        return "error"

    with Heartbeat(lambda: validation.validation_run_heartbeat(run_id=run_id, attempt=attempt),
                   settings.HUB_VALIDATION_HEARTBEAT_S, name=f"heartbeat-{run_id}",
                   lost_on=validation.RunNotRunning) as beat:
        try:
            result = runners.validation_execute(run, checkpoint=beat.check)
        except validation.RunNotRunning:
            return "cancelled"
        except runners.NotReady as exc:
            poll, waited = settings.HUB_VALIDATION_SETTLE_POLL_S, (timezone.now() - run.queued_at).total_seconds()
            if waited + poll <= settings.HUB_VALIDATION_SETTLE_MAX_S:
                validation.validation_run_requeue(
                    run_id=run_id, reason=f"Waiting: {exc}; looking again in {poll:.0f} s.", countdown=poll,
                    attempt=attempt, refund_attempt=True)
                return "waiting"
            validation.validation_run_cancel(run_id=run_id, attempt=attempt, reason=(
                f"Gave up waiting: {exc} after {waited / 60:.0f} min; the next re-probe will try again."))
            return "cancelled"
        except runners.TransientError as exc:
            backoff = settings.HUB_VALIDATION_RETRY_BASE_S * 2 ** (attempt - 1)
            if attempt < settings.HUB_VALIDATION_MAX_ATTEMPTS and validation.validation_run_requeue(
                    run_id=run_id, reason=f"Retrying in {backoff:.0f} s after a transient failure: {exc}",
                    countdown=backoff, attempt=attempt):
                return "requeued"
            return error(f"Gave up after {attempt} attempts: {exc}")
        except SoftTimeLimitExceeded:
            return error(f"The validation exceeded its time limit of {settings.HUB_VALIDATION_SOFT_LIMIT_S} s.")
        except Exception as exc:  # noqa: BLE001 - our bug: record it on the run rather than leave it running
            logger.exception("validation #%s failed", run_id)
            return error(f"The validator failed internally ({type(exc).__name__}).")
    if result.cancelled:
        validation.validation_run_cancel(run_id=run_id, reason=result.reason, attempt=attempt)
        return "cancelled"
    if not validation.validation_run_finish(run_id=run_id, outcome=result.outcome, report=result.report,
                                            reason=result.reason, target_url=result.target_url, attempt=attempt,
                                            observed=result.observed):
        return "superseded"
    return result.outcome


@shared_task(name="registry.validation_reap", ignore_result=True, acks_late=True, soft_time_limit=240, time_limit=300)
def validation_reap() -> dict:
    """Periodic: requeue or end validation runs whose worker stopped sending heartbeats."""
    return validation.validation_runs_reap()


@shared_task(name="registry.validation_reprobe", ignore_result=True, acks_late=True, soft_time_limit=540,
             time_limit=600)
def validation_reprobe() -> int:
    """Periodic: keep results fresh by re-validating environments whose latest run is old."""
    return validation.validation_reprobe_schedule()


@shared_task(name="registry.evaluate_run", bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             soft_time_limit=settings.HUB_EVAL_SOFT_LIMIT_S, time_limit=settings.HUB_EVAL_HARD_LIMIT_S)
def evaluate_run(self, run_id: int) -> str:
    """Play one evaluation run (a baseline or a model): the validation task's shape and rules, its own queue."""
    run = evaluation.evaluation_run_start(run_id=run_id, worker=self.request.hostname or "")
    if run is None:
        return "ignored"
    attempt = run.attempts

    def error(reason: str) -> str:
        evaluation.evaluation_run_finish(run_id=run_id, outcome=EvaluationRun.Outcome.ERROR, reason=reason,
                                         attempt=attempt)
        return "error"

    with Heartbeat(lambda: evaluation.evaluation_run_heartbeat(run_id=run_id, attempt=attempt),
                   settings.HUB_VALIDATION_HEARTBEAT_S, name=f"evaluation-{run_id}",
                   lost_on=validation.RunNotRunning) as beat:
        try:
            played, report, target = runners.evaluation_execute(run, checkpoint=beat.check)
        except validation.RunNotRunning:
            return "cancelled"
        except runners.Unavailable as exc:
            evaluation.evaluation_run_cancel(run_id=run_id, reason=str(exc), attempt=attempt)
            return "cancelled"
        except (runners.NotReady, runners.TransientError) as exc:
            backoff = settings.HUB_VALIDATION_RETRY_BASE_S * 2 ** (attempt - 1)
            if attempt < settings.HUB_VALIDATION_MAX_ATTEMPTS and evaluation.evaluation_run_requeue(
                    run_id=run_id, reason=f"Retrying in {backoff:.0f} s: {exc}", countdown=backoff, attempt=attempt):
                return "requeued"
            return error(f"Gave up after {attempt} attempts: {exc}")
        except SoftTimeLimitExceeded:
            return error(f"The evaluation exceeded its time limit of {settings.HUB_EVAL_SOFT_LIMIT_S} s.")
        except Exception as exc:  # noqa: BLE001 - our bug: record it on the run rather than leave it running
            logger.exception("evaluation #%s failed", run_id)
            return error(f"The evaluator failed internally ({type(exc).__name__}).")
    try:
        finished = evaluation.evaluation_run_finish(run_id=run_id, outcome=EvaluationRun.Outcome.DONE, report=report,
                                                    played=played, target_url=target, attempt=attempt)
    except evaluation.EvaluationRefused as exc:  # the episodes broke a rule (a reward out of the declared range)
        return error(f"The episodes could not be recorded: {exc}")
    return "done" if finished else "superseded"


@shared_task(name="registry.evaluation_reap", ignore_result=True, acks_late=True, soft_time_limit=240, time_limit=300)
def evaluation_reap() -> dict:
    """Periodic: requeue or end evaluation runs whose worker stopped sending heartbeats."""
    return evaluation.evaluation_runs_reap()
