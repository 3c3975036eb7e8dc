"""The discovery API, /api/v1/. Thin: check the parameters, call a selector, serialize.

Every view here answers in one error envelope, says where the client stands against its rate limit, tells
caches how long an answer stays true (a revision never changes; a list changes often), and is described in the
OpenAPI schema at /api/schema/.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import http_date
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, permissions, status
from rest_framework.exceptions import (
    APIException,
    MethodNotAllowed,
    NotFound,
    PermissionDenied,
    Throttled,
    ValidationError,
)
from rest_framework.response import Response

from registry import identity, selectors
from registry.api import serializers as s
from registry.api.authentication import HubUnavailable, has_token, require_scope
from registry.api.errors import ERROR_RESPONSES
from registry.api.pagination import KeysetPagination
from registry.api.params import EnvironmentListParams
from registry.api.throttling import rate_limit_headers
from registry.models import ID_PART, ApiToken, Environment, Evaluation, EvaluationRun, OwnerAction, Revision, ValidationRun
from registry.moved import EnvironmentMoved, moved_redirect
from registry.evaluation import ingest
from registry.services import evaluation, owner, validation

class Conflict(APIException):
    status_code = 409
    default_code = "conflict"
    default_detail = "The request conflicts with what is stored."


# Revisions shown with an environment's detail; all of them are paged at .../revisions/.
RECENT_REVISIONS = 20
SHORT_CACHE = "public, max-age=30"
LONG_CACHE = "public, max-age=86400, immutable"


class ApiView:
    """What every API view shares. Authentication is lazy (it runs when a view first asks who the client is),
    so an unknown environment is a 404 before any token is looked at."""

    cache_control = SHORT_CACHE

    def initial(self, request, *args, **kwargs):
        # An unsupported method is a 405 before anything else is judged (not a 401 for lack of credentials).
        if not hasattr(self, request.method.lower()) or request.method.lower() not in self.http_method_names:
            raise MethodNotAllowed(request.method)
        super().initial(request, *args, **kwargs)

    def perform_authentication(self, request):
        pass

    def check_throttles(self, request):
        # Reads are anonymous (tokens are ignored): counted by address here. Writes are counted by account once
        # the view knows who asks (see `throttle_account`).
        if request.method in permissions.SAFE_METHODS:
            super().check_throttles(request)

    def throttle_account(self, request):
        super().check_throttles(request)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        rate_limit_headers(request, response)
        if request.method in ("GET", "HEAD") and response.status_code == 200 and "Cache-Control" not in response:
            response["Cache-Control"] = self.cache_control
        elif request.method not in ("GET", "HEAD"):
            response["Cache-Control"] = "no-store"
        return response


class EnvironmentMixin(ApiView):
    """Resolves <owner>/<name> (case-insensitively) or answers 404 in the API's error shape; an id the environment
    moved away from on the Hub redirects every route to the same route under its new id (301, 308 for writes)."""

    def get_environment(self) -> Environment:
        env = selectors.environment_get(owner=self.kwargs["owner"], name=self.kwargs["name"])
        if env is None:
            moved = selectors.environment_moved(owner=self.kwargs["owner"], name=self.kwargs["name"])
            if moved is not None:
                raise EnvironmentMoved(moved)
            raise NotFound(f"No environment {self.kwargs['owner']}/{self.kwargs['name']} in the index.")
        return env

    def handle_exception(self, exc):
        if isinstance(exc, EnvironmentMoved):
            return moved_redirect(self.request, exc.environment, self.request.resolver_match.view_name, self.kwargs)
        return super().handle_exception(exc)

    def canonical_redirect(self, env: Environment, request):
        """301 to the canonical spelling (query kept), or None when the request already uses it."""
        if (env.owner, env.name) == (self.kwargs["owner"], self.kwargs["name"]):
            return None
        kwargs = {**self.kwargs, "owner": env.owner, "name": env.name}
        query = f"?{request.META['QUERY_STRING']}" if request.META.get("QUERY_STRING") else ""
        return redirect(reverse(request.resolver_match.view_name, kwargs=kwargs) + query, permanent=True)


def _strings(pattern: str, description: str = "") -> dict:
    return {"type": "array", "items": {"type": "string", "pattern": pattern}, "description": description}


LIST_PARAMETERS = [
    OpenApiParameter("q", {"type": "string", "maxLength": 200, "pattern": r"^[^\x00]*$"},
                     description=("Full-text search over names, description, tags, MCP tools and README. Relevance: "
                                  "environments whose names answer the whole search first, then description, tags "
                                  "or tools, then README; the most liked first within each.")),
    OpenApiParameter("verdict", str, many=True, enum=list(selectors.VERDICTS), style="form", explode=True),
    OpenApiParameter("tag", _strings(r"^[^\x00-\x1f]{1,100}$"), style="form", explode=True),
    OpenApiParameter("owner", _strings(rf"^{ID_PART}$"), style="form", explode=True),
    OpenApiParameter("mode", str, many=True, enum=list(selectors.MODES), style="form", explode=True),
    OpenApiParameter("mcp", str, enum=["yes", "no"]),
    OpenApiParameter("stage", _strings(r"^[A-Z_]{1,32}$"), style="form", explode=True,
                     description="Hub runtime stage."),
    OpenApiParameter("openenv", _strings(r"^[^\x00-\x1f]{1,200}$"), style="form", explode=True,
                     description="The openenv requirement, as declared."),
    OpenApiParameter("sort", str, enum=list(selectors.SORTS),
                     description="Default: relevance with q, else name. Ignored by the change feed."),
    OpenApiParameter("status", str, enum=["active", "withdrawn", "all"], description="Default: active."),
    OpenApiParameter("source", str, enum=Environment.Source.values),
    OpenApiParameter("updated_since", OpenApiTypes.DATETIME, description=(
        "The change feed: environments whose head, status or verdict changed at or after this RFC 3339 time, "
        "oldest change first. Follow `next` to the end, then ask again from the last `changed_at` you saw.")),
    OpenApiParameter("include_withdrawn", OpenApiTypes.BOOL, description="Withdrawn environments too (tombstones)."),
    OpenApiParameter("cursor", {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,2000}$"},
                     description="From a `next` link, as it is; keep the other parameters."),
    OpenApiParameter("page_size", {"type": "integer", "minimum": 1},
                     description="1 to 200 (larger is served at 200, see X-Page-Size-Clamped)."),
]


class EnvironmentList(ApiView, generics.GenericAPIView):
    """The catalog: search, facets as filters, sorts, and the change feed with tombstones, cursor-paged."""

    serializer_class = s.EnvironmentSerializer
    pagination_class = KeysetPagination

    @extend_schema(operation_id="environments_list", parameters=LIST_PARAMETERS,
                   responses={200: s.EnvironmentSerializer(many=True), **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        params = EnvironmentListParams(data=request.query_params)
        params.is_valid(raise_exception=True)
        query, order = params.query()
        matching = selectors.catalog_filtered(query, order=order)
        since = params.validated_data.get("updated_since")
        if since is not None:
            matching = matching.filter(changed_at__gte=since)
        ids = self.paginator.paginate(matching, request, order=order)
        data = self.get_serializer(selectors.environment_cards(ids), many=True).data
        return self.paginator.get_paginated_response(data)


class EnvironmentDetail(EnvironmentMixin, generics.GenericAPIView):
    """One environment (any case; redirects to the canonical spelling)."""

    serializer_class = s.EnvironmentDetailSerializer

    @extend_schema(operation_id="environments_retrieve", responses={
        200: s.EnvironmentDetailSerializer, 301: OpenApiResponse(description="The canonical spelling."),
        **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        env = self.get_environment()
        moved = self.canonical_redirect(env, request)
        if moved:
            return moved
        revisions = selectors.revision_list(environment=env)
        env.recent_revisions = list(revisions[:RECENT_REVISIONS])
        env.revision_count = revisions.count()
        env.validation_count = selectors.validation_run_list(environment=env).count()
        verdict = selectors.environment_verdict(environment=env)
        observed = selectors.validation_run_observed(run_id=verdict.pk) if verdict else None
        env.observed_schemas = (observed or {}).get("schemas")
        selectors.environment_good_run(env)
        response = Response(self.get_serializer(env).data)
        response["Last-Modified"] = http_date(env.changed_at.timestamp())
        return response


class RevisionList(EnvironmentMixin, generics.ListAPIView):
    """Every revision of an environment, newest first."""

    serializer_class = s.RevisionSerializer

    def get_queryset(self):
        return selectors.revision_list(environment=self.get_environment())

    @extend_schema(operation_id="revisions_list", responses={200: s.RevisionSerializer(many=True), **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class RevisionDetail(EnvironmentMixin, generics.GenericAPIView):
    """One revision by its full sha or a unique prefix (at least 4 hex characters)."""

    serializer_class = s.RevisionDetailSerializer

    @extend_schema(operation_id="revisions_retrieve", responses={200: s.RevisionDetailSerializer, **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        env = self.get_environment()
        ref = self.kwargs["sha"]
        try:
            revision = selectors.revision_resolve(environment=env, ref=ref,
                                                  revisions=selectors.with_yank(Revision.objects.defer("files")))
        except selectors.AmbiguousRevision:
            raise ValidationError({"sha": [f"{ref!r} starts more than one revision of {env.repo_id}: give more of it"]})
        if revision is None:
            raise NotFound(f"No revision of {env.repo_id} matches {ref!r}.")
        latest = selectors.revision_run_latest(revision=revision)
        revision.latest_outcome = latest.outcome if latest else None
        response = Response(self.get_serializer(revision).data)
        # A revision never changes, but its latest verdict may, and a prefix may stop being unique.
        response["Cache-Control"] = "public, max-age=300"
        return response


class OwnersAct(permissions.BasePermission):
    """Anyone reads; staff, and the environment's owners on the Hub, act on it (by token or signed in)."""

    message = ("Only staff and the environment's owners may do this: the Hub account that owns it, or a member "
               "with write access of the organization that does, by a personal token of this hub (publish scope), "
               "a Hugging Face token, or signed in.")

    def has_permission(self, request, view):
        return request.method in permissions.SAFE_METHODS or bool(request.user and request.user.is_authenticated)

    def has_object_permission(self, request, view, obj):
        return request.method in permissions.SAFE_METHODS or identity.may_act(request.user, obj)


class OwnerActionMixin(EnvironmentMixin):
    """Writes on an environment by its owners: an unknown environment is a 404 before any token is looked at, a
    token on an environment no Hub account owns is a 403 at once, a personal token needs the publish scope."""

    permission_classes = [OwnersAct]

    def check_permissions(self, request):
        if request.method in permissions.SAFE_METHODS:
            super().check_permissions(request)
        # Writes decide once they know the environment (see authorize).

    def authorize(self, request, env: Environment) -> None:
        if env.source != Environment.Source.HUGGINGFACE and has_token(request, scheme="bearer"):
            # No Hub account owns a local folder or an imported entry: refuse without asking the Hub.
            raise PermissionDenied(f"{env.repo_id} does not come from the Hugging Face Hub, so no Hub account owns "
                                   "it: only the hub's staff can act on it.")
        super().check_permissions(request)
        self.throttle_account(request)
        require_scope(request, "publish")
        self.check_object_permissions(request, env)

    @property
    def actor(self) -> str:
        return identity.actor(self.request.user)


def _reason_of(request) -> str:
    reason = request.data.get("reason", "") if isinstance(request.data, dict) else ""
    if not isinstance(reason, str):
        raise ValidationError({"reason": ["must be a string"]})
    return reason


class ValidationRunList(OwnerActionMixin, generics.ListAPIView):
    """GET: the environment's validation runs, newest first. POST (staff, owner): request a run of the head revision.

    Owners wait HUB_RERUN_COOLDOWN_S after the revision's last finished run (429 with Retry-After); staff don't.
    """

    serializer_class = s.ValidationRunSerializer

    def get_queryset(self):
        return selectors.validation_run_list(environment=self.get_environment())

    @extend_schema(operation_id="validations_list", responses={200: s.ValidationRunSerializer(many=True),
                                                               **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(operation_id="validations_create", request=s.ValidationRequestSerializer, responses={
        202: s.ValidationRunSerializer, 200: s.ValidationRunSerializer, **ERROR_RESPONSES})
    def post(self, request, *args, **kwargs):
        env = self.get_environment()
        self.authorize(request, env)
        if env.head is None:
            raise ValidationError({"revision": ["this environment has no indexed revision to validate"]})
        params = s.ValidationRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        if params.validated_data.get("runner") and not request.user.is_staff:
            raise PermissionDenied("Only staff choose the runner; owners get the hub's default for the environment.")
        try:
            run, created = validation.validation_run_request(
                revision=env.head, trigger=ValidationRun.Trigger.REQUEST, runner=params.validated_data.get("runner"),
                wake=params.validated_data["wake"], requested_by=request.user,
                cooldown_s=0 if request.user.is_staff else settings.HUB_RERUN_COOLDOWN_S,
            )
        except validation.RerunTooSoon as exc:
            raise Throttled(wait=exc.wait_s, detail="This revision was validated moments ago.") from None
        if created:
            owner.owner_action_record(environment=env, kind=OwnerAction.Kind.REVALIDATE, actor=self.actor,
                                      via=OwnerAction.Via.API, revision=env.head, run=run.pk)
        return Response(s.ValidationRunSerializer(run).data,
                        status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK)


class ValidationRunDetail(EnvironmentMixin, generics.RetrieveAPIView):
    """One run with its full report."""

    serializer_class = s.ValidationRunDetailSerializer

    def get_object(self):
        run = selectors.validation_run_get(environment=self.get_environment(), run_id=self.kwargs["run_id"])
        if run is None:
            raise NotFound(f"No validation run {self.kwargs['run_id']} for this environment.")
        if run.state in (ValidationRun.State.FINISHED, ValidationRun.State.CANCELLED):
            self.cache_control = LONG_CACHE  # a run that is over never changes again
        return run

    @extend_schema(operation_id="validations_retrieve", responses={200: s.ValidationRunDetailSerializer,
                                                                   **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class ValidationRunLatest(EnvironmentMixin, generics.RetrieveAPIView):
    """The run behind the verdict, with its report."""

    serializer_class = s.ValidationRunDetailSerializer

    def get_object(self):
        run = selectors.environment_verdict(environment=self.get_environment())
        if run is None:
            raise NotFound("This environment has no finished validation yet.")
        return run

    @extend_schema(operation_id="validations_latest", responses={200: s.ValidationRunDetailSerializer,
                                                                 **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class TagList(ApiView, generics.ListAPIView):
    """Tags of active environments with how many carry each, most used first."""

    serializer_class = s.TagCountSerializer

    def get_queryset(self):
        return selectors.tag_counts()

    @extend_schema(operation_id="tags_list", responses={200: s.TagCountSerializer(many=True), **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class OwnerList(ApiView, generics.ListAPIView):
    """Owners of active environments with how many environments each has, most first."""

    serializer_class = s.OwnerCountSerializer

    def get_queryset(self):
        return selectors.owner_counts()

    @extend_schema(operation_id="owners_list", responses={200: s.OwnerCountSerializer(many=True), **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class EnvironmentRefresh(OwnerActionMixin, generics.GenericAPIView):
    """POST (staff, owners): read the Space from the Hub now, as `openenv-hub push` does after a push. Works for a
    Space the hub has not indexed yet (its owners may ask); at most once per HUB_REFRESH_COOLDOWN_S a Space."""

    serializer_class = s.RefreshAcceptedSerializer

    @extend_schema(operation_id="environments_refresh", request=None,
                   responses={202: s.RefreshAcceptedSerializer, **ERROR_RESPONSES})
    def post(self, request, *args, **kwargs):
        env = selectors.environment_get(owner=self.kwargs["owner"], name=self.kwargs["name"])
        if env is not None:
            self.authorize(request, env)
            repo_id = env.repo_id
        else:  # not indexed yet: its future owners are whoever may act in its namespace on the Hub
            super().check_permissions(request)
            self.throttle_account(request)
            require_scope(request, "publish")
            if not identity.may_act_in(request.user, self.kwargs["owner"]):
                raise PermissionDenied(OwnersAct.message)
            repo_id = f"{self.kwargs['owner']}/{self.kwargs['name']}"
        if env is not None and env.source != Environment.Source.HUGGINGFACE:
            raise ValidationError({"environment": [f"{repo_id} does not come from the Hub: nothing to refresh"]})
        try:
            owner.space_refresh_request(repo_id=repo_id, environment=env, actor=self.actor, via=OwnerAction.Via.API)
        except owner.RefreshTooSoon as exc:
            raise Throttled(wait=exc.wait_s, detail="This Space was refreshed moments ago.") from None
        return Response({"environment": repo_id, "status": "queued"}, status=status.HTTP_202_ACCEPTED)


class RevisionYankView(OwnerActionMixin, generics.GenericAPIView):
    """POST {"reason"} (staff, owners): yank a revision (by sha or unique prefix); DELETE: restore it. A yanked
    revision stays listed and pullable by its sha, is never the last known good, and is marked everywhere."""

    serializer_class = s.RevisionSerializer

    def _revision(self, env):
        ref = self.kwargs["sha"]
        try:
            revision = selectors.revision_resolve(environment=env, ref=ref, revisions=s.revision_rows())
        except selectors.AmbiguousRevision:
            raise ValidationError({"sha": [f"{ref!r} starts more than one revision of {env.repo_id}: give more of it"]})
        if revision is None:
            raise NotFound(f"No revision of {env.repo_id} matches {ref!r}.")
        revision.environment = env
        return revision

    def _answer(self, revision):
        return Response(s.RevisionSerializer(s.revision_rows().get(pk=revision.pk)).data)

    @extend_schema(operation_id="revisions_yank", request=s.YankRequestSerializer,
                   responses={200: s.RevisionSerializer, **ERROR_RESPONSES})
    def post(self, request, *args, **kwargs):
        env = self.get_environment()
        self.authorize(request, env)
        revision = self._revision(env)
        try:
            owner.revision_yank(revision=revision, reason=_reason_of(request), actor=self.actor, via=OwnerAction.Via.API)
        except owner.ActionRefused as exc:
            raise ValidationError({"reason": [str(exc)]}) from None
        return self._answer(revision)

    @extend_schema(operation_id="revisions_unyank", request=None,
                   responses={200: s.RevisionSerializer, **ERROR_RESPONSES})
    def delete(self, request, *args, **kwargs):
        env = self.get_environment()
        self.authorize(request, env)
        revision = self._revision(env)
        owner.revision_unyank(revision=revision, actor=self.actor, via=OwnerAction.Via.API)
        return self._answer(revision)


class EnvironmentDeprecation(OwnerActionMixin, generics.GenericAPIView):
    """POST {"reason", "successor"?: "owner/name"} (staff, owners): deprecate the environment (again, to change
    the reason or successor); DELETE: lift it."""

    serializer_class = s.DeprecationRequestSerializer

    @extend_schema(operation_id="environments_deprecate", request=s.DeprecationRequestSerializer,
                   responses={200: s.DeprecationSerializer, **ERROR_RESPONSES})
    def post(self, request, *args, **kwargs):
        env = self.get_environment()
        self.authorize(request, env)
        params = s.DeprecationRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        successor = None
        if params.validated_data.get("successor"):
            successor_owner, _, successor_name = params.validated_data["successor"].partition("/")
            successor = selectors.environment_get(owner=successor_owner, name=successor_name)
            if successor is None:
                raise ValidationError({"successor": [f"no environment {params.validated_data['successor']} here"]})
        try:
            owner.environment_deprecate(environment=env, reason=params.validated_data["reason"], successor=successor,
                                        actor=self.actor, via=OwnerAction.Via.API)
        except owner.ActionRefused as exc:
            raise ValidationError({"deprecation": [str(exc)]}) from None
        return Response({"deprecated": s.deprecation_data(selectors.environment_get(owner=env.owner, name=env.name))})

    @extend_schema(operation_id="environments_undeprecate", request=None,
                   responses={200: s.DeprecationSerializer, **ERROR_RESPONSES})
    def delete(self, request, *args, **kwargs):
        env = self.get_environment()
        self.authorize(request, env)
        owner.environment_undeprecate(environment=env, actor=self.actor, via=OwnerAction.Via.API)
        return Response({"deprecated": s.deprecation_data(selectors.environment_get(owner=env.owner, name=env.name))})


class EnvironmentHistory(EnvironmentMixin, generics.ListAPIView):
    """What owners, staff and the Hub's webhooks did to the environment (who, what, when, why), newest first."""

    serializer_class = s.OwnerActionSerializer

    def get_queryset(self):
        return selectors.environment_history(environment=self.get_environment())

    @extend_schema(operation_id="environments_history", responses={200: s.OwnerActionSerializer(many=True),
                                                                    **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


# --- evaluations -------------------------------------------------------------------------------------------


EVALUATION_FILTERS = [
    OpenApiParameter("provenance", str, enum=Evaluation.Provenance.values),
    OpenApiParameter("revision", {"type": "string", "pattern": "^[0-9a-fA-F]{4,64}$"},
                     description="Only results measured on this revision (a sha or its prefix)."),
    OpenApiParameter("agent", {"type": "string", "maxLength": 200}),
    OpenApiParameter("include_stale", OpenApiTypes.BOOL,
                     description="Stale results too (measured on a revision whose schemas or verdict head no "
                                 "longer has); hidden by default, never deleted."),
]


def _evaluation_filters(request) -> dict:
    params = request.query_params
    provenance = params.get("provenance") or None
    if provenance and provenance not in Evaluation.Provenance.values:
        raise ValidationError({"provenance": [f"one of {', '.join(Evaluation.Provenance.values)}"]})
    revision = params.get("revision") or None
    if revision and not re.fullmatch(r"[0-9a-fA-F]{4,64}", revision):
        raise ValidationError({"revision": ["a sha or a prefix of 4 to 64 hexadecimal characters"]})
    agent = params.get("agent") or None
    if agent and len(agent) > 200:
        raise ValidationError({"agent": ["at most 200 characters"]})
    stale = params.get("include_stale", "false").lower()
    if stale not in ("true", "false", "1", "0", "yes", "no"):
        raise ValidationError({"include_stale": ["true or false"]})
    return {"provenance": provenance, "revision": revision, "agent": agent,
            "include_stale": stale in ("true", "1", "yes")}


class EvaluationSubmitters(permissions.BasePermission):
    """Anyone reads. Results are submitted with a personal token of the evaluate scope (any account: a community
    result, marked self-reported with its submitter), or by the environment's owners with their Hugging Face token."""

    message = ("Submitting results needs a personal token of this hub with the 'evaluate' scope, or the "
               "environment's owner's Hugging Face token.")

    def has_permission(self, request, view):
        return request.method in permissions.SAFE_METHODS or bool(request.user and request.user.is_authenticated)


class EvaluationList(EnvironmentMixin, generics.GenericAPIView):
    """GET: the environment's results, best mean first (stale ones hidden unless asked).
    POST: a self-reported result, in OpenEnv's EvalResult shape plus per-episode rewards (see the README)."""

    serializer_class = s.EvaluationSerializer
    permission_classes = [EvaluationSubmitters]

    def check_permissions(self, request):
        if request.method in permissions.SAFE_METHODS:
            super().check_permissions(request)

    @extend_schema(operation_id="evaluations_list", parameters=EVALUATION_FILTERS,
                   responses={200: s.EvaluationSerializer(many=True), **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        env = self.get_environment()
        board = selectors.evaluations(environment=env, **_evaluation_filters(request))
        response = Response(s.EvaluationSerializer(board.rows, many=True).data)
        response["X-Hidden-Stale"] = str(board.hidden_stale)
        return response

    @extend_schema(operation_id="evaluations_create", request=OpenApiTypes.OBJECT, responses={
        201: s.EvaluationDetailSerializer, 200: s.EvaluationDetailSerializer, **ERROR_RESPONSES})
    def post(self, request, *args, **kwargs):
        env = self.get_environment()
        super().check_permissions(request)
        self.throttle_account(request)
        if isinstance(request.auth, ApiToken):
            require_scope(request, "evaluate")
        elif not identity.may_act(request.user, env):
            raise PermissionDenied(EvaluationSubmitters.message)
        if not isinstance(request.data, dict):
            raise ValidationError({"body": ["a JSON object"]})
        try:
            submission = ingest.read_submission(request.data, max_episodes=settings.HUB_EVAL_MAX_EPISODES)
        except ingest.IngestError as exc:
            raise ValidationError({"submission": [str(exc)]}) from None
        try:
            revision = selectors.revision_resolve(environment=env, ref=submission.revision)
        except selectors.AmbiguousRevision:
            revision = None
        if revision is None:
            raise ValidationError({"revision": [f"no single revision {submission.revision!r} of {env.repo_id} (a "
                                                "full sha or a unique prefix of an indexed revision)"]})
        source = {"harness_name": submission.harness_name, "dataset": submission.dataset,
                  "library_versions": submission.library_versions, "eval_parameters": submission.eval_parameters,
                  "scores": submission.scores}
        try:
            row, created = evaluation.evaluation_record(
                revision=revision, provenance=Evaluation.Provenance.SELF_REPORTED, played=submission.played(),
                submitted_by=identity.actor(request.user), source=source,
                idempotency_key=submission.idempotency_key)
        except evaluation.EvaluationRefused as exc:
            if exc.status == 409:
                raise Conflict(str(exc)) from None
            raise ValidationError({"submission": [str(exc)]}) from None
        row = selectors.evaluation_get(environment=env, evaluation_id=row.pk)  # with its staleness
        return Response(s.EvaluationDetailSerializer(row).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class EvaluationDetail(EnvironmentMixin, generics.RetrieveAPIView):
    """One result with its episodes."""

    serializer_class = s.EvaluationDetailSerializer

    def get_object(self):
        row = selectors.evaluation_get(environment=self.get_environment(), evaluation_id=self.kwargs["evaluation_id"])
        if row is None:
            raise NotFound(f"No evaluation {self.kwargs['evaluation_id']} for this environment.")
        return row

    @extend_schema(operation_id="evaluations_retrieve", responses={200: s.EvaluationDetailSerializer,
                                                                   **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class LeaderboardView(EnvironmentMixin, generics.GenericAPIView):
    """The leaderboard: ranked rows with their intervals, rows tied with the leader marked."""

    serializer_class = s.LeaderboardSerializer

    @extend_schema(operation_id="leaderboard", parameters=EVALUATION_FILTERS,
                   responses={200: s.LeaderboardSerializer, **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        env = self.get_environment()
        board = selectors.evaluations(environment=env, **_evaluation_filters(request))
        return Response(s.LeaderboardSerializer({
            "environment": env.repo_id, "head": env.head.sha if env.head else None, "rows": board.rows,
            "hidden_stale": board.hidden_stale}).data)


class EvaluationImport(OwnerActionMixin, generics.GenericAPIView):
    """POST (staff, owners): import an `openenv collect` dataset from the Hub, pinned to its revision."""

    serializer_class = s.EvaluationImportSerializer

    @extend_schema(operation_id="evaluations_import", request=s.EvaluationImportSerializer,
                   responses={201: s.EvaluationDetailSerializer, 200: s.EvaluationDetailSerializer, **ERROR_RESPONSES})
    def post(self, request, *args, **kwargs):
        env = self.get_environment()
        self.authorize(request, env)
        params = s.EvaluationImportSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        try:
            row, created = evaluation.evaluation_import(
                environment=env, dataset=data["dataset"], dataset_revision=data.get("dataset_revision") or None,
                revision=data.get("revision") or None, mapping=data.get("environment") or None,
                submitted_by=self.actor)
        except evaluation.EvaluationRefused as exc:
            if exc.status == 409:
                raise Conflict(str(exc)) from None
            if exc.status == 503:
                raise HubUnavailable(str(exc)) from None
            raise ValidationError({"dataset": [str(exc)]}) from None
        row = selectors.evaluation_get(environment=env, evaluation_id=row.pk)  # with its staleness
        return Response(s.EvaluationDetailSerializer(row).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class EvaluationRunList(OwnerActionMixin, generics.ListAPIView):
    """GET: the environment's hub-run evaluation jobs. POST (staff, owners): evaluate a model on the head revision
    through the hub's OpenAI-compatible endpoint (HUB_EVAL_OPENAI_BASE_URL); 503 when none is configured."""

    serializer_class = s.EvaluationRunSerializer

    def get_queryset(self):
        return EvaluationRun.objects.filter(environment=self.get_environment()).select_related("revision")[:100]

    @extend_schema(operation_id="evaluation_runs_list", responses={200: s.EvaluationRunSerializer(many=True),
                                                                   **ERROR_RESPONSES})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(operation_id="evaluation_runs_create", request=s.ModelEvaluationRequestSerializer,
                   responses={202: s.EvaluationRunSerializer, 200: s.EvaluationRunSerializer, **ERROR_RESPONSES})
    def post(self, request, *args, **kwargs):
        env = self.get_environment()
        self.authorize(request, env)
        params = s.ModelEvaluationRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        if not settings.HUB_EVAL_OPENAI_BASE_URL:
            raise HubUnavailable("No model endpoint is configured on this hub (HUB_EVAL_OPENAI_BASE_URL).")
        if env.head is None or env.verdict_outcome not in (ValidationRun.Outcome.PASS, ValidationRun.Outcome.WARN) \
                or env.verdict_run is None or env.verdict_run.revision_id != env.head_id:
            raise ValidationError({"revision": ["only a head revision that passed validation is evaluated"]})
        run, created = evaluation.evaluation_run_request(
            revision=env.head, kind=EvaluationRun.Kind.MODEL, subject=params.validated_data["model"],
            params={"episodes": params.validated_data["episodes"], "validation_run": None,
                    "runner": env.verdict_run.runner},
            trigger=ValidationRun.Trigger.REQUEST, requested_by=request.user)
        return Response(s.EvaluationRunSerializer(run).data,
                        status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK)
