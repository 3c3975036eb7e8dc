"""Accounts and personal API tokens.

A person signs in with Hugging Face (OpenID Connect, registry.signin): the hub keeps their account id, name,
and organizations with roles as the Hub said at that sign-in, never the Hub's token. Signed in, they create
personal tokens for scripts: shown once, stored as a SHA-256 digest (a token is 32 random bytes, so a fast
digest is as good as a slow one), named, scoped, expiring, revocable, with the time of last use.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from registry.hub import ORG_OWNER_ROLES
from registry.models import ID_PART, Account, ApiToken

TOKEN_PREFIX = "oeh_"
_TOKEN = re.compile(rf"^{TOKEN_PREFIX}[A-Za-z0-9_-]{{43}}$")
SHOWN_PREFIX_CHARS = 12
MAX_TOKEN_DAYS = 366
MAX_TOKENS_PER_USER = 50
# Writing last_used_at on every request would turn reads of the token into writes: once a minute is enough.
LAST_USED_RESOLUTION = timedelta(minutes=1)
_NAME = re.compile(rf"^{ID_PART}$")


class TokenRefused(ValueError):
    """A token request that cannot be honoured, with the sentence to show."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def looks_like_api_token(secret: str) -> bool:
    return secret.startswith(TOKEN_PREFIX)


def api_token_create(*, user, name: str, scopes: list[str] | tuple[str, ...], days: int) -> tuple[ApiToken, str]:
    """A new token for `user`: (the row, the secret, which is never stored and cannot be shown again)."""
    name = (name or "").strip()
    if not 1 <= len(name) <= 100 or not name.isprintable():
        raise TokenRefused("Name the token: 1 to 100 printable characters.")
    chosen = sorted(set(scopes))
    if not chosen or any(scope not in ApiToken.SCOPES for scope in chosen):
        raise TokenRefused(f"Choose scopes among {', '.join(ApiToken.SCOPES)}.")
    if not 1 <= days <= MAX_TOKEN_DAYS:
        raise TokenRefused(f"A token expires after 1 to {MAX_TOKEN_DAYS} days.")
    live = ApiToken.objects.filter(user=user, revoked_at__isnull=True, expires_at__gt=timezone.now()).count()
    if live >= MAX_TOKENS_PER_USER:
        raise TokenRefused(f"You have {live} live tokens; revoke one first.")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=secret[:SHOWN_PREFIX_CHARS], digest=_digest(secret),
                                    scopes=chosen, expires_at=timezone.now() + timedelta(days=days))
    return token, secret


def api_token_revoke(*, token: ApiToken) -> bool:
    """Revoke `token` (compare-and-set: False when it already was)."""
    return bool(ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()))


@dataclass(frozen=True)
class TokenCheck:
    token: ApiToken | None
    problem: str = ""  # why it was refused, in one sentence


def api_token_check(secret: str) -> TokenCheck:
    """The live token behind `secret`, or why there is none (unknown, revoked, expired)."""
    if not _TOKEN.match(secret):
        return TokenCheck(None, "This is not a token this hub gave out.")
    token = ApiToken.objects.select_related("user", "user__hub_account").filter(digest=_digest(secret)).first()
    if token is None:
        return TokenCheck(None, "This hub knows no such token.")
    now = timezone.now()
    if token.revoked_at is not None:
        return TokenCheck(None, f"This token ({token.name}) was revoked.")
    if token.expires_at is not None and token.expires_at <= now:
        return TokenCheck(None, f"This token ({token.name}) expired; create another.")
    if not token.user.is_active:
        return TokenCheck(None, "The account this token belongs to is disabled.")
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return TokenCheck(token)


# --- sign-in -------------------------------------------------------------------------------------------------


def _orgs(claims: dict) -> list[dict]:
    orgs = []
    for org in claims.get("orgs") if isinstance(claims.get("orgs"), list) else []:
        if not isinstance(org, dict):
            continue
        name = org.get("preferred_username") or org.get("name")
        role = org.get("roleInOrg")
        if isinstance(name, str) and _NAME.match(name):
            orgs.append({"name": name, "role": role if isinstance(role, str) else ""})
    return orgs[:500]


def account_claims_problem(claims: dict) -> str:
    """Why these OpenID claims cannot make an account ("" when they can)."""
    if not isinstance(claims.get("sub"), str) or not 1 <= len(claims["sub"]) <= 64:
        return "the Hub sent no account id"
    if not isinstance(claims.get("preferred_username"), str) or not _NAME.match(claims["preferred_username"]):
        return "the Hub sent no usable account name"
    return ""


def account_sign_in(*, claims: dict):
    """The Django user for a Hub account that just proved itself (OpenID claims), created the first time and
    brought up to date (name, organizations, roles) every time."""
    name = claims["preferred_username"]
    values = {"name": name, "display_name": str(claims.get("name") or "")[:200],
              "avatar_url": claims["picture"] if isinstance(claims.get("picture"), str)
              and claims["picture"].startswith("https://") and len(claims["picture"]) <= 500 else "",
              "orgs": _orgs(claims), "signed_in_at": timezone.now()}
    with transaction.atomic():
        account = Account.objects.select_for_update().select_related("user").filter(hub_id=claims["sub"]).first()
        if account is not None:
            Account.objects.filter(pk=account.pk).update(**values)
            return account.user
        User = get_user_model()
        username = f"hf-{name}"[:150]
        for suffix in range(1, 100):
            try:
                with transaction.atomic():
                    user = User.objects.create(username=username)
                break
            except IntegrityError:  # a local user, or a renamed account's old name, holds it
                username = f"hf-{name}-{suffix}"[:150]
        user.set_unusable_password()
        user.save(update_fields=["password"])
        Account.objects.create(user=user, hub_id=claims["sub"], **values)
        return user


def account_namespaces(account: Account) -> set[str]:
    """Where the account may act as an owner: its own name and its organizations where its role allows writing."""
    return {account.name.lower(), *(o["name"].lower() for o in account.orgs or []
                                   if isinstance(o, dict) and o.get("role") in ORG_OWNER_ROLES)}
