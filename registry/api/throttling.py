"""Rate limits per client: anonymous clients by address, accounts by name, counted in the cache (Redis in
production). Every API response says where the client stands (RateLimit-Limit, -Remaining, -Reset, as in the
IETF RateLimit header fields draft); a client over its limit gets 429 with Retry-After."""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class ClientRateThrottle(SimpleRateThrottle):
    """A fixed-window-free sliding limit (DRF's history of request times) per client and minute."""

    scope = "client"

    def get_rate(self) -> str:
        return f"{settings.HUB_API_RATE_ANONYMOUS}/min"

    def get_cache_key(self, request, view) -> str:
        user = getattr(request, "_user", None)  # only if authentication already ran: never force a whoami here
        name = getattr(user, "name", None) or getattr(user, "username", None) if user else None
        if user is not None and getattr(user, "is_authenticated", False) and name:
            self.num_requests, self.duration = settings.HUB_API_RATE_ACCOUNT, 60
            return f"throttle:account:{name}"
        self.num_requests, self.duration = settings.HUB_API_RATE_ANONYMOUS, 60
        return f"throttle:address:{self.get_ident(request)}"

    def allow_request(self, request, view) -> bool:
        allowed = super().allow_request(request, view)
        if self.key is not None:
            remaining = max(0, self.num_requests - len(self.history))  # the history holds this request if allowed
            reset = int(self.duration - (self.now - self.history[-1])) if self.history else int(self.duration)
            request.rate_limit = (self.num_requests, remaining, max(0, reset))
        return allowed


def rate_limit_headers(request, response) -> None:
    """The RateLimit-* headers of the client's standing, when a throttle measured it."""
    standing = getattr(request, "rate_limit", None)
    if standing:
        limit, remaining, reset = standing
        response["RateLimit-Limit"] = str(limit)
        response["RateLimit-Remaining"] = str(remaining)
        response["RateLimit-Reset"] = str(reset)
