"""One error shape for the whole API: {"error": {"code", "message", "detail"?}}."""

from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
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
