"""The discovery API, /api/v1/. Thin: parse input, call a selector, serialize."""

from django.conf import settings
from django.shortcuts import redirect
from django.urls import reverse
from rest_framework import generics, permissions, status
from rest_framework.exceptions import NotFound, PermissionDenied, Throttled, ValidationError
from rest_framework.response import Response

from registry import identity, selectors
from registry.api.serializers import (
    EnvironmentDetailSerializer,
    EnvironmentSerializer,
    RevisionSerializer,
    ValidationRequestSerializer,
    ValidationRunDetailSerializer,
    ValidationRunSerializer,
)
from registry.models import Environment, ValidationRun
from registry.services import validation

# Revisions shown with an environment's detail; all of them are paged at .../revisions/.
RECENT_REVISIONS = 20


class EnvironmentMixin:
    """Resolves <owner>/<name> (case-insensitively) or answers 404 in the API's error shape."""

    def get_environment(self) -> Environment:
        env = selectors.environment_get(owner=self.kwargs["owner"], name=self.kwargs["name"])
        if env is None:
            raise NotFound(f"No environment {self.kwargs['owner']}/{self.kwargs['name']} in the index.")
        return env


class EnvironmentList(generics.ListAPIView):
    """GET /api/v1/environments/?q=&status=active|withdrawn|all&source=huggingface|local"""

    serializer_class = EnvironmentSerializer

    def get_queryset(self):
        params = self.request.query_params
        status = params.get("status", Environment.Status.ACTIVE)
        if status not in {*Environment.Status.values, "all"}:
            raise ValidationError({"status": f"must be one of active, withdrawn, all; not {status!r}"})
        source = params.get("source") or None
        if source and source not in Environment.Source.values:
            raise ValidationError({"source": f"must be one of {', '.join(Environment.Source.values)}"})
        return selectors.environment_list(
            status=None if status == "all" else status, search=params.get("q", "").strip()[:200], source=source,
        )


class EnvironmentDetail(EnvironmentMixin, generics.RetrieveAPIView):
    """GET /api/v1/environments/<owner>/<name>/ (any case; redirects to the canonical spelling)."""

    serializer_class = EnvironmentDetailSerializer

    def get(self, request, *args, **kwargs):
        env = self.get_object()
        if (env.owner, env.name) != (kwargs["owner"], kwargs["name"]):
            query = f"?{request.META['QUERY_STRING']}" if request.META.get("QUERY_STRING") else ""
            path = reverse("api:environment-detail", kwargs={"owner": env.owner, "name": env.name})
            return redirect(f"{path}{query}", permanent=True)
        return Response(self.get_serializer(env).data)

    def get_object(self):
        env = self.get_environment()
        revisions = selectors.revision_list(environment=env)
        env.recent_revisions = list(revisions[:RECENT_REVISIONS])
        env.revision_count = revisions.count()
        return env


class RevisionList(EnvironmentMixin, generics.ListAPIView):
    """GET /api/v1/environments/<owner>/<name>/revisions/: every revision, newest first, paged."""

    serializer_class = RevisionSerializer

    def get_queryset(self):
        return selectors.revision_list(environment=self.get_environment())


class MayRequestValidation(permissions.BasePermission):
    """Anyone reads; staff, and the environment's owner on the Hub (by token), request validations."""

    message = ("Only staff and the environment's owner may request a validation: send "
               "'Authorization: Bearer <Hugging Face token>' of the owning account or of a member of the owning "
               "organization.")

    def has_permission(self, request, view):
        return request.method in permissions.SAFE_METHODS or bool(request.user and request.user.is_authenticated)

    def has_object_permission(self, request, view, obj):
        return request.method in permissions.SAFE_METHODS or identity.may_request_validation(request.user, obj)


class ValidationRunList(EnvironmentMixin, generics.ListAPIView):
    """GET: the environment's validation runs, newest first. POST (staff, owner): request a run of the head revision.

    Owners wait HUB_RERUN_COOLDOWN_S after the revision's last finished run (429 with Retry-After); staff don't.
    """

    serializer_class = ValidationRunSerializer
    permission_classes = [MayRequestValidation]

    def get_queryset(self):
        return selectors.validation_run_list(environment=self.get_environment())

    def post(self, request, *args, **kwargs):
        env = self.get_environment()
        self.check_object_permissions(request, env)
        if env.head is None:
            raise ValidationError({"revision": "this environment has no indexed revision to validate"})
        params = ValidationRequestSerializer(data=request.data)
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
        return Response(ValidationRunSerializer(run).data, status=status.HTTP_202_ACCEPTED if created else status.HTTP_200_OK)


class ValidationRunDetail(EnvironmentMixin, generics.RetrieveAPIView):
    """GET /api/v1/environments/<owner>/<name>/validations/<id>/ with the full report."""

    serializer_class = ValidationRunDetailSerializer

    def get_object(self):
        run = selectors.validation_run_get(environment=self.get_environment(), run_id=self.kwargs["run_id"])
        if run is None:
            raise NotFound(f"No validation run {self.kwargs['run_id']} for this environment.")
        return run


class ValidationRunLatest(EnvironmentMixin, generics.RetrieveAPIView):
    """GET /api/v1/environments/<owner>/<name>/validations/latest/: the run behind the verdict, with its report."""

    serializer_class = ValidationRunDetailSerializer

    def get_object(self):
        run = selectors.environment_verdict(environment=self.get_environment())
        if run is None:
            raise NotFound("This environment has no finished validation yet.")
        return run
