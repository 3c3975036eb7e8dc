"""The pages of signed-in people: their account and personal tokens, and what owners do to their environments
(validate, refresh from the Hub, yank a revision, deprecate). Every form posts with a CSRF token; every action
goes through registry.services (owner, accounts) and lands in the environment's history."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from registry import identity, selectors
from registry.models import ApiToken, Environment, OwnerAction, Revision
from registry.pulls import PullForm
from registry.views import environment_or_404, follows_moves
from registry.services import accounts
from registry.services import owner as owner_service

TOKEN_DAY_CHOICES = (7, 30, 90, 365)


@never_cache
@login_required
def account(request: HttpRequest) -> HttpResponse:
    """Who you are here (as the Hub said at sign-in), where you act as an owner, and your tokens."""
    return _account_page(request)


def _account_page(request: HttpRequest, *, new_secret: str = "", new_token: ApiToken | None = None,
                  status: int = 200) -> HttpResponse:
    try:
        hub_account = request.user.hub_account
    except Exception:  # noqa: BLE001 - a local (staff) user has none
        hub_account = None
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at")[:100]
    return render(request, "registry/account.html", {
        "hub_account": hub_account, "namespaces": sorted(identity.owner_namespaces(request.user)),
        "tokens": tokens, "scopes": ApiToken.SCOPES, "day_choices": TOKEN_DAY_CHOICES,
        "new_secret": [PullForm(kind="token", label="Your new token", text=new_secret)] if new_secret else [],
        "new_token": new_token,
    }, status=status)


@never_cache
@login_required
@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    """Create a token and show its secret on this answer only (it is not kept: a reload shows it no more)."""
    try:
        days = int(request.POST.get("days", "30"))
    except ValueError:
        days = 0
    try:
        token, secret = accounts.api_token_create(user=request.user, name=request.POST.get("name", ""),
                                                  scopes=request.POST.getlist("scopes"), days=days)
    except accounts.TokenRefused as exc:
        messages.error(request, str(exc))
        return _account_page(request, status=400)
    return _account_page(request, new_secret=secret, new_token=token, status=201)


@never_cache
@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    if accounts.api_token_revoke(token=token):
        messages.info(request, f"Token {token.name} ({token.prefix}…) revoked: it stops working now.")
    return redirect("registry:account")


def sign_in_failed(request: HttpRequest) -> HttpResponse:
    return render(request, "registry/sign_in_failed.html", status=403)


# --- owners' actions ------------------------------------------------------------------------------------------


def _owned(request: HttpRequest, owner_name: str, name: str) -> Environment:
    env = environment_or_404(owner_name, name)  # a moved environment's old id redirects (follows_moves)
    if not identity.may_act(request.user, env):
        raise PermissionDenied(f"Only the owners of {env.repo_id} on the Hub and the hub's staff may do this.")
    return env


def _back(env: Environment) -> HttpResponse:
    return redirect("registry:environment", owner=env.owner, name=env.name)


def _revision(env: Environment, ref: str) -> Revision | None:
    try:
        return selectors.revision_resolve(environment=env, ref=ref, revisions=Revision.objects.only("pk", "sha",
                                                                                                  "environment_id"))
    except selectors.AmbiguousRevision:
        return None


@login_required
@require_POST
@follows_moves
def revision_yank(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    env = _owned(request, owner, name)
    revision = _revision(env, request.POST.get("revision", ""))
    if revision is None:
        messages.error(request, "No such revision to yank.")
        return _back(env)
    revision.environment = env
    try:
        if request.POST.get("undo"):
            owner_service.revision_unyank(revision=revision, actor=identity.actor(request.user),
                                          via=OwnerAction.Via.WEB)
            messages.info(request, f"Revision {revision.sha[:12]} is no longer yanked.")
        elif owner_service.revision_yank(revision=revision, reason=request.POST.get("reason", ""),
                                         actor=identity.actor(request.user), via=OwnerAction.Via.WEB):
            messages.info(request, f"Revision {revision.sha[:12]} yanked.")
    except owner_service.ActionRefused as exc:
        messages.error(request, str(exc))
    return _back(env)


@login_required
@require_POST
@follows_moves
def deprecation(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    env = _owned(request, owner, name)
    actor = identity.actor(request.user)
    if request.POST.get("undo"):
        owner_service.environment_undeprecate(environment=env, actor=actor, via=OwnerAction.Via.WEB)
        messages.info(request, "The deprecation is lifted.")
        return _back(env)
    successor = None
    named = request.POST.get("successor", "").strip()
    if named:
        s_owner, _, s_name = named.partition("/")
        successor = selectors.environment_get(owner=s_owner, name=s_name) if s_owner and s_name else None
        if successor is None:
            messages.error(request, f"No environment {named} here to name as the successor.")
            return _back(env)
    try:
        owner_service.environment_deprecate(environment=env, reason=request.POST.get("reason", ""),
                                            successor=successor, actor=actor, via=OwnerAction.Via.WEB)
        messages.info(request, "The environment is marked deprecated.")
    except owner_service.ActionRefused as exc:
        messages.error(request, str(exc))
    return _back(env)


@login_required
@require_POST
@follows_moves
def refresh(request: HttpRequest, owner: str, name: str) -> HttpResponse:
    env = _owned(request, owner, name)
    if env.source != Environment.Source.HUGGINGFACE:
        messages.error(request, "This environment does not come from the Hub: there is nothing to refresh.")
        return _back(env)
    try:
        owner_service.space_refresh_request(repo_id=env.repo_id, environment=env, actor=identity.actor(request.user),
                                            via=OwnerAction.Via.WEB)
        messages.info(request, "The hub reads the Space from the Hub now; reload in a few seconds.")
    except owner_service.RefreshTooSoon as exc:
        messages.error(request, f"It was refreshed moments ago; try again in {exc.wait_s:.0f} s.")
    return _back(env)

