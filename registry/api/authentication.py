"""`Authorization: Bearer <token>`: the API's way for Hub accounts to act on what they own. The token is a personal
token of this hub (`oeh_…`, scoped, see registry.services.accounts) or a Hugging Face token (vouched for by the
Hub's whoami)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import status
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import APIException, AuthenticationFailed, PermissionDenied, Throttled
from rest_framework.permissions import SAFE_METHODS

from registry import identity
from registry.hub import HubError, InvalidToken
from registry.services.accounts import api_token_check, looks_like_api_token

MAX_TOKEN_LENGTH = 512


class HubUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "hub_unavailable"
    default_detail = "The Hugging Face Hub could not confirm the token right now; try again shortly."


def _bearer(request) -> str | None:
    """The Bearer token of a write, checked for shape; None when the request carries none (or is a read)."""
    if request.method in SAFE_METHODS:
        return None
    parts = get_authorization_header(request).split()
    if not parts:
        return None
    if parts[0].lower() != b"bearer":
        scheme = parts[0].decode("ascii", "replace")[:20]
        raise AuthenticationFailed(f"This API takes 'Authorization: Bearer <token>' (a personal token of this hub "
                                   f"or a Hugging Face token); {scheme!r} is not a scheme it accepts.")
    if len(parts) != 2:
        raise AuthenticationFailed("Send exactly one token: 'Authorization: Bearer <token>'.")
    try:
        token = parts[1].decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationFailed("The token is not ASCII; tokens are.") from None
    if len(token) > MAX_TOKEN_LENGTH or not token.isprintable():
        raise AuthenticationFailed("That is not a token.")
    return token


class ApiTokenAuthentication(BaseAuthentication):
    """A personal token of this hub (`oeh_…`): its user, and the token as `request.auth` (for its scopes).
    Reads are public and never look at it."""

    def authenticate(self, request):
        token = _bearer(request)
        if token is None or not looks_like_api_token(token):
            return None
        checked = api_token_check(token)
        if checked.token is None:
            raise AuthenticationFailed(checked.problem)
        return checked.token.user, checked.token

    def authenticate_header(self, request):
        return 'Bearer realm="openenv-hub"'


def require_scope(request, scope: str) -> None:
    """A personal token must carry `scope` for this action; a Hugging Face token or a session acts in full."""
    from registry.models import ApiToken

    if isinstance(request.auth, ApiToken) and scope not in request.auth.scopes:
        raise PermissionDenied(f"This token ({request.auth.name}) lacks the {scope!r} scope; create one that has it.")


class HubTokenAuthentication(BaseAuthentication):
    """A Hugging Face token, confirmed by the Hub's whoami, for the requests that change something.

    Reads are public: a token sent with a GET is not looked at (a client that always attaches one must
    not lose reads to a Hub outage, nor spend the Hub's whoami quota). Tokens the cache does not know
    cost a whoami call, so each client address may ask for at most HUB_IDENTITY_LOOKUPS_PER_MINUTE.
    """

    keyword = b"bearer"

    def authenticate(self, request):
        token = _bearer(request)
        if token is None:
            return None
        try:
            return identity.hub_user_for_token(token, client=request.META.get("REMOTE_ADDR", "")), None
        except identity.TooManyLookups as exc:
            raise Throttled(wait=exc.wait_s, detail="Too many new tokens from this address.") from None
        except InvalidToken:
            raise AuthenticationFailed("The Hugging Face Hub did not accept this token.") from None
        except HubError as exc:
            raise HubUnavailable() from exc

    def authenticate_header(self, request):
        return 'Bearer realm="openenv-hub"'


def has_token(request, *, scheme: str = "bearer") -> bool:
    """Whether the request carries an Authorization header of `scheme` (without looking the token up)."""
    parts = get_authorization_header(request).split()
    return bool(parts) and parts[0].lower() == scheme.encode()


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "registry.api.authentication.ApiTokenAuthentication"
    name = "PersonalToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": (
            "A personal token of this hub (oeh_…), created on the website after signing in with Hugging Face: "
            "scoped (read, publish, evaluate), expiring, revocable. Owner actions need the publish scope.")}


class HubTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes HubTokenAuthentication: a bearer token, the Hugging Face one."""

    target_class = "registry.api.authentication.HubTokenAuthentication"
    name = "HuggingFaceToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": (
            "A Hugging Face token, confirmed by the Hub's whoami and never stored; needed only to request a "
            "validation (staff, or the Space's owner).")}
