"""What owners (and staff) do to their environments: yank a revision, deprecate the environment, refresh it from
the Hub, request a validation. Each action is recorded as an OwnerAction (who, what, when, why): the history an
environment page shows. Who may act is decided by the caller (registry.identity.may_act); this module records
and applies.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from registry.models import Environment, OwnerAction, Revision, RevisionYank
from registry.services.catalog import catalog_changed, environment_catalog_refresh

logger = logging.getLogger(__name__)

MAX_REASON_CHARS = 1000
INDEX_TASK = "registry.index_space"  # by name: services never import workers


class ActionRefused(ValueError):
    """The action cannot be done as asked; the message says why, in one sentence."""


class RefreshTooSoon(Exception):
    def __init__(self, wait_s: float):
        super().__init__(f"this environment was refreshed moments ago; ask again in {wait_s:.0f} s")
        self.wait_s = wait_s


def _reason(reason: str, *, required: bool) -> str:
    reason = " ".join((reason or "").split())
    if required and not reason:
        raise ActionRefused("Say why, in a sentence: people who use it will read it.")
    if len(reason) > MAX_REASON_CHARS:
        raise ActionRefused(f"Keep the reason under {MAX_REASON_CHARS} characters.")
    return reason


def owner_action_record(*, environment: Environment, kind: str, actor: str, via: str,
                        revision: Revision | None = None, **detail) -> OwnerAction:
    return OwnerAction.objects.create(environment=environment, kind=kind, actor=actor[:200], via=via,
                                      revision=revision, detail=detail)


def _changed(environment: Environment) -> None:
    """A mirror copies yanks and deprecations: they move the environment in the change feed."""
    Environment.objects.filter(pk=environment.pk).update(changed_at=timezone.now())
    catalog_changed()


def revision_yank(*, revision: Revision, reason: str, actor: str, via: str) -> bool:
    """Yank `revision`: it stays shown and pullable by its sha, is never the last known good, and says why.
    False when it already was yanked (nothing changes)."""
    reason = _reason(reason, required=True)
    with transaction.atomic():
        Environment.objects.select_for_update().filter(pk=revision.environment_id).first()
        if RevisionYank.objects.filter(revision=revision).exists():
            return False
        RevisionYank.objects.create(revision=revision, reason=reason, actor=actor[:200])
        owner_action_record(environment=revision.environment, kind=OwnerAction.Kind.YANK, actor=actor, via=via,
                            revision=revision, reason=reason)
        environment_catalog_refresh(environment_id=revision.environment_id)
        _changed(revision.environment)
    logger.info("owner: %s yanked %s: %s", actor, revision, reason)
    return True


def revision_unyank(*, revision: Revision, actor: str, via: str) -> bool:
    """Restore a yanked revision. False when it was not yanked."""
    with transaction.atomic():
        Environment.objects.select_for_update().filter(pk=revision.environment_id).first()
        deleted, _ = RevisionYank.objects.filter(revision=revision).delete()
        if not deleted:
            return False
        owner_action_record(environment=revision.environment, kind=OwnerAction.Kind.UNYANK, actor=actor, via=via,
                            revision=revision)
        environment_catalog_refresh(environment_id=revision.environment_id)
        _changed(revision.environment)
    return True


def environment_deprecate(*, environment: Environment, reason: str, successor: Environment | None, actor: str,
                          via: str) -> None:
    """Mark the environment deprecated (again, to change the reason or successor): still listed and pullable,
    says so everywhere and points at its successor."""
    reason = _reason(reason, required=True)
    if successor is not None and successor.pk == environment.pk:
        raise ActionRefused("An environment cannot succeed itself.")
    if successor is not None and successor.status != Environment.Status.ACTIVE:
        raise ActionRefused(f"{successor.repo_id} is withdrawn: name an active environment as the successor.")
    with transaction.atomic():
        Environment.objects.filter(pk=environment.pk).update(
            deprecated_at=timezone.now(), deprecation_reason=reason, successor=successor)
        owner_action_record(environment=environment, kind=OwnerAction.Kind.DEPRECATE, actor=actor, via=via,
                            reason=reason, successor=successor.repo_id if successor else "")
        _changed(environment)
    environment.refresh_from_db()


def environment_undeprecate(*, environment: Environment, actor: str, via: str) -> bool:
    with transaction.atomic():
        if not Environment.objects.filter(pk=environment.pk, deprecated_at__isnull=False).update(
                deprecated_at=None, deprecation_reason="", successor=None):
            return False
        owner_action_record(environment=environment, kind=OwnerAction.Kind.UNDEPRECATE, actor=actor, via=via)
        _changed(environment)
    environment.refresh_from_db()
    return True


def space_refresh_request(*, repo_id: str, environment: Environment | None, actor: str, via: str) -> None:
    """Read the Space from the Hub now (a worker's index_space task, sent once this commits), at most once per
    HUB_REFRESH_COOLDOWN_S for each Space (RefreshTooSoon). Works for a Space the hub has not indexed yet."""
    key = f"space-refresh:{repo_id.lower()}"
    if not cache.add(key, timezone.now().timestamp(), settings.HUB_REFRESH_COOLDOWN_S):
        started = cache.get(key) or timezone.now().timestamp()
        raise RefreshTooSoon(max(1.0, settings.HUB_REFRESH_COOLDOWN_S - (timezone.now().timestamp() - started)))
    if environment is not None:
        owner_action_record(environment=environment, kind=OwnerAction.Kind.REFRESH, actor=actor, via=via)
    space_index_send(repo_id)


def space_index_send(repo_id: str) -> None:
    """Have a worker index `repo_id` from the Hub, once the current transaction commits. Never raises: a broker
    that refuses is logged, and the periodic sync reads the Space anyway."""

    def publish() -> None:
        from celery import current_app

        try:
            current_app.send_task(INDEX_TASK, args=[repo_id])
        except Exception as exc:  # noqa: BLE001 - kombu raises many kinds; the periodic sync makes up for them
            logger.warning("index: %s not sent (%s: %s); the next sync reads it", repo_id, type(exc).__name__, exc)

    transaction.on_commit(publish, robust=True)
