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
from registry.conformance.report import with_property_order
from registry.identity import HubUser
from registry.models import Environment, Revision, ValidationRun
from registry.services.catalog import environment_catalog_refresh

logger = logging.getLogger(__name__)

State, Outcome = ValidationRun.State, ValidationRun.Outcome


class RunNotRunning(Exception):
    """The run is no longer ours to work on (cancelled, reaped, or finished elsewhere)."""


def default_runner(environment: Environment) -> str:
    """Local sources run in the sandbox; Hub Spaces are probed where they run, unless configured otherwise."""
    if environment.source == Environment.Source.LOCAL:
        return ValidationRun.Runner.LOCAL
    return settings.HUB_VALIDATION_RUNNER


# The task, by its stable name: services never import workers (which import services).
VALIDATE_TASK = "registry.validate_run"
VALIDATION_QUEUE = "validation"


def _publish(run_id: int, countdown: float) -> None:
    """Hand the run's message to the broker, then note that it got there.

    Never raises: a broker that refuses leaves `sent_at` empty, and the
    reaper sends the run again once it is past due; the caller's committed
    work (an API answer, a sync) stands.
    """
    from celery import current_app

    try:
        current_app.send_task(VALIDATE_TASK, args=[run_id], queue=VALIDATION_QUEUE, countdown=countdown or None)
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds; the reaper makes up for all of them
        logger.warning("validation: #%s not sent (%s: %s); the reaper will send it", run_id, type(exc).__name__, exc)
        return
    ValidationRun.objects.filter(pk=run_id, state=State.QUEUED, sent_at__isnull=True).update(sent_at=timezone.now())


def _enqueue(run_id: int, *, countdown: float = 0) -> None:
    """Mark the run as waiting for a message due in `countdown` seconds, and send it once the transaction commits."""
    ValidationRun.objects.filter(pk=run_id).update(due_at=timezone.now() + timedelta(seconds=countdown), sent_at=None)
    transaction.on_commit(lambda: _publish(run_id, countdown), robust=True)


def _running(run_id: int, attempt: int | None, *, stale_before=None):
    """The run, if it is running, and (given `attempt`) still in that attempt: a superseded worker is fenced off.

    With `stale_before`, only while its heartbeat is still older than that: the reaper's judgement holds
    only if no beat arrived since.
    """
    qs = ValidationRun.objects.filter(pk=run_id, state=State.RUNNING)
    if attempt is not None:
        qs = qs.filter(attempts=attempt)
    return qs if stale_before is None else qs.filter(heartbeat_at__lt=stale_before)


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
            _enqueue(run.pk)
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
                          target_url: str = "", attempt: int | None = None, stale_before=None,
                          observed: dict | None = None) -> bool:
    """running → finished with an outcome, the report and what the server showed (`observed`: its schemas keep
    their fields' declared order, which the database would not), and the environment's catalog summary follows.
    False when the run was no longer running (or, given `attempt`, is
    in a later attempt: a superseded worker's verdict is dropped; given `stale_before`, it beat since)."""
    failing = [
        r["check_id"] for r in (report or {}).get("results", [])
        if r.get("status") in ("fail", "error")
    ]
    with transaction.atomic():
        finished = bool(_running(run_id, attempt, stale_before=stale_before).update(
            state=State.FINISHED, outcome=outcome, report=report, failing_checks=failing, reason=reason[:2000],
            target_url=target_url[:500], finished_at=timezone.now(), observed=with_property_order(observed),
        ))
        if finished:
            environment_id = ValidationRun.objects.filter(pk=run_id).values_list("environment_id", flat=True).get()
            environment_catalog_refresh(environment_id=environment_id)
    return finished


def validation_run_cancel(*, run_id: int, reason: str, attempt: int | None = None) -> bool:
    """queued or running → cancelled (a running task notices at its next heartbeat). False if already over
    (or, given `attempt`, the run is no longer in it)."""
    qs = (ValidationRun.objects.filter(pk=run_id, state__in=ValidationRun.LIVE_STATES) if attempt is None
          else _running(run_id, attempt))
    return bool(qs.update(state=State.CANCELLED, reason=reason[:2000], finished_at=timezone.now()))


def validation_run_requeue(*, run_id: int, reason: str, countdown: float = 0, attempt: int | None = None,
                           refund_attempt: bool = False, stale_before=None) -> bool:
    """running → queued, for a transient failure of ours (not the environment's); the task is sent again,
    after `countdown` seconds (a backoff, so a Hub outage is not retried in a tight loop).

    `refund_attempt` gives the start back: waiting for a Space to finish building is not a failed attempt.
    """
    with transaction.atomic():
        changed = _running(run_id, attempt, stale_before=stale_before).update(
            state=State.QUEUED, reason=reason[:2000], heartbeat_at=None,
            **({"attempts": F("attempts") - 1} if refund_attempt else {}))
        if changed:
            _enqueue(run_id, countdown=countdown)
    return bool(changed)


def validation_run_reap_one(*, run_id: int, attempt: int, stale_before, worker: str = "",
                            max_attempts: int | None = None) -> str | None:
    """End one run judged dead: requeue it while attempts remain, else finish it as an error.

    Conditional on what was judged (still running in `attempt`, heartbeat still older than
    `stale_before`): a worker that beat in between keeps its run. Returns "requeued", "errored" or None.
    """
    max_attempts = settings.HUB_VALIDATION_MAX_ATTEMPTS if max_attempts is None else max_attempts
    reason = f"The worker ({worker or 'unknown'}) stopped sending heartbeats; attempt {attempt} was lost."
    if attempt < max_attempts:
        return "requeued" if validation_run_requeue(run_id=run_id, reason=reason, attempt=attempt,
                                                    stale_before=stale_before) else None
    return "errored" if validation_run_finish(
        run_id=run_id, outcome=Outcome.ERROR, report=None, reason=f"{reason} Gave up after {attempt} attempts.",
        attempt=attempt, stale_before=stale_before) else None


def _past_due(now, seconds: float) -> Q:
    """Queued runs whose message was due more than `seconds` ago (rows from before due_at count from queued_at)."""
    before = now - timedelta(seconds=seconds)
    return Q(due_at__lt=before) | Q(due_at__isnull=True, queued_at__lt=before)


def validation_runs_reap(*, stale_after_s: float | None = None, max_attempts: int | None = None) -> dict[str, int]:
    """End runs whose worker died, and send the messages that never reached a worker.

    A run is stale when it has been running without a heartbeat for
    `stale_after_s` (the task beats every HUB_VALIDATION_HEARTBEAT_S while it
    works). A queued run whose message never reached the broker is sent once
    it is HUB_VALIDATION_UNSENT_GRACE_S past due; one whose message was sent
    but not taken within the broker's visibility timeout after it was due
    lost it, and is sent again (once per visibility timeout, not per tick).
    """
    stale_after_s = settings.HUB_VALIDATION_STALE_S if stale_after_s is None else stale_after_s
    now = timezone.now()
    counts = {"requeued": 0, "errored": 0, "resent": 0}
    stale_before = now - timedelta(seconds=stale_after_s)
    stale = ValidationRun.objects.filter(state=State.RUNNING, heartbeat_at__lt=stale_before)
    for run in stale.only("pk", "attempts", "worker"):
        ended = validation_run_reap_one(run_id=run.pk, attempt=run.attempts, stale_before=stale_before,
                                        worker=run.worker, max_attempts=max_attempts)
        if ended:
            counts[ended] += 1
    resend = ((Q(sent_at__isnull=True) & _past_due(now, settings.HUB_VALIDATION_UNSENT_GRACE_S))
              | (Q(sent_at__isnull=False) & _past_due(now, settings.CELERY_VISIBILITY_TIMEOUT_S)))
    for pk in ValidationRun.objects.filter(resend, state=State.QUEUED).values_list("pk", flat=True):
        with transaction.atomic():
            # Claimed by compare-and-set: a concurrent reaper, or a late publish, leaves nothing to claim.
            if ValidationRun.objects.filter(resend, pk=pk, state=State.QUEUED).update(due_at=now, sent_at=None):
                transaction.on_commit(lambda pk=pk: _publish(pk, 0), robust=True)
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
        .exclude(source=Environment.Source.CATALOG)  # imported entries: no code of theirs runs here
        .exclude(validation_runs__queued_at__gte=cutoff)
        .select_related("head")
        .order_by("key")[:limit]
    )
    queued = 0
    for env in envs:
        _, created = validation_run_request(revision=env.head, trigger=ValidationRun.Trigger.SCHEDULE)
        queued += created
    return queued
