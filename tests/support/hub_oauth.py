"""The Hub's OpenID Connect provider, as the Hub stand-in (tests/support/hubstub.py) serves it.

"Sign in with Hugging Face" is OAuth 2.0 with OpenID Connect: `/oauth/authorize` (where the Hub asks the
person to approve, then redirects back with a one-time code), `/oauth/token` (the code for an access token and
an RS256-signed id_token, client authenticated with HTTP Basic), `/oauth/userinfo` (the account and its
organizations with `roleInOrg`), `/oauth/jwks` and `/.well-known/openid-configuration`. Here the approval is
given by whoever the test says is signed in on the Hub (`sign_in_as`), or refused (`deny`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ID_TOKEN_TTL_S = 3600


@dataclass
class HubAccountClaims:
    name: str
    orgs: list[tuple[str, str]] = field(default_factory=list)  # (org name, roleInOrg)

    @property
    def sub(self) -> str:
        return hashlib.sha1(f"user:{self.name}".encode()).hexdigest()[:24]

    def claims(self) -> dict:
        return {
            "sub": self.sub, "name": self.name.title(), "preferred_username": self.name,
            "profile": f"https://huggingface.co/{self.name}", "picture": f"https://cdn.example/{self.name}.png",
            "orgs": [{"sub": hashlib.sha1(f"org:{o}".encode()).hexdigest()[:24], "name": o.title(),
                      "preferred_username": o, "roleInOrg": role, "isEnterprise": False} for o, role in self.orgs],
        }


class OAuthProvider:
    """One OAuth app (client id, secret, redirect URIs) and the accounts that may sign in to it."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        self._lock = threading.Lock()
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._kid = secrets.token_hex(8)
        self.clients: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.accounts: dict[str, HubAccountClaims] = {}
        self.signed_in: str | None = None
        self.denied = False
        self._codes: dict[str, dict] = {}
        self._access: dict[str, str] = {}  # access token -> account name
        self.tokens_issued = 0

    # --- what tests set up -------------------------------------------------------------------------------

    def register_client(self, client_id: str, secret: str, redirect_uris: tuple[str, ...]) -> None:
        self.clients[client_id] = (secret, redirect_uris)

    def add_account(self, name: str, *, orgs: list[tuple[str, str]] = ()) -> HubAccountClaims:
        self.accounts[name] = HubAccountClaims(name, list(orgs))
        return self.accounts[name]

    def sign_in_as(self, name: str | None) -> None:
        """Who is signed in on the Hub (and approves the app when asked); None: nobody."""
        self.signed_in, self.denied = name, False

    def deny(self) -> None:
        self.denied = True

    # --- HTTP -----------------------------------------------------------------------------------------------

    def handle(self, method: str, segs: list[str], query: dict[str, list[str]], body: bytes,
               headers) -> tuple[int, list[tuple[str, str]], bytes]:
        route = "/".join(segs)
        if route == ".well-known/openid-configuration" and method == "GET":
            return self._json(200, {
                "issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/oauth/authorize",
                "token_endpoint": f"{self.issuer}/oauth/token", "userinfo_endpoint": f"{self.issuer}/oauth/userinfo",
                "jwks_uri": f"{self.issuer}/oauth/jwks", "response_types_supported": ["code"],
                "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"],
                "scopes_supported": ["openid", "profile", "email"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"]})
        if route == "oauth/jwks" and method == "GET":
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
            return self._json(200, {"keys": [{**jwk, "kid": self._kid, "use": "sig", "alg": "RS256"}]})
        if route == "oauth/authorize" and method == "GET":
            return self._authorize({k: v[0] for k, v in query.items()})
        if route == "oauth/token" and method == "POST":
            return self._token({k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}, headers)
        if route == "oauth/userinfo" and method in ("GET", "POST"):
            auth = headers.get("Authorization") or ""
            name = self._access.get(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
            if name is None:
                return self._json(401, {"error": "invalid_token"})
            return self._json(200, self.accounts[name].claims())
        return self._json(404, {"error": "not found"})

    def _authorize(self, params: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        client = self.clients.get(params.get("client_id", ""))
        redirect_uri = params.get("redirect_uri", "")
        if client is None or redirect_uri not in client[1]:
            return self._json(400, {"error": "invalid_client or redirect_uri"})
        state = params.get("state", "")
        if params.get("response_type") != "code" or "openid" not in params.get("scope", "").split():
            return self._redirect(redirect_uri, {"error": "invalid_request", "state": state})
        if self.denied or self.signed_in is None:
            return self._redirect(redirect_uri, {"error": "access_denied", "state": state})
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._codes[code] = {"client_id": params["client_id"], "redirect_uri": redirect_uri,
                                 "nonce": params.get("nonce"), "account": self.signed_in, "at": time.time()}
        return self._redirect(redirect_uri, {"code": code, "state": state})

    def _token(self, form: dict[str, str], headers) -> tuple[int, list[tuple[str, str]], bytes]:
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        auth = headers.get("Authorization") or ""
        if auth.startswith("Basic "):
            client_id, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        client = self.clients.get(client_id)
        if client is None or not secrets.compare_digest(client[0], secret):
            return self._json(401, {"error": "invalid_client"})
        with self._lock:
            grant = self._codes.pop(form.get("code", ""), None)  # one use only
        if (form.get("grant_type") != "authorization_code" or grant is None or grant["client_id"] != client_id
                or grant["redirect_uri"] != form.get("redirect_uri")):
            return self._json(400, {"error": "invalid_grant"})
        account = self.accounts[grant["account"]]
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": account.sub, "aud": client_id, "iat": now, "exp": now + ID_TOKEN_TTL_S,
                  "preferred_username": account.name, "name": account.name.title()}
        if grant["nonce"]:
            claims["nonce"] = grant["nonce"]
        id_token = jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self._kid})
        access = "hf_oauth_" + secrets.token_urlsafe(24)
        with self._lock:
            self._access[access] = account.name
            self.tokens_issued += 1
        return self._json(200, {"access_token": access, "token_type": "Bearer", "expires_in": 28800,
                                "id_token": id_token, "scope": "openid profile"})

    @staticmethod
    def _json(status: int, payload) -> tuple[int, list[tuple[str, str]], bytes]:
        return status, [("Content-Type", "application/json"), ("Cache-Control", "no-store")], json.dumps(payload).encode()

    @staticmethod
    def _redirect(uri: str, params: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        joiner = "&" if urlsplit(uri).query else "?"
        return 302, [("Location", f"{uri}{joiner}{urlencode(params)}")], b""
