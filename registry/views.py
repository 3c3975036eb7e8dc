"""Web pages and probes. Thin: parse input, call selectors (and the presenters), render."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import re
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotModified, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.utils.http import parse_etags, quote_etag
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST, require_safe

from registry import badges, identity, presenters, selectors
from registry.api.errors import envelope
from registry.models import Environment, Evaluation, OwnerAction, Revision, SyncRun, ValidationRun, WebhookDelivery
from registry.moved import EnvironmentMoved, moved_redirect
from registry.pulls import pull_forms, pull_target
from registry.services import validation, webhooks
from registry.services.owner import owner_action_record
from registry.services.catalog import revision_readme_html

logger = logging.getLogger(__name__)

PAGE_SIZE = 20
REVISIONS_PER_PAGE = 20
RUNS_SHOWN = 10
HISTORY_SHOWN = 20


def _hub_status() -> dict:
    """One line about the last Hub sync: when the Hub was last reached, and whether the last try reached it."""
    last = selectors.sync_run_latest(kind=SyncRun.Kind.HUB)
    reached = (SyncRun.objects.filter(kind=SyncRun.Kind.HUB, state=SyncRun.State.FINISHED, listing_complete=True)
               .order_by("-finished_at").values_list("finished_at", flat=True).first())
    return {"last": last, "reached_at": reached, "endpoint": settings.HF_ENDPOINT,
            "unreachable": bool(last and not last.listing_complete)}


def home(request: HttpRequest) -> HttpResponse:
    """The front page: search, counts, recently updated / validated, most liked, and how to publish."""
    if request.GET.get("q"):  # the header's search box works from every page, this one included
        return redirect(f"{reverse('registry:browse')}?{urlencode({'q': request.GET['q']})}")
    return render(request, "registry/home.html", {"home": selectors.catalog_home(), "hub": _hub_status()})


def browse(request: HttpRequest, owner: str | None = None, tag: str | None = None) -> HttpResponse:
    """The catalog: search, facets, sorts and pages; `owner` and `tag` pages are the same, pre-filtered."""
    query, notes = selectors.catalog_query_from_params(request.GET)
    base_path = request.path
    if owner is not None:
        query = query.with_value("owner", owner)
    if tag is not None:
        query = query.with_value("tag", tag)
    page = selectors.catalog_page(query, request.GET.get("page"), per_page=PAGE_SIZE)
    if request.GET.get("page") and str(page.number) != request.GET.get("page"):
        notes.append(f"There is no page {request.GET['page'][:20]!r}; this is page {page.number}.")
    facets = selectors.catalog_facets(query)
    fixed = {"owner": owner, "tag": tag}

    def url(state: selectors.CatalogQuery, **extra) -> str:
        params = [(k, v) for k, v in state.as_params() if fixed.get(k) != v] + list(extra.items())
        return f"{base_path}?{urlencode(params)}" if params else base_path

    for facet in facets:
        for value in facet.values:
            value.url = url(query.toggled(facet.name, value.value))
            value.fixed = fixed.get(facet.name) == value.value
    suggestions = selectors.environment_suggestions(q=query.q) if query.q and not page.paginator.count else []
    context = {
        "query": query, "page": page, "facets": facets, "notes": notes, "suggestions": suggestions,
        "sorts": [(key, label, url(query.with_sort(key)), key == query.effective_sort)
                  for key, label in selectors.SORTS.items() if key != "relevance" or query.q],
        "owner": owner, "tag": tag, "clear_url": base_path,
        "prev_url": url(query, page=page.previous_page_number()) if page.has_previous() else None,
        "next_url": url(query, page=page.next_page_number()) if page.has_next() else None,
    }
    return render(request, "registry/browse.html", context)


def follows_moves(view):
    """Answer a request for an environment's old id (EnvironmentMoved) with a redirect to its new one."""
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except EnvironmentMoved as moved:
            match = request.resolver_match
            return moved_redirect(request, moved.environment, match.view_name, match.kwargs)
    return wrapper


def environment_or_404(owner: str, name: str) -> Environment:
    env = selectors.environment_get(owner=owner, name=name)
    if env is None:
        moved = selectors.environment_moved(owner=owner, name=name)
        if moved is not None:
            raise EnvironmentMoved(moved)
        raise Http404(f"No environment {owner}/{name} in the index.")
    return env


@follows_moves
def environment_detail(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """One environment at its head, or at `?revision=<sha or unique prefix>`: everything needed to trust and pull it."""
    env = environment_or_404(owner, name)
    if (env.owner, env.name) != (owner, name):
        query = f"?{request.META['QUERY_STRING']}" if request.META.get("QUERY_STRING") else ""
        return redirect(reverse("registry:environment", kwargs={"owner": env.owner, "name": env.name}) + query,
                        permanent=True)
    notes: list[str] = []
    revision, ref = env.head, request.GET.get("revision", "").strip()
    if ref:
        try:
            found = selectors.revision_resolve(environment=env, ref=ref, revisions=selectors.with_yank(
                Revision.objects.defer("files")))
        except selectors.AmbiguousRevision:
            found = None
            notes.append(f"More than one revision starts with {ref[:64]!r}: give more of the sha. Showing the head.")
        else:
            if found is None:
                notes.append(f"No revision of {env.repo_id} matches {ref[:64]!r}. Showing the head.")
        revision = found or revision
    staff = request.user.is_staff
    context = {"env": env, "Status": Environment.Status, "notes": notes, "staff": staff,
               "can_act": identity.may_act(request.user, env),
               "history": list(selectors.environment_history(environment=env)[:HISTORY_SHOWN])}
    if revision is not None:
        older = revision.pk != env.head_id
        if not older:
            revision.yank_reason = env.head_yank_reason  # loaded with the environment
        run = selectors.revision_run_latest(revision=revision)
        observed = (run.observed or {}) if run else {}
        schemas = observed.get("schemas") if isinstance(observed.get("schemas"), dict) else {}
        # Offer the last known good when the head fails, or when its owners yanked it.
        wanted = not older and (env.verdict_outcome in ("fail", "error") or env.head_yank_reason is not None)
        good = selectors.environment_good_run(env) if wanted else None
        show_good = good is not None and good.revision_id != env.head_id
        context.update({
            "revision": revision, "older": older, "run": run,
            "pulls": pull_forms(pull_target(env, revision, hub=settings.HF_ENDPOINT, staff=staff)),
            "good": good if show_good else None,
            "good_pulls": pull_forms(pull_target(env, good.revision, hub=settings.HF_ENDPOINT, staff=staff)) if show_good else None,
            "readme_html": revision_readme_html(revision_id=revision.pk),
            "schemas": [(part, presenters.schema_rows(schemas.get(part))) for part in ("action", "observation", "state")
                        if isinstance(schemas.get(part), dict)],
            "tools": presenters.tool_views(observed.get("tools")),
            "episode": observed.get("episode") if isinstance(observed.get("episode"), list) else [],
            "results": (run.report or {}).get("results", []) if run else [],
            "space_url": f"{settings.HF_ENDPOINT}/spaces/{env.repo_id}" if env.source == "huggingface" else "",
        })
    context.update({
        "tags": selectors.environment_tags(env),
        "live_run": selectors.validation_run_live(environment=env),
        "runs": selectors.validation_run_list(environment=env)[:RUNS_SHOWN],
        "revisions": Paginator(selectors.revision_list(environment=env), REVISIONS_PER_PAGE).get_page(
            request.GET.get("revisions_page")),
        "runs_api_url": settings.SITE_URL + reverse("api:validation-list", kwargs={"owner": env.owner, "name": env.name}),
        "badges": _badge_blocks(env),
    })
    board = selectors.evaluations(environment=env)
    context.update({"board": board, "board_rows": _board_rows(board.rows[:LEADERBOARD_ON_PAGE])})
    return render(request, "registry/environment.html", context)


LEADERBOARD_ON_PAGE = 5


def _board_rows(rows: list) -> list:
    for row, bar in zip(rows, presenters.interval_bars(rows)):
        row.bar = bar
    return rows


def _evaluation_filters(request: HttpRequest) -> tuple[dict, list[str]]:
    """The leaderboard's filters from the query string; what is malformed is ignored and said."""
    notes, get = [], request.GET
    provenance = get.get("provenance", "")
    if provenance and provenance not in Evaluation.Provenance.values:
        notes.append(f"Unknown provenance {provenance[:40]!r}: showing every provenance.")
        provenance = ""
    revision = get.get("revision", "")
    if revision and not re.fullmatch(r"[0-9a-fA-F]{4,64}", revision):
        notes.append("A revision is a sha or a prefix of at least 4 hexadecimal characters: showing every revision.")
        revision = ""
    return ({"provenance": provenance or None, "revision": revision or None,
             "include_stale": get.get("include_stale") in ("true", "1", "yes", "on")}, notes)


@follows_moves
def leaderboard(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Every result of the environment, ranked by mean with interval bars; stale rows hidden unless asked."""
    env = environment_or_404(owner, name)
    if (env.owner, env.name) != (owner, name):
        return redirect(reverse("registry:leaderboard", kwargs={"owner": env.owner, "name": env.name}), permanent=True)
    filters, notes = _evaluation_filters(request)
    board = selectors.evaluations(environment=env, **filters)
    _board_rows(board.rows)
    return render(request, "registry/leaderboard.html", {
        "env": env, "board": board, "filters": filters, "notes": notes,
        "provenances": Evaluation.Provenance.choices,
        "api_url": settings.SITE_URL + reverse("api:leaderboard", kwargs={"owner": env.owner, "name": env.name}),
    })


@follows_moves
def evaluation_detail(request: HttpRequest, owner: str, name: str, evaluation_id: int) -> HttpResponse:
    """One result: its statistics, its provenance and every episode."""
    env = environment_or_404(owner, name)
    row = selectors.evaluation_get(environment=env, evaluation_id=evaluation_id)
    if row is None:
        raise Http404("No such evaluation of this environment.")
    return render(request, "registry/evaluation.html", {"env": env, "row": row, "hub": settings.HF_ENDPOINT})


def model_detail(request: HttpRequest, agent: str) -> HttpResponse:
    """One model's (or policy's) results across environments."""
    return render(request, "registry/model.html", {"agent": agent, "rows": selectors.model_results(agent=agent)})


def score_badge(request: HttpRequest, owner: str, name: str, fmt: str) -> HttpResponse:
    """The leader's (or `?agent=`'s) mean reward with its 95% interval, as SVG or shields.io endpoint JSON."""
    env = selectors.environment_get(owner=owner, name=name)
    agent = request.GET.get("agent") or None
    best = selectors.evaluation_best(environment=env, agent=agent[:200] if agent else None) if env else None
    score = badges.Score(agent=best.agent, mean=best.mean, ci_low=best.ci_low, ci_high=best.ci_high) if best else None
    shown = badges.score_badge(score, label=badges.custom_label(request.GET.get("label")))
    style = badges.style_or_default(request.GET.get("style"))
    body = (badges.badge_svg(shown, style=style) if fmt == "svg"
            else json.dumps(badges.badge_endpoint(shown, style=style))).encode()
    return HttpResponse(body, content_type=BADGE_CONTENT_TYPES[fmt], headers={"Cache-Control": BADGE_CACHE_CONTROL})


def _badge_blocks(env: Environment) -> list[dict]:
    """Each badge of the environment as the page shows it: a preview, its words (the preview's alt text) and
    the Markdown and HTML that embed it, with absolute URLs to the badge and back to this page."""
    manifest = env.head.manifest if env.head and isinstance(env.head.manifest, dict) else {}
    subject = badges.Subject(outcome=env.verdict_outcome, sleeping=env.runtime_stage in selectors.SLEEPING_STAGES,
                             version=manifest.get("version"), sha=env.head.sha if env.head else "",
                             yanked=getattr(env, "head_yank_reason", None) is not None,
                             deprecated=env.deprecated_at is not None)
    ids = {"owner": env.owner, "name": env.name}
    page = settings.SITE_URL + reverse("registry:environment", kwargs=ids)
    blocks = []
    for kind, badge in badges.BADGES.items():
        image = reverse(f"registry:badge-{kind}-svg", kwargs=ids)
        blocks.append({
            "kind": kind, "image": image, "alt": badge(subject).title,
            "json": settings.SITE_URL + reverse(f"registry:badge-{kind}-json", kwargs=ids),
            "embeds": badges.badge_embeds(image_url=settings.SITE_URL + image, link_url=page,
                                          alt=f"{kind} of {env.repo_id} on OpenEnv Hub", title=kind),
        })
    return blocks


BADGE_CACHE_CONTROL = "public, max-age=300"
BADGE_CONTENT_TYPES = {"svg": "image/svg+xml; charset=utf-8", "json": "application/json"}


@require_safe
def badge(request: HttpRequest, owner: str, name: str, kind: str, fmt: str) -> HttpResponse:
    """A status badge (`kind`: conformance or version) as SVG or shields.io endpoint JSON (`fmt`), for READMEs:
    `?revision=`, `?style=`, `?label=`.

    Always 200 with a badge (grey "unknown" for no such environment or revision), never a broken image, except
    for an environment's old id after it moved on the Hub: a 301 to the badge under its new id. One
    query (the old id's included), two with `?revision=`, none while the process remembers the answer. It reads no session, user or CSRF token, so the answer sets no cookie and
    does not vary by one: any cache may keep it for everyone (ETag, 304 on If-None-Match). Any page's script
    (shields.io's endpoint badge among them) may read it: ReadOnlyCorsMiddleware shares /badges/ as it shares
    the API.
    """
    subject = selectors.environment_badge_subject(owner=owner, name=name, revision=request.GET.get("revision", ""))
    if isinstance(subject, selectors.BadgeMoved):  # READMEs that show the old id's badge keep working
        return moved_redirect(request, subject, f"registry:badge-{kind}-{fmt}", {"owner": owner, "name": name})
    style = badges.style_or_default(request.GET.get("style"))
    shown = badges.BADGES[kind](subject, label=badges.custom_label(request.GET.get("label")))
    headers = {"Cache-Control": BADGE_CACHE_CONTROL}
    if fmt == "svg":
        body = badges.badge_svg(shown, style=style).encode()
    else:
        body = json.dumps(badges.badge_endpoint(shown, style=style)).encode()
    headers["ETag"] = quote_etag(hashlib.sha256(body).hexdigest()[:32])
    asked = parse_etags(request.headers.get("If-None-Match", ""))
    if "*" in asked or headers["ETag"] in (tag.removeprefix("W/") for tag in asked):
        return HttpResponseNotModified(headers=headers)
    return HttpResponse(body, content_type=BADGE_CONTENT_TYPES[fmt], headers=headers)


@follows_moves
def validation_report(request: HttpRequest, owner: str, name: str, run_id: int) -> HttpResponse:
    """Every check of one validation run: status, evidence, remediation, measurements."""
    env = environment_or_404(owner, name)
    run = selectors.validation_run_get(environment=env, run_id=run_id)
    if run is None:
        raise Http404(f"No validation run {run_id} of {env.repo_id}.")
    results = (run.report or {}).get("results", [])
    return render(request, "registry/validation_report.html", {"env": env, "run": run, "results": results})


@login_required
@require_POST
@follows_moves
def validation_request(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    """Staff and owners ask for a fresh validation of the head revision (which may wake a sleeping Space);
    owners wait HUB_RERUN_COOLDOWN_S after the revision's last run, and only staff choose the runner."""
    env = environment_or_404(owner, name)
    if not identity.may_act(request.user, env):
        raise PermissionDenied(f"Only the owners of {env.repo_id} on the Hub and the hub's staff may do this.")
    if env.head is None:
        messages.error(request, "There is no indexed revision to validate.")
        return redirect("registry:environment", owner=env.owner, name=env.name)
    runner = (request.POST.get("runner") or None) if request.user.is_staff else None
    if runner not in (None, *ValidationRun.Runner.values):
        raise Http404("unknown runner")
    try:
        run, created = validation.validation_run_request(
            revision=env.head, trigger=ValidationRun.Trigger.REQUEST, runner=runner, wake=True,
            requested_by=request.user, cooldown_s=0 if request.user.is_staff else settings.HUB_RERUN_COOLDOWN_S)
    except validation.RerunTooSoon as exc:
        messages.error(request, f"This revision was validated moments ago; ask again in {exc.wait_s:.0f} s.")
        return redirect("registry:environment", owner=env.owner, name=env.name)
    if created:
        owner_action_record(environment=env, kind=OwnerAction.Kind.REVALIDATE, actor=identity.actor(request.user),
                            via=OwnerAction.Via.WEB, revision=env.head, run=run.pk)
    messages.info(request, f"Validation #{run.pk} {'queued' if created else 'is already ' + run.state}.")
    return redirect("registry:environment", owner=env.owner, name=env.name)


def _webhook_answer(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(envelope(code, message), status=status)


@csrf_exempt
@never_cache
def hub_webhook(request: HttpRequest) -> HttpResponse:
    """POST /webhooks/huggingface/: a delivery from a Hugging Face Hub webhook (services.webhooks).

    The shared secret arrives verbatim in X-Webhook-Secret and is compared in constant time: 401 without it,
    403 when wrong, 503 for everything while HUB_WEBHOOK_SECRET is unset. A body over HUB_WEBHOOK_MAX_BYTES
    is 413 (never read past the cap), one that is not JSON 400, JSON that is no delivery 422. An accepted
    delivery is recorded and its job queued (202), or recorded as ignored or a duplicate (200); the Hub is never
    called while the request waits. Every answer is JSON; errors are {"error": {"code", "message"}}.
    """
    received_at = timezone.now()
    if request.method != "POST":
        response = _webhook_answer(405, "method_not_allowed", "Webhook deliveries are POSTed.")
        response["Allow"] = "POST"
        return response

    def refuse(status: int, code: str, message: str) -> JsonResponse:
        webhooks.webhook_refuse(http_status=status, code=code, message=message, received_at=received_at)
        return _webhook_answer(status, code, message)

    secret = settings.HUB_WEBHOOK_SECRET
    if not secret:
        return refuse(503, "not_configured", "Hub webhooks are not enabled on this hub: its operator has not set "
                                             "HUB_WEBHOOK_SECRET, so every delivery is refused.")
    given = request.headers.get("X-Webhook-Secret", "")
    if not given:
        return refuse(401, "not_authenticated", "No X-Webhook-Secret header: give the webhook on huggingface.co "
                                                "this hub's secret.")
    if not hmac.compare_digest(given.encode(), secret.encode()):
        return refuse(403, "permission_denied", "X-Webhook-Secret does not match this hub's secret.")
    cap = settings.HUB_WEBHOOK_MAX_BYTES
    too_large = f"The body is larger than {cap:,} bytes; a Hub delivery is far smaller."
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > cap:
        return refuse(413, "too_large", too_large)
    body = request.read(cap + 1)
    if len(body) > cap:
        return refuse(413, "too_large", too_large)
    receipt = webhooks.webhook_receive(body=body, received_at=received_at)
    row = receipt.delivery
    if receipt.code:
        return _webhook_answer(receipt.http_status, receipt.code, receipt.message)
    answer = {"status": row.status, "delivery": row.pk}
    if receipt.duplicate_of is not None:
        answer["duplicate_of"] = receipt.duplicate_of.pk
    if row.status == WebhookDelivery.Status.IGNORED:
        answer["reason"] = receipt.message
    return JsonResponse(answer, status=receipt.http_status)


def not_found(request: HttpRequest, exception=None) -> HttpResponse:
    """404 in the site's layout, with a search box and, where the path names an environment, close names."""
    parts = [p for p in request.path.split("/") if p]
    guess = parts[2] if len(parts) >= 3 and parts[0] == "environments" else (parts[-1] if parts else "")
    suggestions = selectors.environment_suggestions(q=guess[:100]) if guess else []
    return render(request, "404.html", {"suggestions": suggestions, "guess": guess[:100]}, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    """500 in the site's layout; touches no database (it may be what failed)."""
    return render(request, "500.html", status=500)


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
