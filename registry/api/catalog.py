"""GET /api/v1/catalog.json: the index as an OpenEnv discovery catalog snapshot (see registry.discovery).

The body is exactly what openenv's `write_catalog` would write for it, so a saved copy is a snapshot file; its
ETag is the snapshot's digest, so a client that has it gets 304 until an environment is added, withdrawn, moves
to another revision or gets another verdict.
"""

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django.utils.http import parse_etags
from rest_framework.decorators import api_view, authentication_classes, permission_classes

from registry import discovery, selectors

CACHE_MAX_AGE_S = 300


@api_view(["GET", "HEAD"])
@authentication_classes([])
@permission_classes([])
def catalog_snapshot(request: HttpRequest) -> HttpResponse:
    """The snapshot of every active environment; 304 when If-None-Match names its digest."""
    snapshot = selectors.catalog_snapshot(
        publisher=discovery.publisher_for(configured=settings.HUB_CATALOG_PUBLISHER, site_url=settings.SITE_URL),
        catalog_url=settings.SITE_URL + reverse("api:catalog"), site_url=settings.SITE_URL, hub=settings.HF_ENDPOINT)
    etag = f'"{snapshot["digest"].removeprefix("sha256:")}"'
    wanted = parse_etags(request.headers.get("If-None-Match", ""))
    if etag in wanted or f"W/{etag}" in wanted or "*" in wanted:
        response = HttpResponseNotModified()
    else:
        response = HttpResponse(discovery.snapshot_bytes(snapshot), content_type="application/json")
    response["ETag"] = etag
    patch_cache_control(response, public=True, max_age=CACHE_MAX_AGE_S)
    return response
