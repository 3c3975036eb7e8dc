"""Cross-origin reads: anyone's browser may read the API and the badges; nothing may write across origins."""

from __future__ import annotations

from django.http import HttpResponse

READ_METHODS = ("GET", "HEAD")
_SHARED_PREFIXES = ("/api/", "/badges/")


class ReadOnlyCorsMiddleware:
    """`Access-Control-Allow-Origin: *` on reads of the API and the badges, and a preflight that allows only
    reads. Writes get no CORS header at all, so a page on another origin can never read what a write answered
    (and its preflight for POST is refused)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        shared = request.path.startswith(_SHARED_PREFIXES)
        if shared and request.method == "OPTIONS" and "HTTP_ACCESS_CONTROL_REQUEST_METHOD" in request.META:
            response = HttpResponse(status=204)
            if request.META["HTTP_ACCESS_CONTROL_REQUEST_METHOD"] in READ_METHODS:
                response["Access-Control-Allow-Origin"] = "*"
                response["Access-Control-Allow-Methods"] = "GET, HEAD"
                response["Access-Control-Allow-Headers"] = "If-None-Match, If-Modified-Since, Accept"
                response["Access-Control-Max-Age"] = "86400"
            return response
        response = self.get_response(request)
        if shared and request.method in READ_METHODS:
            response["Access-Control-Allow-Origin"] = "*"
            response["Access-Control-Expose-Headers"] = (
                "ETag, Last-Modified, Link, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After, "
                "X-Page-Size-Clamped")
        return response
