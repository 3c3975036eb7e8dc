"""Redirects from an id an environment moved away from on the Hub (an EnvironmentAlias) to its new id: one rule
for the pages, the badges and the API."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from registry.models import Environment

# A name an environment moved away from may be taken again by a new Space: clients may remember the move, not forever.
MOVED_CACHE_CONTROL = "public, max-age=3600"


class EnvironmentMoved(Exception):
    """The id names no environment, but one moved away from it: answer with a redirect to its new id."""

    def __init__(self, environment: Environment):
        super().__init__(environment.repo_id)
        self.environment = environment


def moved_redirect(request: HttpRequest, environment: Environment | Any, view_name: str, kwargs: dict) -> HttpResponse:
    """A permanent redirect to the same route under the environment's new id (anything with its `owner` and
    `name`), query kept: 301 for reads, 308 for writes (which a 301 would turn into a GET)."""
    url = reverse(view_name, kwargs={**kwargs, "owner": environment.owner, "name": environment.name})
    if request.META.get("QUERY_STRING"):
        url += f"?{request.META['QUERY_STRING']}"
    response = redirect(url, permanent=True)
    if request.method not in ("GET", "HEAD"):
        response.status_code = 308
    response["Cache-Control"] = MOVED_CACHE_CONTROL
    return response
