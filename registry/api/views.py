"""The discovery API, /api/v1/. Thin: parse input, call a selector, serialize."""

from django.shortcuts import redirect
from rest_framework import generics
from rest_framework.exceptions import NotFound, ValidationError

from registry import selectors
from registry.api.serializers import EnvironmentDetailSerializer, EnvironmentSerializer
from registry.models import Environment


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


class EnvironmentDetail(generics.RetrieveAPIView):
    """GET /api/v1/environments/<owner>/<name>/ (any case; redirects to the canonical spelling)."""

    serializer_class = EnvironmentDetailSerializer

    def get(self, request, *args, **kwargs):
        env = self.get_object()
        if (env.owner, env.name) != (kwargs["owner"], kwargs["name"]):
            query = f"?{request.META['QUERY_STRING']}" if request.META.get("QUERY_STRING") else ""
            return redirect(f"/api/v1/environments/{env.owner}/{env.name}/{query}", permanent=True)
        return super().get(request, *args, **kwargs)

    def get_object(self):
        env = selectors.environment_get(owner=self.kwargs["owner"], name=self.kwargs["name"])
        if env is None:
            raise NotFound(f"No environment {self.kwargs['owner']}/{self.kwargs['name']} in the index.")
        return env
