"""The one module that talks to the Hugging Face Hub, through `huggingface_hub`.

Everything the Hub returns is untrusted: file reads stop at a size cap
whatever the file declares, every HTTP call has a timeout, 429 and 5xx are retried with
backoff (Retry-After honoured, but capped), and failures surface as the small
set of exceptions below so callers never see a `huggingface_hub` type.
"""

from __future__ import annotations

import email.utils
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from django.conf import settings
from huggingface_hub import HfApi, SpaceInfo, hf_hub_url, set_client_factory
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from registry.models import ID_PART

logger = logging.getLogger(__name__)

ENVIRONMENT_TAGS = ("openenv", "agent-environment")
SEARCH_TERM = "openenv"
LISTING_EXPAND = [
    "author", "cardData", "createdAt", "disabled", "lastModified", "likes", "private",
    "runtime", "sdk", "sha", "siblings", "subdomain", "tags",
]
# Roles in an organization (whoami's `roleInOrg`) that let a member act for what the organization publishes.
ORG_OWNER_ROLES = ("admin", "write")
TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}
# A Link chain longer than this is a loop or an attack: 100 items a page would be 5 million Spaces.
MAX_LISTING_PAGES = 50_000

T = TypeVar("T")


class HubError(Exception):
    """The Hub could not give us what we asked for; `transient` says whether asking again may help."""

    transient = False


class HubUnavailable(HubError):
    """429, 5xx or a network failure that outlasted our retries."""

    transient = True


class SpaceNotFound(HubError):
    """The Space does not exist, or is private to us."""


class DatasetNotFound(HubError):
    """The dataset repo does not exist, or is private to us (the Hub answers both alike, 401 or 404)."""


class RevisionNotFound(HubError):
    """The sha is gone (force-push) or never existed: a newer listing will show the right one."""

    transient = True


class InvalidToken(HubError):
    """The Hub refused a token (HTTP 401): it is wrong, expired or revoked."""


class FileNotFound(HubError):
    """No such file at that revision."""


@dataclass(frozen=True)
class SpaceFacts:
    """What the Hub says about one Space at one sha (from a listing or from space_info)."""

    repo_id: str
    sha: str
    author: str = ""
    private: bool = False
    disabled: bool = False
    sdk: str = ""
    tags: tuple[str, ...] = ()
    card_data: dict[str, Any] | None = None
    likes: int = 0
    created_at: datetime | None = None
    last_modified: datetime | None = None
    runtime_stage: str = ""
    subdomain: str = ""
    host: str = ""
    # Root files at this sha; size is None when the listing did not say.
    files: dict[str, int | None] = field(default_factory=dict)
    files_known: bool = False
    # When the Hub said all this: a writer holding older facts than the index already has must not move head.
    observed_at: datetime | None = None

    @property
    def owner(self) -> str:
        return self.repo_id.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[-1]

    def is_tagged(self) -> bool:
        return any(tag in ENVIRONMENT_TAGS for tag in self.tags)


@dataclass(frozen=True)
class DatasetFacts:
    """What the Hub says about one dataset repo at one sha (from dataset_info)."""

    repo_id: str
    sha: str
    author: str = ""
    private: bool = False
    gated: bool = False
    disabled: bool = False
    tags: tuple[str, ...] = ()
    card_data: dict[str, Any] | None = None
    last_modified: datetime | None = None
    # Files at this sha, any depth; size is None when the Hub did not say.
    files: dict[str, int | None] = field(default_factory=dict)
    files_known: bool = False


@dataclass(frozen=True)
class HubAccount:
    """Whom a token belongs to, as the Hub says: a user name and the organizations the user may write to."""

    name: str
    orgs: tuple[str, ...] = ()


@dataclass
class Listing:
    """The union of the discovery listings; `complete` is False when any listing failed part-way."""

    spaces: dict[str, SpaceFacts] = field(default_factory=dict)
    complete: bool = True
    errors: list[str] = field(default_factory=list)


class _RetryAfterCap(httpx2.HTTPTransport):
    """Caps Retry-After so that huggingface_hub's own backoff (used for listings) never sleeps for hours."""

    def __init__(self, cap_s: float, **kwargs):
        super().__init__(**kwargs)
        self.cap_s = cap_s

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = super().handle_request(request)
        value = response.headers.get("retry-after")
        if value is not None:
            seconds = parse_retry_after(value)
            if seconds is None:
                del response.headers["retry-after"]  # garbage: the caller's own backoff applies
            else:  # delta-seconds, an HTTP-date turned into seconds; never more than the cap
                response.headers["retry-after"] = str(int(min(seconds, self.cap_s) + 0.999))
        return response


_client_lock = threading.Lock()
_client_config: tuple | None = None


def _install_http_client() -> None:
    """Give huggingface_hub's shared client timeouts (its default is none) and the Retry-After cap."""
    global _client_config
    config = (settings.HUB_HTTP_TIMEOUT_S, settings.HUB_RETRY_AFTER_MAX_S)
    with _client_lock:
        if _client_config == config:
            return

        def factory() -> httpx2.Client:
            return httpx2.Client(
                follow_redirects=True,
                timeout=httpx2.Timeout(config[0], connect=min(10.0, config[0])),
                transport=_RetryAfterCap(config[1]),
            )

        set_client_factory(factory)
        _client_config = config


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _retry_after(exc: BaseException) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), capped; None if absent or unreadable."""
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    return parse_retry_after(value)


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), settings.HUB_RETRY_AFTER_MAX_S)


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (httpx2.TransportError, TimeoutError, ConnectionError)):
        return True
    if isinstance(exc, HfHubHTTPError):
        return _status(exc) in TRANSIENT_STATUS
    if isinstance(exc, LocalEntryNotFoundError):
        # hf_hub_download turns a failed HEAD (5xx, network) into "not in the local cache".
        cause = exc.__cause__ or exc.__context__
        return cause is None or _is_transient(cause)
    return False


def _describe(exc: BaseException) -> str:
    status = _status(exc)
    text = " ".join(str(exc).split())[:300]
    return f"HTTP {status}: {text}" if status else f"{type(exc).__name__}: {text}"


class HubClient:
    """Discovery and reads against one Hub endpoint. Thread-safe; cheap to construct."""

    def __init__(self, *, endpoint: str | None = None, token: str | None = None, cache_dir: Path | None = None,
                 sleep: Callable[[float], None] = time.sleep):
        _install_http_client()
        self.endpoint = (endpoint or settings.HF_ENDPOINT).rstrip("/")
        # token=False stops huggingface_hub from picking up a token saved on this machine.
        self.api = HfApi(endpoint=self.endpoint, token=token or settings.HF_TOKEN or False)
        self.cache_dir = Path(cache_dir or settings.HF_CACHE_DIR)
        self.sleep = sleep
        # When the Hub answers 429, every reader of this client waits: one gate, shared by all its threads.
        self._gate_lock = threading.Lock()
        self._not_before = 0.0
        self._closed_by = threading.local()  # the reader that closed the gate sleeps its own delay, not twice

    def _gate_wait(self) -> None:
        with self._gate_lock:
            delay = self._not_before - time.monotonic()
            mine = getattr(self._closed_by, "until", None) == self._not_before
        if delay > 0 and not mine:
            self.sleep(delay)

    def _gate_close(self, delay: float) -> None:
        with self._gate_lock:
            self._not_before = max(self._not_before, time.monotonic() + delay)
            self._closed_by.until = self._not_before

    def _call(self, what: str, fn: Callable[[], T], *, attempts: int | None = None,
              missing: type[HubError] = SpaceNotFound) -> T:
        """Run one Hub call, retrying transient failures with capped exponential backoff.

        A repo the Hub does not show raises `missing` (SpaceNotFound, or DatasetNotFound for dataset calls).
        """
        attempts = max(1, attempts or settings.HUB_RETRY_ATTEMPTS)
        for attempt in range(1, attempts + 1):
            self._gate_wait()
            try:
                return fn()
            except HubError:
                raise
            except RepositoryNotFoundError as exc:
                repo = "dataset" if missing is DatasetNotFound else "Space"
                raise missing(f"{what}: the {repo} does not exist or is not public ({_describe(exc)})") from exc
            except RevisionNotFoundError as exc:
                raise RevisionNotFound(f"{what}: revision not found ({_describe(exc)})") from exc
            except EntryNotFoundError as exc:
                if isinstance(exc, LocalEntryNotFoundError) and _is_transient(exc):
                    error: BaseException = exc.__cause__ or exc  # snapshot_download's way of saying "Hub down"
                else:
                    raise FileNotFound(f"{what}: no such file") from exc
            except Exception as exc:  # noqa: BLE001 - classified just below
                if not _is_transient(exc):
                    raise HubError(f"{what}: {_describe(exc)}") from exc
                error = exc
            if attempt == attempts:
                raise HubUnavailable(f"{what}: the Hub kept failing after {attempts} attempts ({_describe(error)})") from error
            delay = _retry_after(error)
            if delay is None:
                delay = min(settings.HUB_RETRY_BASE_S * 2 ** (attempt - 1), 30.0)
            if _status(error) == 429:  # the Hub limits the client, not this one read: every reader slows down
                self._gate_close(delay)
            logger.debug("hub: %s failed (%s); retry %d/%d in %.1fs", what, _describe(error), attempt, attempts - 1, delay)
            self.sleep(delay)
        raise AssertionError("unreachable")

    # --- discovery ------------------------------------------------------------------

    def _iter_listing(self, query: dict[str, str]) -> Iterator[SpaceFacts]:
        """Page through /api/spaces following `Link: rel="next"` to the end.

        Each page is retried on its own (a 429 on page 40 does not restart at
        page 1), and a next link that leaves the endpoint's origin is refused:
        the token must never be sent to a host the Hub merely named.
        """
        headers = build_hf_headers(token=self.api.token, library_name="openenv-hub")
        url: str | None = f"{self.endpoint}/api/spaces"
        params: list[tuple[str, str]] | None = [*query.items()] + [("expand", e) for e in LISTING_EXPAND]
        origin = httpx2.URL(self.endpoint)
        for page in range(1, MAX_LISTING_PAGES + 1):
            response = self._call(f"listing page {page}", lambda url=url, params=params: _get_page(url, params, headers))
            items = response.json()
            if not isinstance(items, list):
                raise HubError(f"listing page {page}: expected a JSON list, got {type(items).__name__}")
            for item in items:
                try:
                    facts = _facts_from_info(SpaceInfo(**item)) if isinstance(item, dict) and "id" in item else None
                except Exception as exc:  # noqa: BLE001 - one malformed item must not end the listing
                    logger.warning("hub: listing page %d: skipped a malformed item (%s)", page, _describe(exc))
                    continue
                if facts is not None:
                    yield facts
            url, params = response.links.get("next", {}).get("url"), None
            if url is None:
                return
            nxt = httpx2.URL(url)
            if (nxt.scheme, nxt.host, nxt.port) != (origin.scheme, origin.host, origin.port):
                raise HubError(f"listing page {page}: next link {url!r} leaves {self.endpoint}; not followed")
        raise HubError(f"listing: more than {MAX_LISTING_PAGES} pages; stopped")

    def list_environment_spaces(self) -> Listing:
        """Every public Space that is an OpenEnv environment: tagged, or found by search with an openenv.yaml at its root."""
        listing = Listing()
        queries: list[tuple[str, dict]] = [(f"tag {tag!r}", {"filter": tag}) for tag in ENVIRONMENT_TAGS]
        queries.append((f"search {SEARCH_TERM!r}", {"search": SEARCH_TERM}))
        for label, query in queries:
            try:
                for facts in self._iter_listing(query):
                    if facts.private:
                        continue
                    is_search = "search" in query
                    if is_search and not facts.is_tagged() and "openenv.yaml" not in facts.files:
                        continue
                    listing.spaces.setdefault(facts.repo_id.lower(), facts)
            except Exception as exc:  # noqa: BLE001 - a failed listing must not stop the others
                listing.complete = False
                listing.errors.append(f"listing by {label} stopped early: {_describe(exc)}")
        if listing.errors:
            # One line a sync, not one a retry: an unreachable Hub is news once.
            logger.warning("hub: %s: %d of %d listings failed; first: %s", self.endpoint, len(listing.errors),
                           len(queries), listing.errors[0])
        return listing

    def space(self, repo_id: str, *, revision: str | None = None) -> SpaceFacts:
        """One Space's facts, with root file sizes, at a revision (default: the current head)."""
        info = self._call(
            f"space_info {repo_id}",
            lambda: self.api.space_info(repo_id, revision=revision, files_metadata=True),
        )
        facts = _facts_from_info(info)
        if facts is None:
            raise HubError(f"space_info {repo_id}: the Hub answered without an id or sha")
        return facts

    def read_file(self, repo_id: str, path: str, *, sha: str, cap: int) -> bytes:
        """One file pinned to `sha`, streamed and cut off after `cap` + 1 bytes (whatever size it declares).

        A result longer than `cap` means "too large"; the caller says so (manifest.decode_text does).
        """
        return self._read_capped("space", repo_id, path, sha=sha, cap=cap)

    def dataset(self, repo_id: str, revision: str | None = None) -> DatasetFacts:
        """One dataset repo's facts, with the sizes of its files, at a revision (default: the current head).

        Read it first, then read its files pinned to the sha it gives (`read_dataset_file`).
        """
        info = self._call(
            f"dataset_info {repo_id}",
            lambda: self.api.dataset_info(repo_id, revision=revision, files_metadata=True),
            missing=DatasetNotFound,
        )
        facts = _dataset_facts(info)
        if facts is None:
            raise HubError(f"dataset_info {repo_id}: the Hub answered without an id or sha")
        return facts

    def read_dataset_file(self, repo_id: str, path: str, *, sha: str, cap: int) -> bytes:
        """One file of a dataset repo pinned to `sha`, cut off after `cap` + 1 bytes, as `read_file` for Spaces."""
        return self._read_capped("dataset", repo_id, path, sha=sha, cap=cap, missing=DatasetNotFound)

    def _read_capped(self, repo_type: str, repo_id: str, path: str, *, sha: str, cap: int,
                     missing: type[HubError] = SpaceNotFound) -> bytes:
        url = hf_hub_url(repo_id, path, repo_type=repo_type, revision=sha, endpoint=self.endpoint)
        headers = build_hf_headers(token=self.api.token, library_name="openenv-hub")
        where = f"{repo_type}s/{repo_id}" if repo_type == "dataset" else repo_id
        return self._call(f"download {where}/{path}@{sha[:12]}", lambda: _get_capped(url, headers, cap + 1),
                          missing=missing)

    def snapshot(self, repo_id: str, *, sha: str, local_dir: Path) -> Path:
        """The whole repository at `sha` into `local_dir` (for the local validation runner)."""
        return Path(self._call(
            f"snapshot {repo_id}@{sha[:12]}",
            lambda: self.api.snapshot_download(
                repo_id=repo_id, repo_type="space", revision=sha, cache_dir=self.cache_dir, local_dir=local_dir,
            ),
        ))


    def whoami(self, token: str) -> HubAccount:
        """The account a Hugging Face token belongs to (`GET /api/whoami-v2`).

        The token is passed through to the Hub and kept nowhere. This runs while a
        person waits for an answer, so it is tried at most twice.
        """
        def ask() -> dict:
            try:
                return self.api.whoami(token=token)
            except HfHubHTTPError as exc:
                if _status(exc) == 401:
                    raise InvalidToken("whoami: the Hub refused the token") from exc
                raise
        data = self._call("whoami", ask, attempts=min(2, settings.HUB_RETRY_ATTEMPTS))
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name or len(name) > 96:
            raise HubError("whoami: the Hub answered without a usable account name")
        orgs = data.get("orgs") if isinstance(data.get("orgs"), list) else []
        # Only organizations the account may write to: a read-only member does not own what they publish.
        org_names = tuple(
            org["name"] for org in orgs[:1000]
            if isinstance(org, dict) and isinstance(org.get("name"), str) and 0 < len(org["name"]) <= 96
            and org.get("roleInOrg") in ORG_OWNER_ROLES
        )
        return HubAccount(name=name, orgs=org_names)


def _get_capped(url: str, headers: dict, limit: int) -> bytes:
    """GET a file, reading at most `limit` bytes of its body (the rest is never read)."""
    with get_session().stream("GET", url, headers=headers) as response:
        hf_raise_for_status(response)
        chunks, total = [], 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            total += len(chunk)
            if total >= limit:
                break
    return b"".join(chunks)[:limit]


def _get_page(url: str, params: list[tuple[str, str]] | None, headers: dict) -> httpx2.Response:
    response = get_session().get(url, params=params, headers=headers)
    hf_raise_for_status(response)
    return response


# A Hub repo id as the Hub allows it; an item with any other id is not indexed.
_REPO_ID = re.compile(f"{ID_PART}/{ID_PART}")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _text(value: Any, cap: int) -> str:
    """A string from the Hub made safe to store: NUL removed (PostgreSQL text cannot hold it), cut to `cap`."""
    return value.replace("\x00", "")[:cap] if isinstance(value, str) else ""


def _files(siblings: Any) -> dict[str, int | None]:
    """File path -> size from a repo's siblings (size None when absent or not a plain non-negative int)."""
    files: dict[str, int | None] = {}
    for sibling in siblings or []:
        name = getattr(sibling, "rfilename", None)
        size = getattr(sibling, "size", None)
        if isinstance(name, str) and name.isprintable() and 0 < len(name) <= 1000:
            files[name] = size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None
    return files


def _id_and_sha(info: Any) -> tuple[str, str] | None:
    """A repo's id and sha from the Hub's answer, or None when either is not one the Hub would give."""
    repo_id = getattr(info, "id", None)
    sha = getattr(info, "sha", None)
    if not isinstance(repo_id, str) or not _REPO_ID.fullmatch(repo_id):
        return None
    if not isinstance(sha, str) or not _SHA.fullmatch(sha.lower()):
        return None
    return repo_id, sha


def _dataset_facts(info: Any) -> DatasetFacts | None:
    """DatasetFacts from dataset_info, or None when its id or sha is not one the Hub would give."""
    if (found := _id_and_sha(info)) is None:
        return None
    repo_id, sha = found
    siblings = getattr(info, "siblings", None)
    card = getattr(info, "card_data", None)
    if card is not None and hasattr(card, "to_dict"):
        card = card.to_dict()
    last_modified = getattr(info, "last_modified", None)
    return DatasetFacts(
        repo_id=repo_id,
        sha=sha.lower(),
        author=_text(getattr(info, "author", None), 96) or repo_id.split("/", 1)[0],
        private=bool(getattr(info, "private", False)),
        gated=bool(getattr(info, "gated", False)),  # False, or "auto"/"manual" on the Hub
        disabled=bool(getattr(info, "disabled", False)),
        tags=tuple(_text(t, 100) for t in (getattr(info, "tags", None) or [])[:200] if _text(t, 100)),
        card_data=card if isinstance(card, dict) else None,
        last_modified=last_modified if isinstance(last_modified, datetime) else None,
        files=_files(siblings),
        files_known=siblings is not None,
    )


def _facts_from_info(info: Any) -> SpaceFacts | None:
    """SpaceFacts from a listing item or space_info, or None when its id or sha is not one the Hub would give."""
    if (found := _id_and_sha(info)) is None:
        return None
    repo_id, sha = found
    runtime = getattr(info, "runtime", None)
    siblings = getattr(info, "siblings", None)
    files = _files(siblings)
    card = getattr(info, "card_data", None)
    if card is not None and hasattr(card, "to_dict"):
        card = card.to_dict()
    subdomain = _text(getattr(info, "subdomain", None), 200)
    host = _text(getattr(info, "host", None), 300) or (f"https://{subdomain}.hf.space" if subdomain else "")
    return SpaceFacts(
        repo_id=repo_id,
        sha=sha.lower(),
        author=_text(getattr(info, "author", None), 96) or repo_id.split("/", 1)[0],
        private=bool(getattr(info, "private", False)),
        disabled=bool(getattr(info, "disabled", False)),
        sdk=_text(getattr(info, "sdk", None), 32),
        tags=tuple(_text(t, 100) for t in (getattr(info, "tags", None) or [])[:200] if _text(t, 100)),
        card_data=card if isinstance(card, dict) else None,
        likes=max(0, int(getattr(info, "likes", None) or 0)),
        created_at=getattr(info, "created_at", None),
        last_modified=getattr(info, "last_modified", None),
        runtime_stage=_text(str(getattr(runtime, "stage", "") or ""), 32),
        subdomain=subdomain,
        host=host,
        files=files,
        files_known=siblings is not None,
        observed_at=datetime.now(timezone.utc),
    )
