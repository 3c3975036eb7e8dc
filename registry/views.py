"""Web pages and probes. Thin: parse input, call a selector, render."""

from __future__ import annotations

import logging

from django.core.paginator import Paginator
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache

from registry import selectors
from registry.models import Environment, SyncRun

logger = logging.getLogger(__name__)


def home(request: HttpRequest) -> HttpResponse:
    """The catalog's front page: indexed environments, newest first, with their index errors."""
    query = request.GET.get("q", "").strip()[:200]
    page = Paginator(selectors.environment_list(search=query), 50).get_page(request.GET.get("page"))
    for env in page.object_list:
        env.display_tags = selectors.environment_tags(env)
    hub_sync = selectors.sync_run_latest(kind=SyncRun.Kind.HUB)
    return render(request, "registry/home.html", {"page": page, "query": query, "hub_sync": hub_sync})


def environment_detail(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    env = selectors.environment_get(owner=owner, name=name)
    if env is None:
        raise Http404(f"No environment {owner}/{name}")
    if (env.owner, env.name) != (owner, name):
        return redirect("registry:environment", owner=env.owner, name=env.name, permanent=True)
    env.display_tags = selectors.environment_tags(env)
    return render(request, "registry/environment.html", {"env": env, "Status": Environment.Status})


@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers."""
    return JsonResponse({"status": "ok"})


@never_cache
def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: the database answers a query and the broker accepts a connection."""
    from hub.celery import app

    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=3)
        checks["broker"] = "ok"
    except Exception as exc:  # noqa: BLE001
        checks["broker"] = f"error: {type(exc).__name__}"
    ready = all(v == "ok" for v in checks.values())
    if not ready:
        logger.warning("readyz: not ready: %s", checks)
    return JsonResponse({"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503)
