"""The run state machine, one for every job the hub runs on an environment: validations and evaluations.

A run's row is written before its task is sent (after commit), the task gets
only the primary key, and the run moves queued → running → finished |
cancelled by `filter(pk=…, state=A).update(state=B)`: whoever changes exactly
one row owns the transition; everyone else does nothing. Every write a worker
makes is fenced by its attempt; `sent_at` is set only once the broker took the
message, so the reaper can send what never left; a run whose heartbeat stops
is requeued while attempts remain, then ended as an error.

Each kind of run (`RunKind`) names its model, its task and its queue; the
kind-specific parts (what a finished run records) stay with the kind's own
service (registry.services.validation, registry.services.evaluation).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Q
from django.utils import timezone

from registry.models import ValidationRun

logger = logging.getLogger(__name__)

State = ValidationRun.State


class RunNotRunning(Exception):
    """The run is no longer ours to work on (cancelled, reaped, or finished elsewhere)."""


@dataclass(frozen=True)
class RunKind:
    """A kind of run: its model, the task that works on it (by its stable name: services never import workers),
    its queue, and how an abandoned run is ended once its attempts are spent."""

    label: str
    model: type[models.Model]
    task: str
    queue: str
    # finish_error(run_id, reason, attempt, stale_before) -> bool: end the run as an error, fenced.
    finish_error: Callable[..., bool]


def publish(kind: RunKind, run_id: int, countdown: float) -> None:
    """Hand the run's message to the broker, then note that it got there.

    Never raises: a broker that refuses leaves `sent_at` empty, and the
    reaper sends the run again once it is past due; the caller's committed
    work (an API answer, a sync) stands.
    """
    from celery import current_app

    try:
        current_app.send_task(kind.task, args=[run_id], queue=kind.queue, countdown=countdown or None)
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds; the reaper makes up for all of them
        logger.warning("%s: #%s not sent (%s: %s); the reaper will send it", kind.label, run_id, type(exc).__name__, exc)
        return
    kind.model.objects.filter(pk=run_id, state=State.QUEUED, sent_at__isnull=True).update(sent_at=timezone.now())


def enqueue(kind: RunKind, run_id: int, *, countdown: float = 0) -> None:
    """Mark the run as waiting for a message due in `countdown` seconds, and send it once the transaction commits."""
    kind.model.objects.filter(pk=run_id).update(due_at=timezone.now() + timedelta(seconds=countdown), sent_at=None)
    transaction.on_commit(lambda: publish(kind, run_id, countdown), robust=True)


def running(kind: RunKind, run_id: int, attempt: int | None, *, stale_before=None):
    """The run, if it is running, and (given `attempt`) still in that attempt: a superseded worker is fenced off.

    With `stale_before`, only while its heartbeat is still older than that: the reaper's judgement holds
    only if no beat arrived since.
    """
    qs = kind.model.objects.filter(pk=run_id, state=State.RUNNING)
    if attempt is not None:
        qs = qs.filter(attempts=attempt)
    return qs if stale_before is None else qs.filter(heartbeat_at__lt=stale_before)


def start(kind: RunKind, run_id: int, *, worker: str = ""):
    """queued → running. None when the run is not queued (already running, finished or cancelled): do nothing."""
    now = timezone.now()
    changed = kind.model.objects.filter(pk=run_id, state=State.QUEUED).update(
        state=State.RUNNING, started_at=now, heartbeat_at=now, attempts=F("attempts") + 1, worker=worker[:200],
    )
    if not changed:
        logger.info("%s: #%s is not queued; message ignored", kind.label, run_id)
        return None
    return kind.model.objects.select_related("revision", "environment").get(pk=run_id)


def heartbeat(kind: RunKind, run_id: int, *, attempt: int | None = None) -> None:
    """Prove the worker still works on the run; raise RunNotRunning if the run was cancelled or reaped meanwhile
    (or, given `attempt`, started again by another worker)."""
    if not running(kind, run_id, attempt).update(heartbeat_at=timezone.now()):
        raise RunNotRunning(f"{kind.label} #{run_id} is no longer running" + (f" attempt {attempt}" if attempt else ""))


def cancel(kind: RunKind, run_id: int, *, reason: str, attempt: int | None = None) -> bool:
    """queued or running → cancelled (a running task notices at its next heartbeat). False if already over
    (or, given `attempt`, the run is no longer in it)."""
    qs = (kind.model.objects.filter(pk=run_id, state__in=ValidationRun.LIVE_STATES) if attempt is None
          else running(kind, run_id, attempt))
    return bool(qs.update(state=State.CANCELLED, reason=reason[:2000], finished_at=timezone.now()))


def requeue(kind: RunKind, run_id: int, *, reason: str, countdown: float = 0, attempt: int | None = None,
            refund_attempt: bool = False, stale_before=None) -> bool:
    """running → queued, for a transient failure of ours (not the environment's); the task is sent again,
    after `countdown` seconds (a backoff, so an outage is not retried in a tight loop).

    `refund_attempt` gives the start back: waiting for a Space to finish building is not a failed attempt.
    """
    with transaction.atomic():
        changed = running(kind, run_id, attempt, stale_before=stale_before).update(
            state=State.QUEUED, reason=reason[:2000], heartbeat_at=None,
            **({"attempts": F("attempts") - 1} if refund_attempt else {}))
        if changed:
            enqueue(kind, run_id, countdown=countdown)
    return bool(changed)


def reap_one(kind: RunKind, run_id: int, *, attempt: int, stale_before, worker: str = "",
             max_attempts: int | None = None) -> str | None:
    """End one run judged dead: requeue it while attempts remain, else finish it as an error.

    Conditional on what was judged (still running in `attempt`, heartbeat still older than
    `stale_before`): a worker that beat in between keeps its run. Returns "requeued", "errored" or None.
    """
    max_attempts = settings.HUB_VALIDATION_MAX_ATTEMPTS if max_attempts is None else max_attempts
    reason = f"The worker ({worker or 'unknown'}) stopped sending heartbeats; attempt {attempt} was lost."
    if attempt < max_attempts:
        return "requeued" if requeue(kind, run_id, reason=reason, attempt=attempt, stale_before=stale_before) else None
    return "errored" if kind.finish_error(run_id=run_id, reason=f"{reason} Gave up after {attempt} attempts.",
                                          attempt=attempt, stale_before=stale_before) else None


def _past_due(now, seconds: float) -> Q:
    """Queued runs whose message was due more than `seconds` ago (rows from before due_at count from queued_at)."""
    before = now - timedelta(seconds=seconds)
    return Q(due_at__lt=before) | Q(due_at__isnull=True, queued_at__lt=before)


def reap(kind: RunKind, *, stale_after_s: float | None = None, max_attempts: int | None = None) -> dict[str, int]:
    """End runs whose worker died, and send the messages that never reached a worker.

    A run is stale when it has been running without a heartbeat for
    `stale_after_s` (tasks beat every HUB_VALIDATION_HEARTBEAT_S while they
    work). A queued run whose message never reached the broker is sent once
    it is HUB_VALIDATION_UNSENT_GRACE_S past due; one whose message was sent
    but not taken within the broker's visibility timeout after it was due
    lost it, and is sent again (once per visibility timeout, not per tick).
    """
    stale_after_s = settings.HUB_VALIDATION_STALE_S if stale_after_s is None else stale_after_s
    now = timezone.now()
    counts = {"requeued": 0, "errored": 0, "resent": 0}
    stale_before = now - timedelta(seconds=stale_after_s)
    stale = kind.model.objects.filter(state=State.RUNNING, heartbeat_at__lt=stale_before)
    for run in stale.only("pk", "attempts", "worker"):
        ended = reap_one(kind, run.pk, attempt=run.attempts, stale_before=stale_before, worker=run.worker,
                         max_attempts=max_attempts)
        if ended:
            counts[ended] += 1
    resend = ((Q(sent_at__isnull=True) & _past_due(now, settings.HUB_VALIDATION_UNSENT_GRACE_S))
              | (Q(sent_at__isnull=False) & _past_due(now, settings.CELERY_VISIBILITY_TIMEOUT_S)))
    for pk in kind.model.objects.filter(resend, state=State.QUEUED).values_list("pk", flat=True):
        with transaction.atomic():
            # Claimed by compare-and-set: a concurrent reaper, or a late publish, leaves nothing to claim.
            if kind.model.objects.filter(resend, pk=pk, state=State.QUEUED).update(due_at=now, sent_at=None):
                transaction.on_commit(lambda pk=pk: publish(kind, pk, 0), robust=True)
                counts["resent"] += 1
    if any(counts.values()):
        logger.warning("%s: reaper %s", kind.label, counts)
    return counts
