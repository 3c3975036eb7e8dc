"""Rate limits per client: anonymous clients by address, accounts by name, counted in the cache (Redis in
production). Every API response says where the client stands (RateLimit-Limit, -Remaining, -Reset, as in the
IETF RateLimit header fields draft); a client over its limit gets 429 with Retry-After."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

WINDOW_S = 60


class ClientRateThrottle(BaseThrottle):
    """A limit per client and minute, in fixed windows (as GitHub's API counts per hour): one counter per client
    and window, added and incremented atomically in the cache (Redis INCR), so a request costs the same whatever
    the limit. (DRF's SimpleRateThrottle keeps the time of every request in the window and rewrites that list on
    each request: at 1,200 a minute, a 10 kB value read and written every time.)"""

    def client(self, request) -> tuple[str, int]:
        """The client's counter key and limit: an account by name once authentication ran, else the address."""
        user = getattr(request, "_user", None)  # only if authentication already ran: never force a whoami here
        name = getattr(user, "name", None) or getattr(user, "username", None) if user else None
        if user is not None and getattr(user, "is_authenticated", False) and name:
            return f"account:{name}", settings.HUB_API_RATE_ACCOUNT
        return f"address:{self.get_ident(request)}", settings.HUB_API_RATE_ANONYMOUS

    def allow_request(self, request, view) -> bool:
        who, limit = self.client(request)
        now = time.time()
        key = f"throttle:{who}:{int(now // WINDOW_S)}"
        cache.add(key, 0, WINDOW_S + 5)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between the two calls
            cache.add(key, 1, WINDOW_S + 5)
            count = 1
        self.reset = max(1, int(WINDOW_S - now % WINDOW_S))
        request.rate_limit = (limit, max(0, limit - count), self.reset)
        return count <= limit

    def wait(self) -> int:
        return self.reset


def rate_limit_headers(request, response) -> None:
    """The RateLimit-* headers of the client's standing, when a throttle measured it."""
    standing = getattr(request, "rate_limit", None)
    if standing:
        limit, remaining, reset = standing
        response["RateLimit-Limit"] = str(limit)
        response["RateLimit-Remaining"] = str(remaining)
        response["RateLimit-Reset"] = str(reset)
