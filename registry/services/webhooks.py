"""Hub webhooks: record every delivery, give each fingerprint one job, and act on it by asking the Hub.

Receiving never calls the Hub: a delivery is parsed (registry.webhooks), written as a WebhookDelivery row
and, when it is the one that claims its fingerprint, its job is sent by name once the row is committed (the
task gets only the primary key). The claim is a unique column, so of any number of identical deliveries
arriving at once exactly one is queued and the others are recorded as duplicates.

Acting on a delivery treats it as a hint of which Space changed: the job asks the Hub what is true now
(services.index.space_index_by_id) and follows that, so head moves only to the sha the Hub serves, a replayed
or late delivery changes nothing the Hub does not confirm, and the periodic reconcile stays the backstop for
whatever webhooks miss (the Hub triggers a webhook at most 1,000 times a day).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from registry import webhooks as wh
from registry.hub import HubClient
from registry.models import Environment, OwnerAction, WebhookDelivery
from registry.services.index import SyncSummary, space_index_by_id

logger = logging.getLogger(__name__)

Status = WebhookDelivery.Status

# The task, by its stable name: services never import workers (which import services).
HANDLE_TASK = "registry.handle_webhook"
# A Hub that fails (past the client's own retries), or that does not serve the pushed commit yet, is asked
# again this many times, RETRY_BASE_S apart and doubling; then the delivery ends and the reconcile catches up.
MAX_RETRIES = 3
RETRY_BASE_S = 30.0


@dataclass
class Receipt:
    """How a delivery was received: the row written, the HTTP status to answer, and for a refusal its error
    code and message; for a duplicate, the delivery it duplicates."""

    delivery: WebhookDelivery
    http_status: int
    code: str = ""
    message: str = ""
    duplicate_of: WebhookDelivery | None = None


@dataclass
class Handled:
    """What a job did with its delivery: its status afterwards, and `retry_in` seconds when it asks to run again."""

    status: str
    retry_in: float | None = None


def _ms_since(received_at: datetime) -> float:
    return round((timezone.now() - received_at).total_seconds() * 1000, 1)


def _stale_before() -> datetime:
    """Queued before this, a delivery's message is lost: the broker would have handed it out long ago (its
    visibility timeout), retries and all."""
    return timezone.now() - timedelta(seconds=settings.CELERY_VISIBILITY_TIMEOUT_S + 3600)


def webhook_refuse(*, http_status: int, code: str, message: str, received_at: datetime,
                   fields: dict | None = None) -> Receipt:
    """Record a delivery the hub will not act on (bad secret, too large, unreadable) and say why."""
    row = WebhookDelivery.objects.create(
        received_at=received_at, status=Status.REFUSED, http_status=http_status, outcome=message,
        processed_at=timezone.now(), duration_ms=_ms_since(received_at), **(fields or {}))
    logger.warning("webhook: refused #%s (%s): %s", row.pk, http_status, message)
    webhook_deliveries_prune()
    return Receipt(row, http_status, code=code, message=message)


def webhook_receive(*, body: bytes, received_at: datetime) -> Receipt:
    """Read one authenticated delivery and record it: refused (400/422), ignored (200), a duplicate of one
    queued or handled (200), or queued with its job sent after commit (202; 503 when the broker refused it)."""
    try:
        delivery = wh.parse_delivery(body)
    except wh.PayloadError as exc:
        return webhook_refuse(http_status=exc.status, code=exc.code, message=exc.message, received_at=received_at,
                              fields=exc.fields)
    if delivery.ignored:
        row = WebhookDelivery.objects.create(
            received_at=received_at, status=Status.IGNORED, http_status=200, outcome=delivery.ignored,
            processed_at=timezone.now(), duration_ms=_ms_since(received_at), **delivery.record_fields())
        logger.info("webhook: ignored #%s: %s", row.pk, delivery.ignored)
        webhook_deliveries_prune()
        return Receipt(row, 200, message=delivery.ignored)
    receipt = _claim(delivery, received_at)
    webhook_deliveries_prune()
    return receipt


def _claim(delivery: wh.Delivery, received_at: datetime) -> Receipt:
    """Queue the delivery if it is the first to ask for its fingerprint, else record it as a duplicate.

    The insert itself decides (the claim column is unique): under concurrent requests the database lets one
    in and makes the others wait for it, then fail. A holder still queued long after its message must have
    been handed out lost it; it is failed by compare-and-set and the claim taken over.
    """
    fields = delivery.record_fields()
    for _ in range(3):
        try:
            with transaction.atomic():
                row = WebhookDelivery.objects.create(
                    received_at=received_at, status=Status.QUEUED, http_status=202, claim=delivery.fingerprint,
                    outcome="Queued: the Hub will be asked about the Space.", **fields)
                transaction.on_commit(partial(_publish, row.pk), robust=True)
        except IntegrityError:
            holder = WebhookDelivery.objects.filter(claim=delivery.fingerprint).first()
            if holder is None:
                continue  # released between our insert and this read: one more try
            if holder.status == Status.QUEUED and holder.received_at < _stale_before():
                WebhookDelivery.objects.filter(pk=holder.pk, status=Status.QUEUED, claim=delivery.fingerprint).update(
                    status=Status.FAILED, claim=None, processed_at=timezone.now(),
                    outcome="Never handled: its task message was lost. A later identical delivery took it over.")
                continue
            row = WebhookDelivery.objects.create(
                received_at=received_at, status=Status.DUPLICATE, http_status=200,
                outcome=f"Duplicate of delivery #{holder.pk} ({holder.status}): nothing more to do.",
                processed_at=timezone.now(), duration_ms=_ms_since(received_at), **fields)
            logger.info("webhook: #%s duplicates #%s", row.pk, holder.pk)
            return Receipt(row, 200, duplicate_of=holder)
        row.refresh_from_db(fields=["status", "http_status", "outcome"])
        if row.status == Status.FAILED:  # the broker refused the job (see _publish)
            return Receipt(row, 503, code="unavailable", message=row.outcome)
        logger.info("webhook: queued #%s: %s %s %s", row.pk, delivery.action, delivery.scope, delivery.repo_name)
        return Receipt(row, 202)
    raise RuntimeError(f"could not settle the claim on {delivery.fingerprint}")


def _publish(delivery_id: int) -> None:
    """Send the delivery's job; a broker that refuses fails the delivery (and frees its claim) instead."""
    from celery import current_app

    try:
        current_app.send_task(HANDLE_TASK, args=[delivery_id])
    except Exception as exc:  # noqa: BLE001 - kombu raises many kinds; the reconcile makes up for all of them
        logger.warning("webhook: #%s not queued (%s: %s)", delivery_id, type(exc).__name__, exc)
        _finish(delivery_id, Status.FAILED, http_status=503, outcome=(
            f"Not queued: the task broker refused it ({type(exc).__name__}). The periodic reconcile will catch "
            "up; replaying the delivery from the Hub's webhook page retries it."))


def _finish(delivery_id: int, status: str, *, outcome: str, keep_claim: bool = False, **extra) -> bool:
    """queued → `status`, by compare-and-set: False when another handler got there first."""
    row = WebhookDelivery.objects.filter(pk=delivery_id).only("received_at").first()
    if row is None:
        return False
    now = timezone.now()
    changes = {"status": status, "outcome": outcome[:5000], "processed_at": now,
               "duration_ms": round((now - row.received_at).total_seconds() * 1000, 1), **extra}
    if not keep_claim:
        changes["claim"] = None
    return bool(WebhookDelivery.objects.filter(pk=delivery_id, status=Status.QUEUED).update(**changes))


def webhook_delivery_handle(*, delivery_id: int, attempt: int = 0, client: HubClient | None = None) -> Handled:
    """Act on one queued delivery: ask the Hub about its Space and follow what it says (index the head it
    serves, withdraw what it does not show publicly, rename what moved), then record what was done.

    Idempotent: a delivery that is no longer queued (handled, or its message delivered twice) does nothing.
    Never raises for a delivery's sake: a failure is recorded on the delivery, and the next one is unaffected.
    """
    row = WebhookDelivery.objects.filter(pk=delivery_id, status=Status.QUEUED).first()
    if row is None:
        logger.info("webhook: #%s is not queued; message ignored", delivery_id)
        return Handled("ignored")
    try:
        status, outcome, retry_in = _act(row, client or HubClient(), attempt)
    except Exception as exc:  # noqa: BLE001 - our bug: recorded on the delivery, the reconcile catches up
        logger.exception("webhook: #%s failed", row.pk)
        status, retry_in = Status.FAILED, None
        outcome = (f"Failed internally ({type(exc).__name__}); the periodic reconcile will catch up with "
                   f"{row.moved_to or row.repo_name}.")
    if retry_in is not None:
        WebhookDelivery.objects.filter(pk=row.pk, status=Status.QUEUED).update(outcome=outcome[:5000])
        logger.info("webhook: #%s retries in %.0f s: %s", row.pk, retry_in, outcome)
        return Handled(Status.QUEUED, retry_in)
    # A commit is news once: its claim stays, so a replay of the push does nothing at all. Anything else (a
    # flip to private, a deletion) may happen again and be delivered again, so its claim is given up.
    lasting = status == Status.DONE and row.scope.split(".")[:2] == ["repo", "content"] and bool(row.head_sha)
    _finish(row.pk, status, outcome=outcome, keep_claim=lasting)
    logger.info("webhook: #%s %s: %s", row.pk, status, outcome)
    return Handled(status)


def _act(row: WebhookDelivery, client: HubClient, attempt: int) -> tuple[str, str, float | None]:
    """(status, outcome, retry_in) for one delivery; the Hub is asked here and only here."""
    if row.action == "move":
        old_pk = Environment.objects.filter(key=row.repo_name.lower()).values_list("pk", flat=True).first()
        summary = space_index_by_id(repo_id=row.moved_to, client=client, moved_from=row.repo_name,
                                    actor="hub", via=OwnerAction.Via.WEBHOOK)
        outcome = _describe(summary, row.moved_to, asked_sha="")
        if old_pk and Environment.objects.filter(pk=old_pk, key=row.moved_to.lower()).exists():
            outcome = (f"Renamed {row.repo_name} to {row.moved_to}: its history is kept and the old name "
                       f"redirects. {outcome}")
        elif not summary.hub_sha and not summary.transient:
            # The Hub shows nothing public at the new id (moved again since, or private): the old id's
            # environment follows what the Hub says of the old id.
            old = space_index_by_id(repo_id=row.repo_name, client=client)
            outcome = f"{outcome} {_describe(old, row.repo_name, asked_sha='')}"
    else:
        summary = space_index_by_id(repo_id=row.repo_name, client=client)
        outcome = _describe(summary, row.repo_name, asked_sha=row.head_sha)
    lagging = bool(row.head_sha and row.previous_sha and summary.hub_sha == row.previous_sha
                   and row.head_sha != row.previous_sha)
    if summary.transient or lagging:
        why = ("The Hub still serves the commit this push replaced" if lagging else "The Hub could not answer")
        if attempt < MAX_RETRIES:
            delay = RETRY_BASE_S * 2 ** attempt
            return (Status.QUEUED, f"{why}; asking again in {delay:.0f} s (retry {attempt + 1} of {MAX_RETRIES}). "
                    f"{outcome}", delay)
        # A Hub that keeps failing is a failure; one still serving the old commit is the Hub's news, followed.
        status = Status.FAILED if summary.transient else Status.DONE
        return status, f"{why} after {MAX_RETRIES} retries; the periodic reconcile will catch up. {outcome}", None
    return Status.DONE, outcome, None


def _describe(summary: SyncSummary, repo_id: str, *, asked_sha: str) -> str:
    """What one Space's indexing did, in words an operator reads."""
    run, head = summary.run, summary.hub_sha[:12]
    said: list[str] = []
    if asked_sha and summary.hub_sha and asked_sha != summary.hub_sha:
        said.append(f"The Hub serves {head}, not {asked_sha[:12]} (a later push or a reset overtook this "
                    "delivery): head follows the Hub.")
    if run.new:
        said.append(f"Indexed {repo_id} at {head}: a new environment.")
    if run.updated:
        said.append(f"Indexed {repo_id} at {head}: it is the head now.")
    if run.unchanged:
        said.append(f"{repo_id} was already indexed at {head}: nothing to read.")
    if run.withdrawn:
        reason = (Environment.objects.filter(key=repo_id.lower()).values_list("status_reason", flat=True).first()
                  or "gone from the Hub")
        said.append(f"Withdrew {repo_id}: {reason}")
    said += [str(message) for message in run.messages]
    if run.errors > len(run.messages):
        said.append(f"Indexing {repo_id} failed: see its index errors.")
    return " ".join(said) or f"{repo_id}: nothing to do."


def webhook_deliveries_prune(*, keep: int | None = None) -> int:
    """Delete all but the newest `keep` (HUB_WEBHOOK_KEEP) deliveries, never one whose job may still come.

    One indexed read for the cut-off and one ranged delete, so it runs with every delivery; a prune that
    loses a race with a concurrent one is simply skipped (the next delivery prunes again).
    """
    keep = settings.HUB_WEBHOOK_KEEP if keep is None else keep
    cutoff = list(WebhookDelivery.objects.order_by("-pk").values_list("pk", flat=True)[keep:keep + 1])
    if not cutoff:
        return 0
    try:
        with transaction.atomic():
            deleted, _ = (WebhookDelivery.objects.filter(pk__lte=cutoff[0])
                          .exclude(status=Status.QUEUED, received_at__gte=_stale_before()).delete())
    except DatabaseError as exc:
        logger.info("webhook: prune skipped (%s)", type(exc).__name__)
        return 0
    return deleted
