"""Validation runs: request, start, heartbeat, finish, cancel, reap. Every state change is compare-and-set.

The row is written before its task is sent (after commit), the task gets only
the primary key, and a run moves queued → running → finished | cancelled by
`filter(pk=…, state=A).update(state=B)`: whoever changes exactly one row owns
the transition; everyone else does nothing.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from registry.conformance import POLICY_VERSION, VALIDATOR_VERSION
from registry.identity import HubUser
from registry.models import Environment, Revision, ValidationRun

logger = logging.getLogger(__name__)

State, Outcome = ValidationRun.State, ValidationRun.Outcome


class RunNotRunning(Exception):
    """The run is no longer ours to work on (cancelled, reaped, or finished elsewhere)."""


def default_runner(environment: Environment) -> str:
    """Local sources run in the sandbox; Hub Spaces are probed where they run, unless configured otherwise."""
    if environment.source == Environment.Source.LOCAL:
        return ValidationRun.Runner.LOCAL
    return settings.HUB_VALIDATION_RUNNER


def _enqueue(run: ValidationRun, *, countdown: float = 0) -> None:
    """Send the run's task once the transaction commits, and note when that message is due (for the reaper)."""
    from workers.tasks import validate_run

    ValidationRun.objects.filter(pk=run.pk).update(sent_at=timezone.now() + timedelta(seconds=countdown))
    transaction.on_commit(lambda: validate_run.apply_async(args=[run.pk], queue="validation", countdown=countdown))


def _running(run_id: int, attempt: int | None):
    """The run, if it is running, and (given `attempt`) still in that attempt: a superseded worker is fenced off."""
    qs = ValidationRun.objects.filter(pk=run_id, state=State.RUNNING)
    return qs if attempt is None else qs.filter(attempts=attempt)


class RerunTooSoon(Exception):
    """The revision was validated moments ago; `wait_s` says when asking again will be accepted."""

    def __init__(self, wait_s: float):
        super().__init__(f"this revision was validated less than a cooldown ago; ask again in {wait_s:.0f} s")
        self.wait_s = wait_s


def validation_run_request(*, revision: Revision, trigger: str, runner: str | None = None, wake: bool = False,
                           requested_by=None, cooldown_s: float = 0) -> tuple[ValidationRun, bool]:
    """Queue a validation of `revision`, or return the live one. Returns (run, created).

    At most one live run per revision and validator version (a database
    constraint); the task is sent only once the row is committed. With
    `cooldown_s`, a revision whose last run finished less than that long ago
    is not run again (RerunTooSoon); a live run is still returned.
    """
    environment = revision.environment
    runner = runner or default_runner(environment)
    if runner not in ValidationRun.Runner.values:
        raise ValueError(f"unknown runner {runner!r}")
    live = ValidationRun.objects.filter(revision=revision, validator_version=VALIDATOR_VERSION,
                                        state__in=ValidationRun.LIVE_STATES)
    existing = live.first()
    if existing:
        return existing, False
    if cooldown_s > 0:
        last = (ValidationRun.objects.filter(revision=revision, finished_at__isnull=False)
                .order_by("-finished_at").values_list("finished_at", flat=True).first())
        if last is not None and (wait := cooldown_s - (timezone.now() - last).total_seconds()) > 0:
            raise RerunTooSoon(wait)
    hub_account = requested_by.name if isinstance(requested_by, HubUser) else ""
    try:
        with transaction.atomic():
            run = ValidationRun.objects.create(
                environment=environment, revision=revision, validator_version=VALIDATOR_VERSION,
                policy_version=POLICY_VERSION, runner=runner, trigger=trigger, wake=wake,
                requested_by=requested_by if getattr(requested_by, "pk", None) else None,
                requested_by_hub=hub_account,
            )
            _enqueue(run)
    except IntegrityError:
        return live.get(), False
    logger.info("validation: queued #%d for %s (%s, %s)", run.pk, revision, runner, trigger)
    return run, True


def validation_run_start(*, run_id: int, worker: str = "") -> ValidationRun | None:
    """queued → running. None when the run is not queued (already running, finished or cancelled): do nothing."""
    now = timezone.now()
    changed = ValidationRun.objects.filter(pk=run_id, state=State.QUEUED).update(
        state=State.RUNNING, started_at=now, heartbeat_at=now, attempts=F("attempts") + 1, worker=worker[:200],
    )
    if not changed:
        logger.info("validation: #%s is not queued; message ignored", run_id)
        return None
    return ValidationRun.objects.select_related("revision", "environment").get(pk=run_id)


def validation_run_heartbeat(*, run_id: int, attempt: int | None = None) -> None:
    """Prove the worker still works on the run; raise RunNotRunning if the run was cancelled or reaped meanwhile
    (or, given `attempt`, started again by another worker)."""
    if not _running(run_id, attempt).update(heartbeat_at=timezone.now()):
        raise RunNotRunning(f"validation #{run_id} is no longer running" + (f" attempt {attempt}" if attempt else ""))


def validation_run_finish(*, run_id: int, outcome: str, report: dict | None, reason: str = "",
                          target_url: str = "", attempt: int | None = None) -> bool:
    """running → finished with an outcome and the report. False when the run was no longer running
    (or, given `attempt`, is in a later attempt: a superseded worker's verdict is dropped)."""
    failing = [
        r["check_id"] for r in (report or {}).get("results", [])
        if r.get("status") in ("fail", "error")
    ]
    return bool(_running(run_id, attempt).update(
        state=State.FINISHED, outcome=outcome, report=report, failing_checks=failing, reason=reason[:2000],
        target_url=target_url[:500], finished_at=timezone.now(),
    ))


def validation_run_cancel(*, run_id: int, reason: str, attempt: int | None = None) -> bool:
    """queued or running → cancelled (a running task notices at its next heartbeat). False if already over
    (or, given `attempt`, the run is no longer in it)."""
    qs = (ValidationRun.objects.filter(pk=run_id, state__in=ValidationRun.LIVE_STATES) if attempt is None
          else _running(run_id, attempt))
    return bool(qs.update(state=State.CANCELLED, reason=reason[:2000], finished_at=timezone.now()))


def validation_run_requeue(*, run_id: int, reason: str, countdown: float = 0, attempt: int | None = None,
                           refund_attempt: bool = False) -> bool:
    """running → queued, for a transient failure of ours (not the environment's); the task is sent again,
    after `countdown` seconds (a backoff, so a Hub outage is not retried in a tight loop).

    `refund_attempt` gives the start back: waiting for a Space to finish building is not a failed attempt.
    """
    with transaction.atomic():
        changed = _running(run_id, attempt).update(
            state=State.QUEUED, reason=reason[:2000], heartbeat_at=None,
            **({"attempts": F("attempts") - 1} if refund_attempt else {}))
        if changed:
            _enqueue(ValidationRun(pk=run_id), countdown=countdown)
    return bool(changed)


def validation_runs_reap(*, stale_after_s: float | None = None, max_attempts: int | None = None) -> dict[str, int]:
    """End runs whose worker died: requeue them while attempts remain, else finish them as errors.

    A run is stale when it has been running without a heartbeat for
    `stale_after_s` (the task beats every HUB_VALIDATION_HEARTBEAT_S while it
    works). Queued runs older than the broker's visibility timeout lost their
    message and are sent again.
    """
    stale_after_s = settings.HUB_VALIDATION_STALE_S if stale_after_s is None else stale_after_s
    max_attempts = settings.HUB_VALIDATION_MAX_ATTEMPTS if max_attempts is None else max_attempts
    now = timezone.now()
    counts = {"requeued": 0, "errored": 0, "resent": 0}
    stale = ValidationRun.objects.filter(state=State.RUNNING, heartbeat_at__lt=now - timedelta(seconds=stale_after_s))
    for run in stale.only("pk", "attempts", "worker"):
        reason = f"The worker ({run.worker or 'unknown'}) stopped sending heartbeats; attempt {run.attempts} was lost."
        if run.attempts < max_attempts:
            counts["requeued"] += validation_run_requeue(run_id=run.pk, reason=reason)
        else:
            counts["errored"] += validation_run_finish(
                run_id=run.pk, outcome=Outcome.ERROR, report=None,
                reason=f"{reason} Gave up after {run.attempts} attempts.",
            )
    cutoff = now - timedelta(seconds=settings.CELERY_VISIBILITY_TIMEOUT_S)
    lost = ValidationRun.objects.filter(
        Q(sent_at__lt=cutoff) | Q(sent_at__isnull=True, queued_at__lt=cutoff), state=State.QUEUED)
    for run in lost.only("pk"):
        with transaction.atomic():
            _enqueue(run)  # and its sent_at moves on: one new message per visibility timeout, not per tick
        counts["resent"] += 1
    if any(counts.values()):
        logger.warning("validation: reaper %s", counts)
    return counts


def validation_reprobe_schedule(*, older_than_s: float | None = None, limit: int = 500) -> int:
    """Queue scheduled re-probes of active environments whose latest result is older than the interval.

    Scheduled runs never wake a sleeping Space (the runner reports it as sleeping instead).
    """
    older_than_s = settings.HUB_VALIDATION_REPROBE_S if older_than_s is None else older_than_s
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    envs = (
        Environment.objects.filter(status=Environment.Status.ACTIVE, head__isnull=False)
        .exclude(validation_runs__queued_at__gte=cutoff)
        .select_related("head")
        .order_by("key")[:limit]
    )
    queued = 0
    for env in envs:
        _, created = validation_run_request(revision=env.head, trigger=ValidationRun.Trigger.SCHEDULE)
        queued += created
    return queued
