"""One error shape for the whole API: {"error": {"code", "message", "detail"?}}."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.views import exception_handler as drf_exception_handler


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
    else:
        message, extra = "Invalid request.", detail
    body = {"error": {"code": code, "message": message}}
    if extra is not None:
        body["error"]["detail"] = extra
    response.data = body
    return response


@api_view(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
@authentication_classes([])
@permission_classes([])
def no_route(request, *args, **kwargs):
    """Any path under /api/v1/ that names no route: a 404 in the API's shape, not Django's HTML page."""
    raise exceptions.NotFound(f"No API route at {request.path}.")
