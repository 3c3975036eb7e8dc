"""Sign in with Hugging Face: OpenID Connect through mozilla-django-oidc, configured in hub/settings.py.

The library runs the protocol (state and nonce, the code exchange with the client secret, the id_token's RS256
signature against the Hub's JWKS, the userinfo call); this module turns the Hub's claims into our account
(registry.services.accounts) and keeps the flow off when the hub has no OAuth app configured. The Hub's access
token lives only in the library's request handling: it is not put in the session or the database.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.shortcuts import render
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationRequestView

from registry.services.accounts import account_claims_problem, account_sign_in

logger = logging.getLogger(__name__)


class HubBackend(OIDCAuthenticationBackend):
    """A Hub account, proven by the OpenID Connect flow, as a Django user (one Account each, by the Hub's `sub`)."""

    def authenticate(self, request, **kwargs):
        if not settings.SIGN_IN_WITH_HUB:
            return None
        return super().authenticate(request, **kwargs)

    def verify_claims(self, claims):
        problem = account_claims_problem(claims)
        if problem:
            logger.warning("sign-in refused: %s", problem)
        return not problem

    def filter_users_by_claims(self, claims):
        return get_user_model().objects.filter(hub_account__hub_id=claims.get("sub"), is_active=True)

    def create_user(self, claims):
        return account_sign_in(claims=claims)

    def update_user(self, user, claims):
        return account_sign_in(claims=claims)


class SignIn(OIDCAuthenticationRequestView):
    """/oidc/authenticate/: off (a page that says so) unless the hub has an OAuth app."""

    def get(self, request):
        if not settings.SIGN_IN_WITH_HUB:
            return render(request, "registry/sign_in_off.html", status=404)
        return super().get(request)
