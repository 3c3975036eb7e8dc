"""Who is asking, and what they may do.

Two kinds of people act on the hub: local users (staff, through the admin and
the web pages) and Hugging Face accounts, proven by a Hugging Face token that
the Hub itself vouches for (`whoami`). An account owns the environments
published under its name or under an organization it belongs to, as on the
Hub; environments from local sources have no Hub owner, so only staff act on
them.

Tokens are never stored: the Hub's answer is cached under a hash of the token
for `HUB_IDENTITY_CACHE_S`, refusals included (a flood of bad tokens must not
turn into a flood of calls to the Hub's rate-limited whoami).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.core.cache import cache

from registry.hub import HubAccount, HubClient, InvalidToken
from registry.models import Environment

REFUSED = "refused"


@dataclass(frozen=True)
class HubUser:
    """A Hugging Face account, proven by a token. Quacks enough like a Django user for DRF and templates."""

    name: str
    orgs: tuple[str, ...] = ()

    is_authenticated = True
    is_anonymous = False
    is_staff = False
    is_superuser = False
    pk = None

    @property
    def username(self) -> str:
        return self.name

    def namespaces(self) -> set[str]:
        return {self.name.lower(), *(org.lower() for org in self.orgs)}

    def owns(self, environment: Environment) -> bool:
        return environment.source == Environment.Source.HUGGINGFACE and environment.owner.lower() in self.namespaces()

    def __str__(self) -> str:
        return f"hf:{self.name}"


class TooManyLookups(Exception):
    """This client asked about too many tokens the cache does not know; `wait_s` until the next window."""

    def __init__(self, wait_s: float):
        super().__init__(f"too many token lookups; wait {wait_s:.0f} s")
        self.wait_s = wait_s


def _lookup_allowed(client: str) -> float:
    """0 if `client` may cause one more whoami call in this minute, else the seconds until the next minute."""
    now = time.time()
    key = f"hub-identity-lookups:{client}:{int(now // 60)}"
    cache.add(key, 0, 120)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, 120)
        count = 1
    return 0.0 if count <= settings.HUB_IDENTITY_LOOKUPS_PER_MINUTE else 60 - now % 60


def hub_user_for_token(token: str, *, client: str = "") -> HubUser:
    """The account behind `token`, as the Hub says. Raises InvalidToken, HubError when the Hub can't
    answer, or TooManyLookups when `client` (an address) asked about too many unknown tokens this minute."""
    key = "hub-identity:" + hashlib.sha256(token.encode()).hexdigest()
    cached = cache.get(key)
    if cached == REFUSED:
        raise InvalidToken("whoami: the Hub refused the token (cached answer)")
    if isinstance(cached, dict):
        return HubUser(name=cached["name"], orgs=tuple(cached["orgs"]))
    wait_s = _lookup_allowed(client)
    if wait_s:
        raise TooManyLookups(wait_s)
    try:
        account: HubAccount = HubClient().whoami(token)
    except InvalidToken:
        cache.set(key, REFUSED, settings.HUB_IDENTITY_CACHE_S)
        raise
    cache.set(key, {"name": account.name, "orgs": list(account.orgs)}, settings.HUB_IDENTITY_CACHE_S)
    return HubUser(name=account.name, orgs=account.orgs)


def owner_namespaces(user) -> set[str]:
    """The Hub namespaces (lower-case) where `user` acts as an owner: a Hub token's account and its organizations
    with write access; a signed-in account's, as of its last sign-in; nothing for anyone else."""
    if user is None or not user.is_authenticated:
        return set()
    if isinstance(user, HubUser):
        return user.namespaces()
    from registry.services.accounts import account_namespaces

    try:
        account = user.hub_account
    except ObjectDoesNotExist:
        return set()
    return account_namespaces(account)


def may_act_in(user, owner: str) -> bool:
    """Whether `user` may act for Spaces under the Hub namespace `owner` (staff may act anywhere)."""
    if user is None or not user.is_authenticated:
        return False
    return bool(user.is_staff) or owner.lower() in owner_namespaces(user)


def may_act(user, environment: Environment) -> bool:
    """Staff may act on any environment; a Hugging Face account on the Spaces it owns (local folders and
    imported entries have no Hub owner)."""
    if user is None or not user.is_authenticated:
        return False
    return bool(user.is_staff) or (environment.source == Environment.Source.HUGGINGFACE
                                   and may_act_in(user, environment.owner))


def actor(user) -> str:
    """How the history names who acted: hf:<account> or staff:<username>."""
    if isinstance(user, HubUser):
        return f"hf:{user.name}"
    try:
        return f"hf:{user.hub_account.name}"
    except (AttributeError, ObjectDoesNotExist):
        return f"staff:{user.get_username()}" if getattr(user, "is_staff", False) else f"user:{user.get_username()}"
