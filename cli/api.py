"""The hub's REST API (/api/v1/) over httpx, with every failure turned into one sentence.

Reads never send the token (the API ignores it on reads, and a token has no business in a log line of a
proxy); only `refresh` does. Redirects are followed for reads only (the API answers a non-canonical
spelling with a 301), and httpx drops the Authorization header on a redirect to another origin anyway.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx

from cli.errors import CliError, HubRefused

USER_AGENT = "openenv-hub-cli/1"
TIMEOUT_S = 15.0


class HubAPI:
    """One hub at `base_url` (no trailing slash)."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
        self.base_url = base_url
        self.token = token
        self.timeout_s = timeout_s
        self._client = httpx.Client(
            timeout=timeout_s, headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HubAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing --------------------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return f"{self.base_url}/api/v1/{path.lstrip('/')}"

    def request(self, method: str, path: str, *, params: dict | None = None, auth: bool = False) -> dict:
        headers = {"Authorization": f"Bearer {self.token}"} if auth and self.token else {}
        url = self.url(path)
        try:
            response = self._client.request(method, url, params=params, headers=headers,
                                            follow_redirects=method == "GET")
        except httpx.ConnectError:
            raise CliError(f"Could not reach the hub at {self.base_url}: nothing answers there (is it running? "
                           "OPENENV_HUB_URL or --hub says where it is).") from None
        except httpx.TimeoutException:
            raise CliError(f"The hub at {self.base_url} did not answer within {self.timeout_s:g} s.") from None
        except httpx.HTTPError as exc:
            raise CliError(f"Could not talk to the hub at {self.base_url}: {exc or type(exc).__name__}.") from None
        return self._decode(response)

    def _decode(self, response: httpx.Response) -> dict:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            error = body.get("error") if isinstance(body, dict) else None
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                code = str(error.get("code") or "")
                message = error["message"].strip()
                if code == "throttled" and response.headers.get("Retry-After"):
                    message += f" (retry in {response.headers['Retry-After']} s)"
                raise HubRefused(f"The hub refused: {message}", status=response.status_code, code=code)
            raise HubRefused(
                f"The hub at {self.base_url} answered HTTP {response.status_code} without the API's error shape: "
                "is OPENENV_HUB_URL the hub?", status=response.status_code)
        if not isinstance(body, dict):
            raise HubRefused(f"The answer from {self.base_url} is not the hub's API (HTTP {response.status_code}, "
                             f"{response.headers.get('Content-Type', 'no content type')}): is OPENENV_HUB_URL the hub?",
                             status=response.status_code)
        return body

    # ---- the API -----------------------------------------------------------------------------------------

    @staticmethod
    def env_path(repo_id: str) -> str:
        owner, name = repo_id.split("/", 1)
        return f"environments/{quote(owner, safe='')}/{quote(name, safe='')}/"

    def search(self, query: str | None, *, page_size: int, filters: dict[str, list[str]]) -> dict:
        params: dict = {"page_size": page_size, **{k: v for k, v in filters.items() if v}}
        if query:
            params["q"] = query
        return self.request("GET", "environments/", params=params)

    def environment(self, repo_id: str) -> dict:
        return self.request("GET", self.env_path(repo_id))

    def latest_validation(self, repo_id: str) -> dict | None:
        """The run behind the verdict, with its report; None before any."""
        try:
            return self.request("GET", self.env_path(repo_id) + "validations/latest/")
        except HubRefused as exc:
            if exc.status == 404:
                return None
            raise

    def refresh(self, repo_id: str) -> dict:
        """Ask the hub to index (and so validate) the Space now: 202 {"environment", "status": "queued"}."""
        return self.request("POST", self.env_path(repo_id) + "refresh/", auth=True)
