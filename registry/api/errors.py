"""One error shape for the whole API: {"error": {"code", "message", "detail"?}}, for every 4xx and 5xx.

Codes (stable; clients branch on them): `invalid` (a parameter or a body field: `detail` names each and what
it accepts), `parse_error`, `authentication_failed`, `not_authenticated`, `permission_denied`, `not_found`,
`method_not_allowed`, `not_acceptable`, `unsupported_media_type`, `throttled` (with Retry-After),
`hub_unavailable` (503: the Hugging Face Hub could not confirm a token), `server_error` (500).
"""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.views import exception_handler as drf_exception_handler

ERROR_CODES = ("invalid", "parse_error", "authentication_failed", "not_authenticated", "permission_denied",
               "not_found", "method_not_allowed", "not_acceptable", "unsupported_media_type", "throttled",
               "hub_unavailable", "server_error")


def envelope(code: str, message: str, detail=None) -> dict:
    body = {"error": {"code": code, "message": message}}
    if detail is not None:
        body["error"]["detail"] = detail
    return body


def exception_handler(exc, context):
    # Django's own 404 and 403 get DRF's codes, as DRF's handler would give them their status.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    code = getattr(exc, "default_code", "error")
    if isinstance(detail, dict) and set(detail) == {"detail"}:
        message, extra = str(detail["detail"]), None
    elif isinstance(detail, dict):
        message, extra = f"Invalid {', '.join(map(str, detail))}: see detail.", detail
    else:
        message, extra = "Invalid request: see detail.", detail
    response.data = envelope(code, message, extra)
    return response


def server_error(request):
    """500 for any path: the API's envelope under /api/, the site's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse(envelope("server_error", "The hub failed to answer this request; it was logged."),
                            status=500)
    from registry.views import server_error as page

    return page(request)


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
@authentication_classes([])
@permission_classes([])
def no_route(request, *args, **kwargs):
    """Any path under /api/v1/ that names no route: a 404 in the API's shape, not Django's HTML page."""
    raise exceptions.NotFound(f"No API route at {request.path}.")


ERROR_SCHEMA = inline_serializer("Error", {"error": inline_serializer("ErrorBody", {
    "code": serializers.ChoiceField(choices=ERROR_CODES),
    "message": serializers.CharField(),
    "detail": serializers.JSONField(required=False),
})})
ERROR_RESPONSES = {status: OpenApiResponse(ERROR_SCHEMA, description=description) for status, description in (
    (400, "A malformed parameter or body (code invalid; detail names each)."),
    (401, "A token that is refused, or an Authorization scheme other than Bearer."),
    (403, "Not allowed for this client."),
    (404, "No such environment, revision or run."),
    (405, "Method not allowed."),
    (429, "Over the rate limit (see Retry-After)."),
    (503, "The Hugging Face Hub could not confirm a token."),
)}
