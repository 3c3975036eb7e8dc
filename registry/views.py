"""Web pages and probes. Thin: parse input, call a selector, render."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.paginator import Paginator
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from registry import selectors
from registry.models import Environment, SyncRun, ValidationRun
from registry.services import validation

logger = logging.getLogger(__name__)

REVISIONS_PER_PAGE = 20


def home(request: HttpRequest) -> HttpResponse:
    """The catalog's front page: indexed environments, newest first, with their index errors."""
    query = request.GET.get("q", "").strip()[:200]
    page = Paginator(selectors.environment_list(search=query), 50).get_page(request.GET.get("page"))
    page.object_list = selectors.environments_with_verdicts(page.object_list)
    for env in page.object_list:
        env.display_tags = selectors.environment_tags(env)
    hub_sync = selectors.sync_run_latest(kind=SyncRun.Kind.HUB)
    return render(request, "registry/home.html", {"page": page, "query": query, "hub_sync": hub_sync})


def _environment_or_404(owner: str, name: str) -> Environment:
    env = selectors.environment_get(owner=owner, name=name)
    if env is None:
        raise Http404(f"No environment {owner}/{name}")
    return env


def environment_detail(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    env = _environment_or_404(owner, name)
    if (env.owner, env.name) != (owner, name):
        return redirect("registry:environment", owner=env.owner, name=env.name, permanent=True)
    env.display_tags = selectors.environment_tags(env)
    revisions = Paginator(selectors.revision_list(environment=env), REVISIONS_PER_PAGE).get_page(
        request.GET.get("revisions_page"))
    context = {
        "env": env,
        "revisions": revisions,
        "Status": Environment.Status,
        "verdict": selectors.environment_verdict(environment=env),
        "live_run": selectors.validation_run_live(environment=env),
        "runs": selectors.validation_run_list(environment=env)[:20],
        "runs_api_url": settings.SITE_URL + reverse("api:validation-list", kwargs={"owner": env.owner, "name": env.name}),
    }
    return render(request, "registry/environment.html", context)


def validation_report(request: HttpRequest, owner: str, name: str, run_id: int) -> HttpResponse:
    """Every check of one validation run: status, evidence, remediation, measurements."""
    env = _environment_or_404(owner, name)
    run = selectors.validation_run_get(environment=env, run_id=run_id)
    if run is None:
        raise Http404(f"No validation run {run_id} of {env.repo_id}")
    results = (run.report or {}).get("results", [])
    return render(request, "registry/validation_report.html", {"env": env, "run": run, "results": results})


@staff_member_required
@require_POST
def validation_request(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Staff ask for a fresh validation of the head revision (which may wake a sleeping Space)."""
    env = _environment_or_404(owner, name)
    if env.head is None:
        messages.error(request, "There is no indexed revision to validate.")
    else:
        runner = request.POST.get("runner") or None
        if runner not in (None, *ValidationRun.Runner.values):
            raise Http404("unknown runner")
        run, created = validation.validation_run_request(
            revision=env.head, trigger=ValidationRun.Trigger.REQUEST, runner=runner, wake=True,
            requested_by=request.user)
        messages.info(request, f"Validation #{run.pk} {'queued' if created else 'is already ' + run.state}.")
    return redirect("registry:environment", owner=env.owner, name=env.name)


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
