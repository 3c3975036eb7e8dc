"""Index tasks. Both are idempotent (a second run changes nothing) and acknowledged late,
so a worker that dies mid-task leaves the message to be delivered again."""

from __future__ import annotations

import logging

from celery import shared_task

from registry import services

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
