"""A real HTTP server that stands in for the Hugging Face Hub API in tests.

No machine here reaches huggingface.co, so tests and benchmarks drive the real
``huggingface_hub`` 2.4 client against this server instead::

    with HubStub(page_size=5) as stub:
        stub.seed_from_corpus(Path("/work/shared/corpus/openenv-envs"))
        api = HfApi(endpoint=stub.url, token=False)
        spaces = list(api.list_spaces(filter="openenv", expand=["sha", "tags"]))

Routes served (each checked against the ``huggingface_hub`` 2.4.0 source):

=======================================================  ============  ===========================
route                                                    kind          client call
=======================================================  ============  ===========================
``GET /api/spaces``                                      ``list``      ``list_spaces``
``GET /api/spaces/{id}[/revision/{rev}]``                ``info``      ``space_info``
``GET /api/spaces/{id}/tree/{rev}[/{path}]``             ``tree``      ``list_repo_tree/_files``
``POST /api/spaces/{id}/paths-info/{rev}``               ``paths_info`` ``get_paths_info``
``HEAD|GET /spaces/{id}/resolve/{rev}/{path}``           ``resolve``   ``hf_hub_download``
``GET /api/datasets/{id}[/revision/{rev}]``              ``info``      ``dataset_info``
``GET /api/datasets/{id}/tree/{rev}[/{path}]``           ``tree``      ``list_repo_tree/_files``
``POST /api/datasets/{id}/paths-info/{rev}``             ``paths_info`` ``get_paths_info``
``HEAD|GET /datasets/{id}/resolve/{rev}/{path}``         ``resolve``   ``hf_hub_download``
``GET /api/whoami-v2``                                   ``whoami``    ``whoami``
``POST /api/repos/create``                               ``create``    ``create_repo``
``DELETE /api/repos/delete``                             ``delete``    ``delete_repo``
``POST /api/repos/move``                                 ``move``      ``move_repo``
``POST /api/spaces/{id}/preupload/{rev}``                ``preupload`` ``upload_folder`` & co.
``POST /api/spaces/{id}/commit/{rev}`` (NDJSON)          ``commit``    ``create_commit``
``POST /spaces/{id}.git/info/lfs/objects/batch``         ``lfs``       LFS batch (basic transfer)
``PUT /lfs-upload/{sha256}``, ``POST /lfs-verify/{id}``  ``lfs``       LFS upload and verify
``GET|POST|DELETE /api/spaces/{id}/variables``           ``variables`` ``add_space_variable`` & co.
``GET|POST|DELETE /api/spaces/{id}/secrets``             ``secrets``   ``add_space_secret`` & co.
``GET /api/spaces/{id}/xet-write-token/{rev}``           ``xet``       501: speaks LFS, not Xet
``POST /api/validate-yaml``                              ``validate_yaml`` a README's front-matter
``/oauth/*``, ``/.well-known/openid-configuration``      ``oauth``     sign-in (``hub_oauth.py``)
anything else                                            ``unknown``   404 JSON
=======================================================  ============  ===========================

Writing (what ``openenv push`` and ``HfApi.upload_folder`` do) takes a token
given to ``add_token``: 401 without one, 403 outside the user's own namespace
and the organizations where its role is ``admin`` or ``write``. ``preupload``
answers ``lfs`` for files of ``lfs_threshold`` bytes or more (10 MiB, as the
Hub) and for binary samples (a NUL byte), else ``regular``; a commit takes
base64 ``file`` lines, ``lfsFile`` lines naming an object uploaded through the
LFS batch API, ``deletedFile`` and ``deletedFolder``, and makes one new sha
served at once by every read route. ``huggingface_hub`` uploads ``lfs`` files
through Xet when ``hf_xet`` is installed: the stand-in does not speak Xet, so
run such a client with ``HF_HUB_DISABLE_XET=1`` (its Xet token route answers
501 saying so). Space variables and secrets are kept per Space (secret values
are never returned).

Webhooks: ``add_webhook(url, secret)`` makes the stand-in POST the Hub's
payload (``event {action, scope}``, ``repo {type, name, id, private,
headSha, ...}``, ``updatedRefs``, ``webhook {id, version}``, the secret
verbatim in ``X-Webhook-Secret``) after every commit (``update`` /
``repo.content``; ``create`` / ``repo`` for a new Space), force-push
(``reset_space``), visibility change (``update`` / ``repo.config``), delete
and move (``movedTo``), from one delivery thread, in order; ``deliveries``
records each attempt and ``wait_for_deliveries`` waits for them.

Behaviour worth knowing (and kept deliberately close to the real Hub):

* Every response carries ``Content-Length`` (HEAD included) and errors carry a
  JSON object ``{"error": ...}`` plus ``X-Error-Code`` (``RepoNotFound``,
  ``RevisionNotFound``, ``EntryNotFound``) from which the client builds its
  typed exceptions.
* Private Spaces are never listed and answer 404 ``RepoNotFound`` everywhere,
  whatever token is sent (tokens only matter for ``whoami``).
* Dataset repos (``put_dataset``) are read as the Hub reads them: a missing
  dataset, or a private one the caller may not read, answers 401
  ``RepoNotFound`` ("Invalid username or password.") without a token and 404
  ``RepoNotFound`` with one; a token the stand-in does not know answers 401
  "Invalid credentials in Authorization header". A token given to
  ``add_token`` reads the private datasets of its user and organizations.
  Datasets are not listed, written through the API or announced to webhooks;
  their tags are the README front-matter ``tags`` plus ``region:us``.
  Recorded requests and injections say ``repo_type`` ("space", "dataset").
* Listings and trees are paged by an opaque ``cursor`` query parameter and a
  ``Link: <absolute url>; rel="next"`` header. The default listing order is by
  id; ``sort`` (``likes``, ``lastModified``, ``createdAt``, ``trendingScore``)
  is descending unless ``direction=1``. ``limit`` caps the total. Unknown
  ``expand`` or ``sort`` values get a 400, like the real Hub.
* Without ``expand``/``full`` a listing item has ``_id, id, author, likes,
  private, sdk, tags, createdAt`` only; ask for the rest. ``host`` is accepted
  as an ``expand`` value and is always part of ``space_info``.
* Tags are per revision: the README front-matter ``tags`` followed by the sdk
  (``docker``) and ``region:us``, unless ``put_space(tags=[...])`` gives them
  verbatim. ``cardData`` is the parsed front-matter mapping (absent when the
  README has none or it does not parse as a YAML mapping).
* Commit times come from a deterministic clock: 2025-01-01T00:00:00Z plus one
  second per commit, across the whole stub. Shas are deterministic too.
* Blob ids and ETags are git blob shas of the content; tree ids are derived
  from the children. Sizes are ``len(bytes)`` whatever the bytes are.

Everything is in memory and guarded by one lock; the server answers from
daemon threads, so a test can mutate the stub while a client is paging.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import json
import queue
import re
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit
from urllib.request import Request, urlopen

import yaml

__all__ = ["Delivery", "HubStub", "Injection", "RecordedRequest", "RUNTIME_STAGES", "git_blob_oid"]

RUNTIME_STAGES = (
    "NO_APP_FILE",
    "CONFIG_ERROR",
    "BUILDING",
    "BUILD_ERROR",
    "RUNNING",
    "RUNNING_BUILDING",
    "RUNTIME_ERROR",
    "DELETING",
    "STOPPED",
    "PAUSED",
    "APP_STARTING",
    "RUNNING_APP_STARTING",
    "SLEEPING",
)
_SERVING_STAGES = {"RUNNING", "RUNNING_BUILDING", "RUNNING_APP_STARTING"}

KINDS = (
    "list", "info", "tree", "paths_info", "resolve", "whoami", "create", "delete", "move", "preupload", "commit",
    "lfs", "variables", "secrets", "xet", "validate_yaml", "oauth", "unknown",
)
LFS_THRESHOLD = 10 * 1024 * 1024  # the Hub's: larger files go to LFS
# What the Hub commits first in a new Space.
_GITATTRIBUTES = (
    "*.7z filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
    "*.pt filter=lfs diff=lfs merge=lfs -text\n*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
    "*.zip filter=lfs diff=lfs merge=lfs -text\n"
)
_WRITE_ROLES = ("admin", "write")
WEBHOOK_VERSION = 3

# Fields a listing item or space_info may carry (the `expand` vocabulary of
# huggingface_hub 2.4's ExpandSpaceProperty_T, plus `host`).
_EXPANDABLE = frozenset(
    {
        "author",
        "cardData",
        "createdAt",
        "datasets",
        "disabled",
        "host",
        "lastModified",
        "likes",
        "models",
        "private",
        "region",
        "resourceGroup",
        "runtime",
        "sdk",
        "sha",
        "siblings",
        "subdomain",
        "tags",
        "trendingScore",
        "usedStorage",
    }
)
_DEFAULT_LIST_FIELDS = ("author", "likes", "private", "sdk", "tags", "createdAt")
_FULL_FIELDS = (
    "author",
    "sha",
    "lastModified",
    "createdAt",
    "private",
    "gated",
    "disabled",
    "likes",
    "sdk",
    "tags",
    "cardData",
    "siblings",
    "runtime",
    "subdomain",
    "host",
    "models",
    "datasets",
    "trendingScore",
    "usedStorage",
    "region",
)
_SORTS = {
    "likes": lambda sp: sp.likes,
    "lastModified": lambda sp: sp.head_revision.date,
    "createdAt": lambda sp: sp.created_at,
    "trendingScore": lambda sp: sp.trending_score,
}

# huggingface_hub 2.4's ExpandDatasetProperty_T, and what dataset_info answers without `expand`.
_DATASET_EXPANDABLE = frozenset(
    {
        "author", "cardData", "citation", "createdAt", "description", "disabled", "downloads", "downloadsAllTime",
        "gated", "lastModified", "likes", "mainSize", "paperswithcode_id", "private", "resourceGroup", "sha",
        "siblings", "tags", "trendingScore", "usedStorage",
    }
)
_DATASET_FULL_FIELDS = (
    "author", "sha", "lastModified", "createdAt", "private", "gated", "disabled", "downloads", "likes", "tags",
    "cardData", "siblings", "usedStorage",
)

_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_SHORT_SHA = re.compile(r"[0-9a-f]{7,40}")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(?:(.*?)\r?\n)?---[ \t]*(?:\r?\n|\Z)", re.S)
_CLOCK_START = datetime(2025, 1, 1, tzinfo=timezone.utc).timestamp()
_JSON = "application/json; charset=utf-8"
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def git_blob_oid(data: bytes) -> str:
    """The git blob sha1 of ``data``: what the Hub reports as ``blobId``/``oid`` and serves as ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(ts * 1000) % 1000:03d}Z"


def _timestamp(value: datetime | str | float | int) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.timestamp()


def _header_safe(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii").replace("\r", " ").replace("\n", " ")


def _subdomain(repo_id: str) -> str:
    return re.sub(r"[^a-z0-9]", "-", repo_id.lower())


def _repo_type(path: str) -> str | None:
    """Which kind of repo a request path is about ("space", "dataset"), or None for the other routes."""
    for prefix, repo_type in (("/api/spaces/", "space"), ("/spaces/", "space"), ("/api/datasets/", "dataset"),
                              ("/datasets/", "dataset")):
        if path.startswith(prefix):
            return repo_type
    return None


def _encode_cursor(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")


def _decode_cursor(token: str) -> dict:
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("cursor is not an object")
    return data


def _parse_front_matter(readme: bytes) -> tuple[dict | None, list[str]]:
    """(cardData, tags) from a README's YAML front-matter; (None, []) when absent or unparsable."""
    try:
        text = readme.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None, []
    match = _FRONT_MATTER.match(text)
    if match is None:
        return None, []
    try:
        data = yaml.load(match.group(1) or "", Loader=_YAML_LOADER)
    except Exception:  # any YAML error, recursion, ... : the Hub just ignores the card
        return None, []
    if not isinstance(data, dict):
        return None, []
    try:
        # What the client gets is JSON: dates become strings, odd keys disqualify the card.
        card = json.loads(json.dumps(data, default=str, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return None, []
    raw_tags = card.get("tags")
    if isinstance(raw_tags, str):
        raw_tags = [raw_tags]
    tags = [t for t in raw_tags if isinstance(t, str)] if isinstance(raw_tags, list) else []
    return card, list(dict.fromkeys(tags))


@dataclass(frozen=True)
class _Blob:
    data: bytes
    oid: str
    lfs: str | None = None  # sha256 of the content when it was uploaded through LFS


@dataclass
class _Revision:
    sha: str
    date: float
    title: str
    files: dict[str, _Blob]
    tags: list[str]
    card_data: dict | None
    # path -> (commit sha, title, date) of the commit that last changed it
    last_commit: dict[str, tuple[str, str, float]]
    _tree: dict | None = None

    @property
    def paths(self) -> list[str]:
        return sorted(self.files)

    def tree(self) -> dict[str, dict]:
        """Every file and directory path -> entry (without size lies); built once per revision."""
        if self._tree is not None:
            return self._tree
        entries: dict[str, dict] = {}
        children: dict[str, set[str]] = {"": set()}
        for path, blob in self.files.items():
            parts = path.split("/")
            for depth in range(1, len(parts)):
                parent, current = "/".join(parts[: depth - 1]), "/".join(parts[:depth])
                children.setdefault(parent, set()).add(current)
                children.setdefault(current, set())
            children.setdefault("/".join(parts[:-1]), set()).add(path)
            commit = self.last_commit[path]
            entries[path] = {"type": "file", "oid": blob.oid, "size": len(blob.data), "path": path, "_commit": commit}
            if blob.lfs is not None:
                entries[path]["lfs"] = {"oid": blob.lfs, "size": len(blob.data), "pointerSize": 134}

        def build(directory: str) -> tuple[str, tuple[str, str, float] | None]:
            lines, newest = [], None
            for child in sorted(children[directory]):
                if child in entries:
                    oid, commit = entries[child]["oid"], entries[child]["_commit"]
                    kind = "blob"
                else:
                    oid, commit = build(child)
                    kind = "tree"
                lines.append(f"{kind} {child.rsplit('/', 1)[-1]} {oid}\n")
                if commit is not None and (newest is None or commit[2] > newest[2]):
                    newest = commit
            oid = hashlib.sha1(("tree\n" + "".join(lines)).encode()).hexdigest()
            if directory:
                entries[directory] = {"type": "directory", "oid": oid, "size": 0, "path": directory, "_commit": newest}
            return oid, newest

        build("")
        self._tree = {"entries": entries, "children": {k: sorted(v) for k, v in children.items()}}
        return self._tree


@dataclass
class _Space:
    repo_id: str
    mongo_id: str
    sdk: str
    likes: int
    private: bool
    disabled: bool
    stage: str
    hardware: str
    created_at: float
    trending_score: int
    revisions: dict[str, _Revision] = field(default_factory=dict)
    host: str | None = None  # where the Space's app answers; default https://{subdomain}.hf.space
    history: list[str] = field(default_factory=list)  # shas, oldest first

    @property
    def author(self) -> str:
        return self.repo_id.split("/", 1)[0]

    @property
    def head_revision(self) -> _Revision:
        return self.revisions[self.history[-1]]


@dataclass
class _Dataset:
    repo_id: str
    mongo_id: str
    private: bool
    created_at: float
    likes: int = 0
    downloads: int = 0
    revisions: dict[str, _Revision] = field(default_factory=dict)
    history: list[str] = field(default_factory=list)  # shas, oldest first

    @property
    def author(self) -> str:
        return self.repo_id.split("/", 1)[0]

    @property
    def head_revision(self) -> _Revision:
        return self.revisions[self.history[-1]]


@dataclass
class RecordedRequest:
    """One request the stub answered. ``query`` maps each parameter to all its values."""

    method: str
    path: str
    query: dict[str, list[str]]
    kind: str
    repo_id: str | None
    headers: dict[str, str]
    status: int | None = None
    injected: bool = False
    received_at: float = 0.0  # time.monotonic() when the request arrived
    in_flight: int = 0  # requests of its kind being answered when it arrived, itself included
    repo_type: str | None = None  # "space" or "dataset" for the repo routes


@dataclass
class Injection:
    """A fault to serve instead of the real answer; see ``HubStub.inject``."""

    match: str | Callable[[RecordedRequest], bool]
    status: int | None
    remaining: int | None
    retry_after: int | str | None = None
    body: bytes | str | dict | None = None
    headers: Mapping[str, str] | None = None
    repo_id: str | None = None
    method: str | None = None
    delay: float = 0.0
    hits: int = 0
    repo_type: str | None = None

    def matches(self, request: RecordedRequest) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.repo_id is not None and request.repo_id != self.repo_id:
            return False
        if self.repo_type is not None and request.repo_type != self.repo_type:
            return False
        if self.method is not None and request.method != self.method.upper():
            return False
        if callable(self.match):
            return bool(self.match(request))
        return self.match == request.kind


@dataclass
class Delivery:
    """One webhook POST the stand-in made: what it sent, and what came back (``status`` None: no answer)."""

    webhook_id: str
    url: str
    payload: dict
    status: int | None = None
    error: str | None = None


@dataclass
class _Webhook:
    id: str
    url: str
    secret: str | None


@dataclass
class _Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes | memoryview = b""
    content_length: int | None = None  # overrides len(body), for HEAD size lies


def _json_response(status: int, payload: Any, headers: Iterable[tuple[str, str]] = ()) -> _Response:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return _Response(status, [("Content-Type", _JSON), *headers], body)


def _error(status: int, message: str, code: str | None = None, headers: Iterable[tuple[str, str]] = ()) -> _Response:
    extra = [("X-Error-Message", _header_safe(message))]
    if code is not None:
        extra.append(("X-Error-Code", code))
    return _json_response(status, {"error": message}, [*extra, *headers])


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's pooled httpx2 session expects
    # Headers and body go out in separate writes: without TCP_NODELAY each response
    # stalls ~40 ms on Nagle + delayed ACK.
    disable_nagle_algorithm = True
    server_version = "HubStub/1.0"
    stub: HubStub

    def setup(self) -> None:
        super().setup()
        self.stub._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.stub._track(self.connection, add=False)

    def _dispatch(self) -> None:
        self.stub._serve(self)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


class HubStub:
    """An in-memory Hugging Face Hub (Spaces, and dataset repos to read) served over real HTTP on 127.0.0.1.

    Invariants: every commit gets a new deterministic 40-hex sha and every old
    revision stays downloadable; listings never show private Spaces; every
    request answered (injected faults included) is in ``requests`` before its
    response is sent.
    """

    def __init__(self, *, page_size: int = 20, tree_page_size: int | None = None,
                 lfs_threshold: int = LFS_THRESHOLD) -> None:
        if page_size < 1:
            raise ValueError("page_size must be >= 1")
        self.page_size = page_size
        self.tree_page_size = tree_page_size or page_size
        self.lfs_threshold = lfs_threshold
        self.errors: list[str] = []  # tracebacks of stub bugs (answered as 500); tests should assert it is empty
        self._lock = threading.RLock()
        self._spaces: dict[str, _Space] = {}
        self._datasets: dict[str, _Dataset] = {}
        self._ids: list[str] = []  # sorted ids of all Spaces (private included)
        self._by_tag: dict[str, list[str]] = {}  # tag -> sorted ids whose head revision has it
        self._version = 0  # bumped on every mutation; invalidates _sort_cache
        self._sort_cache: dict[tuple[str, bool], tuple[int, list[tuple[float, str]]]] = {}
        self._card_cache: dict[str, tuple[dict | None, list[str]]] = {}
        self._commits = 0
        self._tokens: dict[str, dict] = {}
        self._size_lies: dict[tuple[str, str], int] = {}
        self._requests: list[RecordedRequest] = []
        self._in_flight: dict[str, int] = {}  # route kind -> requests being answered
        self._injections: list[Injection] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._lfs: dict[str, bytes] = {}  # sha256 -> content uploaded through the LFS batch API
        self._variables: dict[str, dict[str, dict]] = {}  # repo id -> key -> {value, description, updatedAt}
        self._secrets: dict[str, dict[str, dict]] = {}  # repo id -> key -> {value, description, updatedAt}
        self._webhooks: list[_Webhook] = []
        self._deliveries: list[Delivery] = []
        self._outbox: queue.Queue = queue.Queue()
        self._courier: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> HubStub:
        """Bind 127.0.0.1 on an OS-chosen port and serve from a daemon thread."""
        if self._server is not None:
            return self
        handler = type("HubStubHandler", (_Handler,), {"stub": self})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        self._server = server
        from tests.support.hub_oauth import OAuthProvider

        self.oauth = OAuthProvider(self.url)
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and drop kept-alive connections (the client's pool then reconnects elsewhere)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        courier, self._courier = self._courier, None
        if courier is not None:
            self._outbox.put(None)
            courier.join(timeout=15)

    def __enter__(self) -> HubStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: pass it as ``endpoint=``."""
        if self._server is None:
            raise RuntimeError("HubStub is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # ------------------------------------------------------------------ content

    def put_space(
        self,
        repo_id: str,
        files: Mapping[str, bytes | str] | None = None,
        *,
        tags: Iterable[str] | None = None,
        card_data: Mapping[str, Any] | None = None,
        sdk: str | None = None,
        likes: int | None = None,
        private: bool | None = None,
        runtime_stage: str | None = None,
        hardware: str | None = None,
        disabled: bool | None = None,
        trending_score: int | None = None,
        created_at: datetime | str | float | None = None,
        last_modified: datetime | str | float | None = None,
        commit_message: str | None = None,
    ) -> str:
        """Create the Space or commit a new revision of it; return the new 40-hex sha.

        ``files`` is the complete tree of the new revision (``None`` keeps the
        previous tree, or an empty one for a new Space). ``tags``/``card_data``
        left ``None`` are derived from the README front-matter (YAML parsing is
        the main cost of a commit: give both to skip it). Other keyword
        arguments left ``None`` keep the current value (defaults for a new
        Space: sdk ``docker``, 0 likes, public, ``RUNNING`` on ``cpu-basic``).
        """
        if not _REPO_ID.fullmatch(repo_id):
            raise ValueError(f"invalid Space id {repo_id!r}")
        new_files = None if files is None else self._tree_files(files)
        with self._lock:
            self._commits += 1
            date = _timestamp(last_modified) if last_modified is not None else _CLOCK_START + self._commits
            space = self._spaces.get(repo_id)
            if space is None:
                space = _Space(
                    repo_id=repo_id,
                    mongo_id=hashlib.sha1(f"space:{repo_id}:{self._commits}".encode()).hexdigest()[:24],
                    sdk="docker",
                    likes=0,
                    private=False,
                    disabled=False,
                    stage="RUNNING",
                    hardware="cpu-basic",
                    created_at=_timestamp(created_at) if created_at is not None else date,
                    trending_score=0,
                )
                previous = None
            else:
                previous = space.head_revision
                self._unindex_tags(space)
                if created_at is not None:
                    space.created_at = _timestamp(created_at)
            for name, value in (
                ("sdk", sdk),
                ("likes", likes),
                ("private", private),
                ("stage", runtime_stage),
                ("hardware", hardware),
                ("disabled", disabled),
                ("trending_score", trending_score),
            ):
                if value is not None:
                    setattr(space, name, value)
            if new_files is None:
                new_files = dict(previous.files) if previous else {}

            readme = new_files.get("README.md")
            needs_card = readme is not None and (tags is None or card_data is None)
            derived_card, fm_tags = self._card(readme) if needs_card else (None, [])
            if tags is None:
                final_tags = list(dict.fromkeys([*fm_tags, space.sdk, "region:us"]))
            else:
                final_tags = list(tags)
            final_card = derived_card if card_data is None else json.loads(json.dumps(dict(card_data)))

            title = commit_message or ("initial commit" if previous is None else f"commit {len(space.history) + 1}")
            revision = self._new_revision(repo_id, previous, new_files, final_tags, final_card, date, title)
            sha = revision.sha
            space.revisions[sha] = revision
            space.history.append(sha)
            created = repo_id not in self._spaces
            if created:
                self._spaces[repo_id] = space
                bisect.insort(self._ids, repo_id)
            self._index_tags(space)
            self._version += 1
            if created:
                self._notify("create", "repo", space)
            else:
                self._notify("update", "repo.content", space, old_sha=previous.sha)
            return sha

    def put_dataset(
        self,
        repo_id: str,
        files: Mapping[str, bytes | str] | None = None,
        *,
        private: bool | None = None,
        tags: Iterable[str] | None = None,
        card_data: Mapping[str, Any] | None = None,
        likes: int | None = None,
        downloads: int | None = None,
        last_modified: datetime | str | float | None = None,
        commit_message: str | None = None,
    ) -> str:
        """Create the dataset repo or commit a new revision of it; return the new 40-hex sha.

        As ``put_space``: ``files`` is the complete tree of the new revision (``None`` keeps the previous one),
        every revision stays readable by its sha, and ``tags``/``card_data`` left ``None`` come from the README
        front-matter (tags plus ``region:us``). A new dataset is public unless ``private``.
        """
        if not _REPO_ID.fullmatch(repo_id):
            raise ValueError(f"invalid dataset id {repo_id!r}")
        new_files = None if files is None else self._tree_files(files)
        with self._lock:
            self._commits += 1
            date = _timestamp(last_modified) if last_modified is not None else _CLOCK_START + self._commits
            dataset = self._datasets.get(repo_id)
            if dataset is None:
                dataset = _Dataset(
                    repo_id=repo_id,
                    mongo_id=hashlib.sha1(f"dataset:{repo_id}:{self._commits}".encode()).hexdigest()[:24],
                    private=False,
                    created_at=date,
                )
            previous = dataset.head_revision if dataset.history else None
            for name, value in (("private", private), ("likes", likes), ("downloads", downloads)):
                if value is not None:
                    setattr(dataset, name, value)
            if new_files is None:
                new_files = dict(previous.files) if previous else {}
            readme = new_files.get("README.md")
            derived_card, fm_tags = self._card(readme) if readme is not None else (None, [])
            final_tags = list(tags) if tags is not None else list(dict.fromkeys([*fm_tags, "region:us"]))
            final_card = derived_card if card_data is None else json.loads(json.dumps(dict(card_data)))
            title = commit_message or ("initial commit" if previous is None else f"commit {len(dataset.history) + 1}")
            revision = self._new_revision(f"datasets/{repo_id}", previous, new_files, final_tags, final_card, date,
                                          title)
            dataset.revisions[revision.sha] = revision
            dataset.history.append(revision.sha)
            self._datasets[repo_id] = dataset
            self._version += 1
            return revision.sha

    def dataset_head(self, repo_id: str) -> str:
        """The sha the dataset's ``main`` points at."""
        with self._lock:
            return self._datasets[repo_id].history[-1]

    def dataset_revisions(self, repo_id: str) -> list[str]:
        """All shas of the dataset, oldest first."""
        with self._lock:
            return list(self._datasets[repo_id].history)

    def set_dataset_private(self, repo_id: str, private: bool = True) -> None:
        with self._lock:
            self._datasets[repo_id].private = private
            self._version += 1

    def delete_dataset(self, repo_id: str) -> None:
        """Remove the dataset and all its revisions (every route then answers as for a missing repo)."""
        with self._lock:
            del self._datasets[repo_id]
            self._version += 1

    def reset_space(self, repo_id: str, sha: str) -> None:
        """Force-push ``main`` back to an earlier commit ``sha`` of this Space (no new commit is made)."""
        with self._lock:
            space = self._spaces[repo_id]
            if sha not in space.revisions:
                raise ValueError(f"{sha} is not a commit of {repo_id}")
            old = space.history[-1]
            self._unindex_tags(space)
            space.history.append(sha)
            self._index_tags(space)
            self._version += 1
            self._notify("update", "repo.content", space, old_sha=old)

    def delete_space(self, repo_id: str) -> None:
        """Remove the Space and all its revisions (every route then answers RepoNotFound)."""
        with self._lock:
            space = self._spaces.pop(repo_id)
            self._unindex_tags(space)
            del self._ids[bisect.bisect_left(self._ids, repo_id)]
            self._variables.pop(repo_id, None)
            self._secrets.pop(repo_id, None)
            self._version += 1
            self._notify("delete", "repo", space)

    def move_space(self, from_id: str, to_id: str) -> None:
        """Rename a Space (``HfApi.move_repo``): same history and settings under the new id; the old id is gone."""
        if not _REPO_ID.fullmatch(to_id):
            raise ValueError(f"invalid Space id {to_id!r}")
        with self._lock:
            if to_id in self._spaces:
                raise ValueError(f"{to_id} already exists")
            space = self._spaces.pop(from_id)
            self._unindex_tags(space)
            del self._ids[bisect.bisect_left(self._ids, from_id)]
            space.repo_id = to_id
            self._spaces[to_id] = space
            bisect.insort(self._ids, to_id)
            self._index_tags(space)
            for settings in (self._variables, self._secrets):
                if from_id in settings:
                    settings[to_id] = settings.pop(from_id)
            self._version += 1
            self._notify("move", "repo", space, old_name=from_id)

    def repo_object_id(self, repo_id: str) -> str:
        """The Space's repository object id (the ``_id`` of ``space_info``; webhooks send it as ``repo.id``)."""
        with self._lock:
            return self._spaces[repo_id].mongo_id

    def update_space(
        self,
        repo_id: str,
        *,
        likes: int | None = None,
        private: bool | None = None,
        runtime_stage: str | None = None,
        hardware: str | None = None,
        disabled: bool | None = None,
        trending_score: int | None = None,
        host: str | None = None,
    ) -> None:
        """Change Space metadata without a commit (the sha stays the same); `host` points the Space at a real server."""
        with self._lock:
            space = self._spaces[repo_id]
            visibility_changed = private is not None and private != space.private
            for name, value in (
                ("likes", likes),
                ("private", private),
                ("stage", runtime_stage),
                ("hardware", hardware),
                ("disabled", disabled),
                ("trending_score", trending_score),
                ("host", host),
            ):
                if value is not None:
                    setattr(space, name, value)
            self._version += 1
            if visibility_changed:
                self._notify("update", "repo.config", space)

    def set_private(self, repo_id: str, private: bool = True) -> None:
        self.update_space(repo_id, private=private)

    def set_runtime(self, repo_id: str, stage: str, *, hardware: str | None = None) -> None:
        """Set ``runtime.stage`` (any string is accepted; see ``RUNTIME_STAGES`` for the real ones)."""
        self.update_space(repo_id, runtime_stage=stage, hardware=hardware)

    def set_likes(self, repo_id: str, likes: int) -> None:
        self.update_space(repo_id, likes=likes)

    def set_disabled(self, repo_id: str, disabled: bool = True) -> None:
        self.update_space(repo_id, disabled=disabled)

    def set_file_size_lie(self, repo_id: str, path: str, size: int | None) -> None:
        """Report ``size`` for this file in siblings, trees, paths-info and HEAD ``Content-Length``.

        A GET still sends the real bytes with their real length, as a
        misbehaving Hub or proxy would; ``size=None`` stops lying.
        """
        with self._lock:
            if size is None:
                self._size_lies.pop((repo_id, path), None)
            else:
                self._size_lies[(repo_id, path)] = size

    def head(self, repo_id: str) -> str:
        """The sha ``main`` points at."""
        with self._lock:
            return self._spaces[repo_id].history[-1]

    def revisions(self, repo_id: str) -> list[str]:
        """All shas of the Space, oldest first."""
        with self._lock:
            return list(self._spaces[repo_id].history)

    def space_ids(self) -> list[str]:
        with self._lock:
            return list(self._ids)

    def seed_from_corpus(
        self, corpus: Path | str, *, owner: str = "openenv", as_pushed: bool = True, **put_kwargs: Any
    ) -> dict[str, str]:
        """One Space ``{owner}/{dirname}`` per sub-directory, with every file in it; returns id -> sha.

        With ``as_pushed`` (the default) a README with no front-matter at all
        gets ``tags: [openenv]`` front-matter, as ``openenv push`` writes it;
        READMEs that already have front-matter are kept as they are (and may
        lack the tag, like on the real Hub).
        """
        shas = {}
        for directory in sorted(p for p in Path(corpus).iterdir() if p.is_dir()):
            files = {
                f.relative_to(directory).as_posix(): f.read_bytes() for f in sorted(directory.rglob("*")) if f.is_file()
            }
            readme = files.get("README.md")
            if as_pushed and readme is not None and not readme.startswith(b"---"):
                files["README.md"] = b"---\ntags:\n- openenv\n---\n" + readme
            repo_id = f"{owner}/{directory.name}"
            shas[repo_id] = self.put_space(repo_id, files, **put_kwargs)
        return shas

    def add_token(self, token: str, name: str, *, orgs: Iterable[str] = (), role: str = "write") -> None:
        """Make ``GET /api/whoami-v2`` with ``Authorization: Bearer {token}`` answer as user ``name``,
        a member of ``orgs`` with ``roleInOrg`` ``role`` (admin, write, contributor or read)."""
        with self._lock:
            self._tokens[token] = {
                "type": "user",
                "id": hashlib.sha1(f"user:{name}".encode()).hexdigest()[:24],
                "name": name,
                "fullname": name,
                "email": None,
                "emailVerified": False,
                "isPro": False,
                "orgs": [
                    {
                        "type": "org",
                        "id": hashlib.sha1(f"org:{org}".encode()).hexdigest()[:24],
                        "name": org,
                        "fullname": org,
                        "roleInOrg": role,
                    }
                    for org in orgs
                ],
                "auth": {"type": "access_token", "accessToken": {"displayName": "hubstub", "role": "read"}},
            }

    def space_variables(self, repo_id: str) -> dict[str, str]:
        """The Space's variables, key -> value."""
        with self._lock:
            return {k: v["value"] for k, v in self._variables.get(repo_id, {}).items()}

    def space_secrets(self, repo_id: str) -> dict[str, str]:
        """The Space's secrets, key -> value (what the Space would get; the HTTP API never returns values)."""
        with self._lock:
            return {k: v["value"] for k, v in self._secrets.get(repo_id, {}).items()}

    # ------------------------------------------------------------------ webhooks

    def add_webhook(self, url: str, secret: str | None = None) -> str:
        """Deliver every repo event from now on to ``url`` (POST, JSON); returns the webhook's id."""
        with self._lock:
            hook_id = hashlib.sha1(f"webhook:{len(self._webhooks)}:{url}".encode()).hexdigest()[:24]
            self._webhooks.append(_Webhook(hook_id, url, secret))
            if self._courier is None:
                self._courier = threading.Thread(target=self._deliver_loop, daemon=True)
                self._courier.start()
            return hook_id

    def remove_webhook(self, hook_id: str) -> None:
        with self._lock:
            self._webhooks = [w for w in self._webhooks if w.id != hook_id]

    @property
    def deliveries(self) -> list[Delivery]:
        """Every delivery attempt so far, in the order the events happened."""
        with self._lock:
            return list(self._deliveries)

    def wait_for_deliveries(self, count: int, timeout: float = 10.0) -> list[Delivery]:
        """Block until at least ``count`` deliveries were attempted (answered or failed); return them all."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                done = [d for d in self._deliveries if d.status is not None or d.error is not None]
                if len(done) >= count:
                    return list(self._deliveries)
            time.sleep(0.02)
        raise TimeoutError(f"{len(self.deliveries)} webhook deliveries attempted, {count} expected")

    def _notify(self, action: str, scope: str, space: _Space, *, old_sha: str | None = None,
                old_name: str | None = None) -> None:
        """Queue the event for every webhook (called with the lock held, right after the change)."""
        if not self._webhooks:
            return
        base = self.url if self._server is not None else "http://127.0.0.1"
        head = space.history[-1] if space.history else None
        repo: dict[str, Any] = {
            "type": "space", "name": old_name or space.repo_id, "id": space.mongo_id, "private": space.private,
            "url": {"web": f"{base}/spaces/{old_name or space.repo_id}",
                    "api": f"{base}/api/spaces/{old_name or space.repo_id}"},
            "owner": {"id": hashlib.sha1(f"user:{space.author}".encode()).hexdigest()[:24]},
            "headSha": head, "subdomain": _subdomain(space.repo_id),
        }
        for hook in self._webhooks:
            payload: dict[str, Any] = {
                "event": {"action": action, "scope": scope}, "repo": repo,
                "webhook": {"id": hook.id, "version": WEBHOOK_VERSION},
            }
            if scope == "repo.content":
                payload["updatedRefs"] = [{"ref": "refs/heads/main", "oldSha": old_sha, "newSha": head}]
            if action == "move":
                payload["movedTo"] = {"name": space.repo_id, "owner": repo["owner"]}
            delivery = Delivery(hook.id, hook.url, json.loads(json.dumps(payload)))
            self._deliveries.append(delivery)
            self._outbox.put((hook, delivery))

    def _deliver_loop(self) -> None:
        while True:
            item = self._outbox.get()
            if item is None:
                return
            hook, delivery = item
            headers = {"Content-Type": "application/json", "User-Agent": "HubStub-Webhooks/1.0"}
            if hook.secret is not None:
                headers["X-Webhook-Secret"] = hook.secret
            request = Request(hook.url, data=json.dumps(delivery.payload).encode(), headers=headers, method="POST")
            try:
                with urlopen(request, timeout=10) as response:
                    status = response.status
                error = None
            except URLError as exc:
                status = getattr(exc, "code", None)
                error = None if status is not None else str(exc.reason)
            except OSError as exc:
                status, error = None, str(exc)
            with self._lock:
                delivery.status, delivery.error = status, error

    # ------------------------------------------------------------------ requests and faults

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request answered so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def max_in_flight(self, kind: str) -> int:
        """The most requests of a route kind that were being answered at once."""
        return max((r.in_flight for r in self.requests if r.kind == kind), default=0)

    def reset_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def count(
        self,
        kind: str | None = None,
        *,
        method: str | None = None,
        repo_id: str | None = None,
        injected: bool | None = None,
        repo_type: str | None = None,
    ) -> int:
        """How many recorded requests match all the given criteria."""
        return sum(
            1
            for r in self.requests
            if (kind is None or r.kind == kind)
            and (method is None or r.method == method.upper())
            and (repo_id is None or r.repo_id == repo_id)
            and (injected is None or r.injected == injected)
            and (repo_type is None or r.repo_type == repo_type)
        )

    def inject(
        self,
        match: str | Callable[[RecordedRequest], bool],
        *,
        status: int | None = 503,
        times: int | None = 1,
        retry_after: int | str | None = None,
        body: bytes | str | dict | None = None,
        headers: Mapping[str, str] | None = None,
        repo_id: str | None = None,
        method: str | None = None,
        delay: float = 0.0,
        repo_type: str | None = None,
    ) -> Injection:
        """Answer the next ``times`` matching requests (``None``: all of them) with ``status``.

        ``match`` is a route kind (``list``, ``info``, ``tree``, ``paths_info``,
        ``resolve``, ``whoami``, ``unknown``) or a predicate on the
        ``RecordedRequest``; ``repo_id``, ``method`` and ``repo_type`` (``space``,
        ``dataset``) narrow it further.
        ``retry_after`` becomes the ``Retry-After`` header; ``body`` defaults
        to ``{"error": "injected <status>"}``. ``delay`` sleeps before
        answering; with ``status=None`` the real answer follows the delay.
        Injections are tried in the order they were added. The returned
        ``Injection`` counts its ``hits``.
        """
        if isinstance(match, str) and match not in KINDS:
            raise ValueError(f"unknown route kind {match!r}; expected one of {KINDS}")
        injection = Injection(match, status, times, retry_after, body, headers, repo_id, method, delay,
                              repo_type=repo_type)
        with self._lock:
            self._injections.append(injection)
        return injection

    def clear_injections(self) -> None:
        with self._lock:
            self._injections.clear()

    # ------------------------------------------------------------------ internals: state

    @staticmethod
    def _check_path(path: str) -> str:
        parts = path.split("/")
        if not path or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"invalid file path {path!r}")
        return path

    @staticmethod
    def _blob(value: bytes | str | _Blob) -> _Blob:
        if isinstance(value, _Blob):
            return value
        data = value.encode() if isinstance(value, str) else bytes(value)
        return _Blob(data, git_blob_oid(data))

    def _tree_files(self, files: Mapping[str, bytes | str]) -> dict[str, _Blob]:
        """A revision's files, checked: valid paths, none used both as a file and a directory."""
        new_files = {self._check_path(p): self._blob(v) for p, v in files.items()}
        parents = {"/".join(p.split("/")[:k]) for p in new_files for k in range(1, p.count("/") + 1)}
        clash = sorted(parents & set(new_files))
        if clash:
            raise ValueError(f"paths used both as a file and a directory: {clash}")
        return new_files

    def _new_revision(self, key: str, previous: _Revision | None, files: dict[str, _Blob], tags: list[str],
                      card: dict | None, date: float, title: str) -> _Revision:
        """The next commit of a repo (``key`` names it; called with the lock held, after ``_commits`` moved on)."""
        digest = hashlib.sha1(f"{key}\n{self._commits}\n{previous.sha if previous else ''}\n".encode())
        for path in sorted(files):
            digest.update(f"{path}\0{files[path].oid}\n".encode())
        sha = digest.hexdigest()
        last_commit = {}
        for path, blob in files.items():
            if previous is not None and path in previous.files and previous.files[path].oid == blob.oid:
                last_commit[path] = previous.last_commit[path]
            else:
                last_commit[path] = (sha, title, date)
        return _Revision(sha, date, title, files, tags, card, last_commit)

    def _card(self, readme: _Blob) -> tuple[dict | None, list[str]]:
        cached = self._card_cache.get(readme.oid)
        if cached is None:
            cached = self._card_cache[readme.oid] = _parse_front_matter(readme.data)
        return cached  # shared between revisions: never mutated

    def _index_tags(self, space: _Space) -> None:
        for tag in set(space.head_revision.tags):
            bisect.insort(self._by_tag.setdefault(tag, []), space.repo_id)

    def _unindex_tags(self, space: _Space) -> None:
        for tag in set(space.head_revision.tags):
            ids = self._by_tag[tag]
            del ids[bisect.bisect_left(ids, space.repo_id)]
            if not ids:
                del self._by_tag[tag]

    def _sorted_entries(self, sort: str, descending: bool) -> list[tuple[float, str]]:
        cached = self._sort_cache.get((sort, descending))
        if cached is not None and cached[0] == self._version:
            return cached[1]
        key = _SORTS[sort]
        sign = -1 if descending else 1
        entries = sorted((sign * float(key(sp)), sp.repo_id) for sp in self._spaces.values())
        self._sort_cache[(sort, descending)] = (self._version, entries)
        return entries

    def _visible(self, repo_id: str) -> _Space | None:
        space = self._spaces.get(repo_id)
        return None if space is None or space.private else space

    @staticmethod
    def _revision(space: _Space, rev: str) -> _Revision | None:
        if rev in ("main", "refs/heads/main"):
            return space.head_revision
        if rev in space.revisions:
            return space.revisions[rev]
        if _SHORT_SHA.fullmatch(rev):
            found = [sha for sha in space.history if sha.startswith(rev)]
            if len(found) == 1:
                return space.revisions[found[0]]
        return None

    def _siblings(self, repo_id: str, revision: _Revision, *, blobs: bool, lfs: bool = False) -> list[dict[str, Any]]:
        """The `siblings` of a repo's info: its files, with size and blob id when asked (`blobs`), and LFS pointers
        (`lfs`: the dataset routes give them; the Space routes of this stand-in never did)."""
        siblings = []
        for path in revision.paths:
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                blob = revision.files[path]
                sibling["size"] = self._size(repo_id, path, len(blob.data))
                sibling["blobId"] = blob.oid
                if lfs and blob.lfs is not None:
                    sibling["lfs"] = {"sha256": blob.lfs, "size": len(blob.data), "pointerSize": 134}
            siblings.append(sibling)
        return siblings

    def _size(self, repo_id: str, path: str, real: int) -> int:
        return self._size_lies.get((repo_id, path), real)

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    # ------------------------------------------------------------------ internals: HTTP

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        received_at = time.monotonic()
        method = handler.command
        split = urlsplit(handler.path)
        pairs = parse_qsl(split.query, keep_blank_values=True)
        query: dict[str, list[str]] = {}
        for key, value in pairs:
            query.setdefault(key, []).append(value)
        if (handler.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            body = self._read_chunked(handler)  # what the client sends when it streams a file object
        else:
            length = int(handler.headers.get("Content-Length") or 0)
            body = handler.rfile.read(length) if length > 0 else b""
        kind, repo_id, answer = self._route(method, split.path, pairs, query, body, handler.headers)
        record = RecordedRequest(
            method=method,
            path=split.path,
            query=query,
            kind=kind,
            repo_id=repo_id,
            headers={k.lower(): v for k, v in handler.headers.items()},
            received_at=received_at,
            repo_type=_repo_type(split.path),
        )
        with self._lock:
            self._in_flight[kind] = record.in_flight = self._in_flight.get(kind, 0) + 1
            injection = next((i for i in self._injections if i.matches(record)), None)
            if injection is not None:
                injection.hits += 1
                if injection.remaining is not None:
                    injection.remaining -= 1
        if injection is not None and injection.delay:
            time.sleep(injection.delay)
        if injection is not None and injection.status is not None:
            response = self._injected(injection)
        else:
            try:
                with self._lock:
                    response = answer()
            except Exception:
                self.errors.append(traceback.format_exc())
                response = _error(500, "HubStub internal error (see stub.errors)")
        record.status = response.status
        record.injected = injection is not None
        with self._lock:
            self._requests.append(record)
            self._in_flight[kind] -= 1
        self._send(handler, method, response)

    @staticmethod
    def _read_chunked(handler: BaseHTTPRequestHandler) -> bytes:
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()

    @staticmethod
    def _injected(injection: Injection) -> _Response:
        status = injection.status
        assert status is not None
        headers = [(k, v) for k, v in (injection.headers or {}).items()]
        if injection.retry_after is not None:
            headers.append(("Retry-After", str(injection.retry_after)))
        body = injection.body
        if body is None:
            body = {"error": f"injected {status}"}
        if isinstance(body, dict):
            return _json_response(status, body, headers)
        data = body.encode() if isinstance(body, str) else body
        if not any(k.lower() == "content-type" for k, _ in headers):
            headers.append(("Content-Type", "text/plain; charset=utf-8"))
        return _Response(status, headers, data)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, method: str, response: _Response) -> None:
        try:
            handler.send_response(response.status)
            for key, value in response.headers:
                handler.send_header(key, value)
            length = response.content_length if response.content_length is not None else len(response.body)
            handler.send_header("Content-Length", str(length))
            handler.end_headers()
            if method != "HEAD" and response.body:
                view = memoryview(response.body)
                for start in range(0, len(view), 1 << 20):
                    handler.wfile.write(view[start : start + (1 << 20)])
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True

    def _route(
        self,
        method: str,
        raw_path: str,
        pairs: list[tuple[str, str]],
        query: dict[str, list[str]],
        body: bytes,
        headers: Mapping[str, str],
    ) -> tuple[str, str | None, Callable[[], _Response]]:
        segs = raw_path.split("/")[1:]
        if segs and segs[-1] == "" and len(segs) > 1:
            segs = segs[:-1]

        def only(allowed: tuple[str, ...], fn: Callable[[], _Response]) -> Callable[[], _Response]:
            if method in allowed:
                return fn
            return lambda: _error(405, f"method {method} not allowed")

        if segs == ["api", "whoami-v2"]:
            return "whoami", None, only(("GET",), lambda: self._whoami(headers))
        if segs[:1] == ["oauth"] or segs == [".well-known", "openid-configuration"]:  # sign-in (hub_oauth.py)
            return "oauth", None, lambda: _Response(*self.oauth.handle(method, segs, query, body, headers))
        if segs == ["api", "spaces"]:
            return "list", None, only(("GET",), lambda: self._list(raw_path, pairs, query))
        if len(segs) >= 4 and segs[:2] == ["api", "spaces"]:
            repo_id = f"{unquote(segs[2])}/{unquote(segs[3])}"
            tail = segs[4:]
            if not tail:
                return "info", repo_id, only(("GET",), lambda: self._info(repo_id, None, query))
            if tail[0] == "revision" and len(tail) == 2:
                rev = unquote(tail[1])
                return "info", repo_id, only(("GET",), lambda: self._info(repo_id, rev, query))
            if tail[0] == "tree" and len(tail) >= 2:
                rev = unquote(tail[1])
                path = "/".join(unquote(s) for s in tail[2:]).strip("/")
                return "tree", repo_id, only(("GET",), lambda: self._tree(raw_path, repo_id, rev, path, pairs, query))
            if tail[0] == "paths-info" and len(tail) == 2:
                rev = unquote(tail[1])
                return "paths_info", repo_id, only(("POST",), lambda: self._paths_info(repo_id, rev, body))
            if tail[0] == "preupload" and len(tail) == 2:
                rev = unquote(tail[1])
                return "preupload", repo_id, only(("POST",), lambda: self._preupload(headers, repo_id, rev, body))
            if tail[0] == "commit" and len(tail) == 2:
                rev = unquote(tail[1])
                return "commit", repo_id, only(("POST",), lambda: self._commit(headers, repo_id, rev, body, query))
            if tail in (["variables"], ["secrets"]):
                kind = tail[0]
                return kind, repo_id, only(("GET", "POST", "DELETE"),
                                           lambda: self._settings(kind, method, headers, repo_id, body))
            if tail[0] == "xet-write-token":
                return "xet", repo_id, lambda: _error(
                    501, "The Hub stand-in speaks LFS, not Xet: run the client with HF_HUB_DISABLE_XET=1")
        if len(segs) >= 3 and segs[:2] == ["api", "datasets"]:
            repo_id = "/".join(unquote(s) for s in segs[2:4])
            tail = segs[4:]
            if not tail or (tail[0] == "revision" and len(tail) == 2):
                rev = unquote(tail[1]) if tail else None
                return "info", repo_id, only(("GET",), lambda: self._dataset_info(repo_id, rev, query, headers))
            if tail[0] == "tree" and len(tail) >= 2:
                rev = unquote(tail[1])
                path = "/".join(unquote(s) for s in tail[2:]).strip("/")
                return "tree", repo_id, only(("GET",), lambda: self._tree(
                    raw_path, repo_id, rev, path, pairs, query, repo_type="dataset", headers=headers))
            if tail[0] == "paths-info" and len(tail) == 2:
                rev = unquote(tail[1])
                return "paths_info", repo_id, only(("POST",), lambda: self._paths_info(
                    repo_id, rev, body, repo_type="dataset", headers=headers))
        if len(segs) == 3 and segs[:2] == ["api", "spaces"]:
            repo_id = unquote(segs[2])
            missing = _error(404, f"Repository {repo_id} not found", "RepoNotFound")
            return "info", repo_id, only(("GET",), lambda: missing)
        if segs == ["api", "validate-yaml"]:
            return "validate_yaml", None, only(("POST",), lambda: self._validate_yaml(body))
        if segs[:3] == ["api", "repos", "create"] and len(segs) == 3:
            return "create", None, only(("POST",), lambda: self._create_repo(headers, body))
        if segs[:3] == ["api", "repos", "delete"] and len(segs) == 3:
            return "delete", None, only(("DELETE",), lambda: self._delete_repo(headers, body))
        if segs[:3] == ["api", "repos", "move"] and len(segs) == 3:
            return "move", None, only(("POST",), lambda: self._move_repo(headers, body))
        if len(segs) == 7 and segs[0] == "spaces" and segs[2].endswith(".git") and segs[3:] == [
                "info", "lfs", "objects", "batch"]:
            repo_id = f"{unquote(segs[1])}/{unquote(segs[2])[:-4]}"
            return "lfs", repo_id, only(("POST",), lambda: self._lfs_batch(headers, repo_id, body))
        if len(segs) == 2 and segs[0] == "lfs-upload":
            oid = segs[1]
            return "lfs", None, only(("PUT",), lambda: self._lfs_upload(oid, body))
        if len(segs) == 3 and segs[0] == "lfs-verify":
            repo_id = f"{unquote(segs[1])}/{unquote(segs[2])}"
            return "lfs", repo_id, only(("POST",), lambda: self._lfs_verify(repo_id, body))
        if len(segs) >= 6 and segs[0] in ("spaces", "datasets") and segs[3] == "resolve":
            repo_id = f"{unquote(segs[1])}/{unquote(segs[2])}"
            rev = unquote(segs[4])
            path = "/".join(unquote(s) for s in segs[5:])
            repo_type = "space" if segs[0] == "spaces" else "dataset"
            return "resolve", repo_id, only(("GET", "HEAD"), lambda: self._resolve(
                method, repo_id, rev, path, headers, repo_type=repo_type))
        return "unknown", None, lambda: _error(404, f"Sorry, we can't find the page you are looking for: {raw_path}")

    def _next_link(self, raw_path: str, pairs: list[tuple[str, str]], cursor: dict) -> tuple[str, str]:
        kept = [(k, v) for k, v in pairs if k != "cursor"]
        kept.append(("cursor", _encode_cursor(cursor)))
        return ("Link", f'<{self.url}{raw_path}?{urlencode(kept, quote_via=quote)}>; rel="next"')

    # ------------------------------------------------------------------ internals: routes

    def _list(self, raw_path: str, pairs: list[tuple[str, str]], query: dict[str, list[str]]) -> _Response:
        def last(name: str) -> str | None:
            values = query.get(name)
            return values[-1] if values else None

        filters = [f for f in query.get("filter", []) if f]
        search = (last("search") or "").lower()
        author = last("author")
        sort = last("sort")
        direction = last("direction")
        expand = query.get("expand", [])
        full = (last("full") or "").lower() in ("true", "1")
        try:
            limit = int(last("limit")) if last("limit") else None
            cursor = _decode_cursor(last("cursor")) if last("cursor") else {}
        except (ValueError, binascii.Error):
            return _error(400, "Invalid limit or cursor")
        if limit is not None and limit < 1:
            return _error(400, "limit must be a positive integer")
        unknown = [e for e in expand if e not in _EXPANDABLE]
        if unknown:
            return _error(400, f'"expand" must be one of {sorted(_EXPANDABLE)}; got {unknown}')
        if sort is not None and sort not in _SORTS:
            return _error(400, f'"sort" must be one of {sorted(_SORTS)}')
        if direction not in (None, "1", "-1"):
            return _error(400, '"direction" must be 1 or -1')
        fields: Iterable[str] = expand or (_FULL_FIELDS if full else _DEFAULT_LIST_FIELDS)
        remaining = cursor.get("left", limit)
        want = self.page_size if remaining is None else min(self.page_size, remaining)

        entries: list
        if sort is None:
            # Id order: walk a sorted id list (the rarest requested tag's, if any) from the cursor.
            entries = self._ids
            if filters:
                entries = min((self._by_tag.get(f, []) for f in filters), key=len)
            after = cursor.get("after")
            start = bisect.bisect_right(entries, after) if after is not None else 0
            end = len(entries)
            if author and not filters:
                # "owner/..." ids are contiguous in id order ("0" sorts right after "/").
                start = max(start, bisect.bisect_left(entries, author + "/"))
                end = bisect.bisect_left(entries, author + "0")

            def id_of(entry: Any) -> str:
                return entry
        else:
            entries = self._sorted_entries(sort, descending=direction != "1")
            after = cursor.get("after")
            start = bisect.bisect_right(entries, tuple(after)) if after is not None else 0
            end = len(entries)

            def id_of(entry: Any) -> str:
                return entry[1]

        def matches(space: _Space) -> bool:
            if space.private:
                return False
            if author and space.author != author:
                return False
            if search and search not in space.repo_id.lower():
                return False
            tags = space.head_revision.tags
            return all(f in tags for f in filters)

        page, last_entry, i = [], None, start
        while i < end and len(page) < want:
            entry = entries[i]
            i += 1
            space = self._spaces[id_of(entry)]
            if matches(space):
                page.append(self._space_json(space, space.head_revision, fields))
                last_entry = entry
        more = len(page) == want and (remaining is None or remaining > len(page))
        if more:
            # Look ahead so the last page carries no Link (the client would fetch an empty page otherwise).
            more = any(matches(self._spaces[id_of(entries[j])]) for j in range(i, end))
        headers = []
        if more:
            cursor_out: dict[str, Any] = {"after": last_entry}
            if remaining is not None:
                cursor_out["left"] = remaining - len(page)
            headers.append(self._next_link(raw_path, pairs, cursor_out))
        return _json_response(200, page, headers)

    def _space_json(self, space: _Space, rev: _Revision, fields: Iterable[str], *, blobs: bool = False) -> dict:
        item: dict[str, Any] = {"_id": space.mongo_id, "id": space.repo_id}
        subdomain = _subdomain(space.repo_id)
        for name in fields:
            if name == "author":
                item[name] = space.author
            elif name == "sha":
                item[name] = rev.sha
            elif name == "lastModified":
                item[name] = _iso(rev.date)
            elif name == "createdAt":
                item[name] = _iso(space.created_at)
            elif name == "private":
                item[name] = space.private
            elif name == "gated":
                item[name] = False
            elif name == "disabled":
                item[name] = space.disabled
            elif name == "likes":
                item[name] = space.likes
            elif name == "sdk":
                item[name] = space.sdk
            elif name == "tags":
                item[name] = list(rev.tags)
            elif name == "cardData":
                if rev.card_data is not None:
                    item[name] = rev.card_data
            elif name == "siblings":
                item[name] = self._siblings(space.repo_id, rev, blobs=blobs)
            elif name == "runtime":
                item[name] = {
                    "stage": space.stage,
                    "hardware": {
                        "current": space.hardware if space.stage in _SERVING_STAGES else None,
                        "requested": space.hardware,
                    },
                    "storage": None,
                    "gcTimeout": 172800,
                    "replicas": {"current": 1 if space.stage in _SERVING_STAGES else 0, "requested": 1},
                    "devMode": False,
                    "domains": [{"domain": f"{subdomain}.hf.space", "stage": "READY"}],
                }
            elif name == "subdomain":
                item[name] = subdomain
            elif name == "host":
                item[name] = space.host or f"https://{subdomain}.hf.space"
            elif name in ("models", "datasets"):
                item[name] = []
            elif name == "trendingScore":
                item[name] = space.trending_score
            elif name == "usedStorage":
                item[name] = sum(len(b.data) for b in rev.files.values())
            elif name == "region":
                item[name] = "us"
            # resourceGroup: Spaces outside an organization resource group have none.
        return item

    def _lookup(self, repo_id: str, rev: str, repo_type: str = "space",
                headers: Mapping[str, str] | None = None) -> tuple[Any, _Revision] | _Response:
        if repo_type == "dataset":
            repo = self._readable_dataset(repo_id, headers or {})
            if isinstance(repo, _Response):
                return repo
        else:
            repo = self._visible(repo_id)
            if repo is None:
                return _error(404, f"Repository {repo_id} not found", "RepoNotFound")
        revision = self._revision(repo, rev)
        if revision is None:
            return _error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return repo, revision

    def _readable_dataset(self, repo_id: str, headers: Mapping[str, str]) -> _Dataset | _Response:
        """The dataset, or the Hub's answer to a caller who may not see it (a missing repo answers the same)."""
        identity = None
        if headers.get("Authorization"):
            identity = self._identity(headers)
            if identity is None:
                return _error(401, "Invalid credentials in Authorization header")
        dataset = self._datasets.get(repo_id)
        if dataset is not None and (not dataset.private or (identity is not None and (
                dataset.author == identity["name"] or any(o["name"] == dataset.author for o in identity["orgs"])))):
            return dataset
        if identity is None:
            return _error(401, "Invalid username or password.", "RepoNotFound")
        return _error(404, "Repository not found", "RepoNotFound")

    def _dataset_info(self, repo_id: str, rev: str | None, query: dict[str, list[str]],
                      headers: Mapping[str, str]) -> _Response:
        found = self._lookup(repo_id, rev or "main", "dataset", headers)
        if isinstance(found, _Response):
            return found
        dataset, revision = found
        expand = query.get("expand", [])
        unknown = [e for e in expand if e not in _DATASET_EXPANDABLE]
        if unknown:
            return _error(400, f'"expand" must be one of {sorted(_DATASET_EXPANDABLE)}; got {unknown}')
        blobs = (query.get("blobs") or [""])[-1].lower() in ("true", "1")
        item: dict[str, Any] = {"_id": dataset.mongo_id, "id": dataset.repo_id}
        for name in expand or _DATASET_FULL_FIELDS:
            if name == "author":
                item[name] = dataset.author
            elif name == "sha":
                item[name] = revision.sha
            elif name == "lastModified":
                item[name] = _iso(revision.date)
            elif name == "createdAt":
                item[name] = _iso(dataset.created_at)
            elif name in ("private", "likes", "downloads"):
                item[name] = getattr(dataset, name)
            elif name in ("gated", "disabled"):
                item[name] = False
            elif name == "downloadsAllTime":
                item[name] = dataset.downloads
            elif name == "tags":
                item[name] = list(revision.tags)
            elif name == "cardData":
                if revision.card_data is not None:
                    item[name] = revision.card_data
            elif name == "siblings":
                item[name] = self._siblings(repo_id, revision, blobs=blobs, lfs=True)
            elif name in ("usedStorage", "mainSize"):
                item[name] = sum(len(b.data) for b in revision.files.values())
            elif name in ("citation", "description", "paperswithcode_id"):
                item[name] = None
            elif name == "trendingScore":
                item[name] = 0
            # resourceGroup: datasets outside an organization resource group have none.
        return _json_response(200, item)

    def _info(self, repo_id: str, rev: str | None, query: dict[str, list[str]]) -> _Response:
        found = self._lookup(repo_id, rev or "main")
        if isinstance(found, _Response):
            return found
        space, revision = found
        expand = query.get("expand", [])
        unknown = [e for e in expand if e not in _EXPANDABLE]
        if unknown:
            return _error(400, f'"expand" must be one of {sorted(_EXPANDABLE)}; got {unknown}')
        blobs = (query.get("blobs") or [""])[-1].lower() in ("true", "1")
        return _json_response(200, self._space_json(space, revision, expand or _FULL_FIELDS, blobs=blobs))

    def _tree_entry(self, repo_id: str, entry: dict, expand: bool) -> dict:
        out = {k: v for k, v in entry.items() if not k.startswith("_")}
        if out["type"] == "file":
            out["size"] = self._size(repo_id, out["path"], out["size"])
        if expand and entry["_commit"] is not None:
            sha, title, date = entry["_commit"]
            out["lastCommit"] = {"id": sha, "title": title, "date": _iso(date)}
        return out

    def _tree(
        self,
        raw_path: str,
        repo_id: str,
        rev: str,
        path: str,
        pairs: list[tuple[str, str]],
        query: dict[str, list[str]],
        repo_type: str = "space",
        headers: Mapping[str, str] | None = None,
    ) -> _Response:
        found = self._lookup(repo_id, rev, repo_type, headers)
        if isinstance(found, _Response):
            return found
        _, revision = found
        tree = revision.tree()
        if path and tree["entries"].get(path, {}).get("type") != "directory":
            return _error(404, f"{path} does not exist on {rev}", "EntryNotFound")
        recursive = (query.get("recursive") or [""])[-1].lower() in ("true", "1")
        expand = (query.get("expand") or [""])[-1].lower() in ("true", "1")
        if recursive:
            prefix = f"{path}/" if path else ""
            paths = sorted(p for p in tree["entries"] if p.startswith(prefix))
        else:
            paths = tree["children"][path]
        try:
            cursor = _decode_cursor(query["cursor"][-1]) if query.get("cursor") else {}
            offset = int(cursor.get("offset", 0))
        except (ValueError, TypeError, binascii.Error):
            return _error(400, "Invalid cursor")
        end = offset + self.tree_page_size
        page = [self._tree_entry(repo_id, tree["entries"][p], expand) for p in paths[offset:end]]
        headers = [self._next_link(raw_path, pairs, {"offset": end})] if end < len(paths) else []
        return _json_response(200, page, headers)

    def _paths_info(self, repo_id: str, rev: str, body: bytes, repo_type: str = "space",
                    headers: Mapping[str, str] | None = None) -> _Response:
        found = self._lookup(repo_id, rev, repo_type, headers)
        if isinstance(found, _Response):
            return found
        _, revision = found
        form = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        expand = any(k == "expand" and v.lower() in ("true", "1") for k, v in form)
        entries = revision.tree()["entries"]
        out = []
        for key, value in form:
            if key == "paths" and value.strip("/") in entries:
                out.append(self._tree_entry(repo_id, entries[value.strip("/")], expand))
        return _json_response(200, out)

    def _resolve(self, method: str, repo_id: str, rev: str, path: str, headers: Mapping[str, str],
                 repo_type: str = "space") -> _Response:
        found = self._lookup(repo_id, rev, repo_type, headers)
        if isinstance(found, _Response):
            return found
        _, revision = found
        commit = [("X-Repo-Commit", revision.sha)]
        blob = revision.files.get(path)
        if blob is None:
            return _error(404, f"Entry not found: {path}", "EntryNotFound", commit)
        size = len(blob.data)
        base = [
            *commit,
            ("ETag", f'"{blob.lfs or blob.oid}"'),  # an LFS file's ETag is its sha256, as on the Hub
            ("Content-Type", "application/octet-stream"),
            ("Accept-Ranges", "bytes"),
        ]
        if method == "HEAD":
            return _Response(200, base, blob.data, content_length=self._size(repo_id, path, size))
        range_header = headers.get("Range")
        if range_header:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", range_header.strip())
            if match is None or match.groups() == ("", ""):
                return _Response(416, [*base, ("Content-Range", f"bytes */{size}")], b"")
            first, last = match.groups()
            if first == "":  # suffix range: the last N bytes
                start, stop = max(size - int(last), 0), size - 1
            else:
                start, stop = int(first), min(int(last), size - 1) if last else size - 1
            if start >= size or start > stop:
                return _Response(416, [*base, ("Content-Range", f"bytes */{size}")], b"")
            return _Response(
                206, [*base, ("Content-Range", f"bytes {start}-{stop}/{size}")], memoryview(blob.data)[start : stop + 1]
            )
        return _Response(200, base, blob.data)

    # ------------------------------------------------------------------ internals: writes

    def _identity(self, headers: Mapping[str, str]) -> dict | None:
        auth = headers.get("Authorization") or ""
        token = auth[len("Bearer ") :].strip() if auth.startswith("Bearer ") else None
        return self._tokens.get(token) if token else None

    @staticmethod
    def _may_write(identity: dict, namespace: str) -> bool:
        return namespace == identity["name"] or any(
            org["name"] == namespace and org["roleInOrg"] in _WRITE_ROLES for org in identity["orgs"])

    def _writable(self, headers: Mapping[str, str], repo_id: str) -> _Space | _Response:
        """The Space the request may write to, or the Hub's answer: 401 without a known token, 404 for an unknown
        Space (or one the token cannot see), 403 without write rights on its namespace."""
        identity = self._identity(headers)
        if identity is None:
            return _error(401, "Invalid credentials in Authorization header")
        space = self._spaces.get(repo_id)
        if space is None or (space.private and not self._may_write(identity, space.author)):
            return _error(404, f"Repository {repo_id} not found", "RepoNotFound")
        if not self._may_write(identity, space.author):
            return _error(403, f"You don't have the rights to write to {repo_id}")
        return space

    @staticmethod
    def _json_body(body: bytes) -> dict | None:
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def _validate_yaml(self, body: bytes) -> _Response:
        """A README's front-matter must be a YAML mapping when present (the Hub checks much more)."""
        payload = self._json_body(body) or {}
        text = str(payload.get("content") or "")
        match = _FRONT_MATTER.match(text)
        if match is not None:
            try:
                data = yaml.load(match.group(1) or "", Loader=_YAML_LOADER)
            except yaml.YAMLError as exc:
                return _json_response(400, {"errors": [{"message": f"Invalid YAML: {exc}"}], "warnings": []})
            if data is not None and not isinstance(data, dict):
                return _json_response(400, {"errors": [{"message": "The metadata is not a mapping"}], "warnings": []})
        return _json_response(200, {"errors": [], "warnings": []})

    def _create_repo(self, headers: Mapping[str, str], body: bytes) -> _Response:
        payload = self._json_body(body)
        if payload is None:
            return _error(400, "Invalid JSON body")
        identity = self._identity(headers)
        if identity is None:
            return _error(401, "Invalid credentials in Authorization header")
        if payload.get("type") != "space":
            return _error(400, "The Hub stand-in serves Spaces only")
        namespace = payload.get("organization") or identity["name"]
        repo_id = f"{namespace}/{payload.get('name')}"
        if not _REPO_ID.fullmatch(repo_id):
            return _error(400, f"Invalid repo name {repo_id!r}")
        if not self._may_write(identity, namespace):
            return _error(403, f"You don't have the rights to create a space under the namespace {namespace!r}")
        if repo_id in self._spaces:
            return _json_response(409, {"error": "You already created this space repo",
                                        "url": f"{self.url}/spaces/{repo_id}"})
        private = payload.get("private") is True or payload.get("visibility") == "private"
        self.put_space(repo_id, {".gitattributes": _GITATTRIBUTES}, sdk=str(payload.get("sdk") or "docker"),
                       private=private, commit_message="initial commit")
        space = self._spaces[repo_id]
        return _json_response(200, {"url": f"{self.url}/spaces/{repo_id}", "name": repo_id, "id": space.mongo_id})

    def _delete_repo(self, headers: Mapping[str, str], body: bytes) -> _Response:
        payload = self._json_body(body) or {}
        identity = self._identity(headers)
        repo_id = f"{payload.get('organization') or (identity or {}).get('name')}/{payload.get('name')}"
        found = self._writable(headers, repo_id)
        if isinstance(found, _Response):
            return found
        self.delete_space(repo_id)
        return _json_response(200, {})

    def _move_repo(self, headers: Mapping[str, str], body: bytes) -> _Response:
        payload = self._json_body(body) or {}
        from_id, to_id = str(payload.get("fromRepo")), str(payload.get("toRepo"))
        found = self._writable(headers, from_id)
        if isinstance(found, _Response):
            return found
        if not _REPO_ID.fullmatch(to_id) or not self._may_write(self._identity(headers), to_id.split("/")[0]):
            return _error(403, f"You cannot move {from_id} to {to_id}")
        if to_id in self._spaces:
            return _error(409, f"{to_id} already exists")
        self.move_space(from_id, to_id)
        return _json_response(200, {})

    def _preupload(self, headers: Mapping[str, str], repo_id: str, rev: str, body: bytes) -> _Response:
        space = self._writable(headers, repo_id)
        if isinstance(space, _Response):
            return space
        revision = self._revision(space, rev)
        if revision is None:
            return _error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        payload = self._json_body(body)
        if payload is None or not isinstance(payload.get("files"), list):
            return _error(400, "Invalid preupload body")
        out = []
        for item in payload["files"]:
            path, size = str(item.get("path")), int(item.get("size") or 0)
            sample = base64.b64decode(str(item.get("sample") or ""))
            mode = "lfs" if size >= self.lfs_threshold or b"\0" in sample else "regular"
            blob = revision.files.get(path)
            # What the client compares with its own oid to skip an unchanged file.
            remote = None if blob is None else (blob.lfs if mode == "lfs" else blob.oid)
            out.append({"path": path, "uploadMode": mode, "shouldIgnore": False, "oid": remote})
        return _json_response(200, {"files": out, "commitOid": revision.sha})

    def _commit(self, headers: Mapping[str, str], repo_id: str, rev: str, body: bytes,
                query: dict[str, list[str]]) -> _Response:
        space = self._writable(headers, repo_id)
        if isinstance(space, _Response):
            return space
        if query.get("create_pr"):
            return _error(501, "The Hub stand-in does not open pull requests")
        if rev not in ("main", "refs/heads/main", "refs%2Fheads%2Fmain"):
            return _error(400, f"The Hub stand-in commits to main only, not {rev!r}")
        head = space.head_revision
        files: dict[str, _Blob] = dict(head.files)
        summary = "Upload files"
        try:
            lines = [json.loads(line) for line in body.decode("utf-8").splitlines() if line.strip()]
        except (UnicodeDecodeError, ValueError):
            return _error(400, "The commit body is not NDJSON")
        for line in lines:
            key, value = line.get("key"), line.get("value") or {}
            if key == "header":
                summary = str(value.get("summary") or summary)
                parent = value.get("parentCommit")
                if parent is not None and parent != head.sha:
                    return _error(412, "A commit has happened since. Please refresh and try again.")
            elif key == "file":
                if value.get("encoding") != "base64":
                    return _error(400, "file lines must be base64-encoded")
                try:
                    files[self._check_path(str(value.get("path")))] = self._blob(base64.b64decode(value["content"]))
                except (ValueError, KeyError, binascii.Error) as exc:
                    return _error(400, f"Invalid file line: {exc}")
            elif key == "lfsFile":
                oid = str(value.get("oid"))
                data = self._lfs.get(oid)
                if data is None:
                    return _error(422, f"LFS object {oid} was not uploaded")
                try:
                    path = self._check_path(str(value.get("path")))
                except ValueError as exc:
                    return _error(400, str(exc))
                files[path] = _Blob(data, git_blob_oid(data), lfs=oid)
            elif key == "deletedFile":
                if files.pop(str(value.get("path")), None) is None:
                    return _error(404, "A file with this name doesn't exist", "EntryNotFound")
            elif key == "deletedFolder":
                prefix = str(value.get("path")).rstrip("/") + "/"
                for path in [p for p in files if p.startswith(prefix)]:
                    del files[path]
            else:
                return _error(400, f"Unknown commit line {key!r}")
        try:
            sha = self.put_space(repo_id, files, commit_message=summary)
        except ValueError as exc:
            return _error(400, str(exc))
        return _json_response(200, {
            "success": True, "commitOid": sha, "commitMessage": summary, "hookOutput": "",
            "commitUrl": f"{self.url}/spaces/{repo_id}/commit/{sha}",
        })

    def _lfs_batch(self, headers: Mapping[str, str], repo_id: str, body: bytes) -> _Response:
        space = self._writable(headers, repo_id)
        if isinstance(space, _Response):
            return space
        payload = self._json_body(body)
        if payload is None or payload.get("operation") != "upload" or not isinstance(payload.get("objects"), list):
            return _error(400, "The Hub stand-in's LFS batch API takes uploads only")
        objects = []
        for item in payload["objects"]:
            oid, size = str(item.get("oid")), item.get("size")
            entry: dict[str, Any] = {"oid": oid, "size": size}
            if not re.fullmatch(r"[0-9a-f]{64}", oid) or not isinstance(size, int):
                entry["error"] = {"code": 422, "message": "invalid oid or size"}
            elif len(self._lfs.get(oid, b"")) != size or oid not in self._lfs:
                entry["authenticated"] = True
                entry["actions"] = {"upload": {"href": f"{self.url}/lfs-upload/{oid}"},
                                    "verify": {"href": f"{self.url}/lfs-verify/{repo_id}"}}
            objects.append(entry)
        return _json_response(200, {"transfer": "basic", "objects": objects})

    def _lfs_upload(self, oid: str, body: bytes) -> _Response:
        if hashlib.sha256(body).hexdigest() != oid:
            return _error(400, "The content does not match its sha256")
        self._lfs[oid] = bytes(body)
        return _Response(200, [])

    def _lfs_verify(self, repo_id: str, body: bytes) -> _Response:
        payload = self._json_body(body) or {}
        data = self._lfs.get(str(payload.get("oid")))
        if data is None or len(data) != payload.get("size"):
            return _error(404, "Object not found")
        return _json_response(200, {})

    def _settings(self, kind: str, method: str, headers: Mapping[str, str], repo_id: str, body: bytes) -> _Response:
        """Space variables or secrets (HfApi.add_space_variable & co.); secret values never come back."""
        space = self._writable(headers, repo_id)
        if isinstance(space, _Response):
            return space
        store = (self._variables if kind == "variables" else self._secrets).setdefault(repo_id, {})
        if method in ("POST", "DELETE"):
            payload = self._json_body(body)
            if payload is None or not isinstance(payload.get("key"), str) or not payload["key"]:
                return _error(400, "A key is required")
            if method == "POST":
                store[payload["key"]] = {"value": str(payload.get("value", "")), "updatedAt": _iso(time.time()),
                                         "description": payload.get("description")}
            else:
                store.pop(payload["key"], None)
            self._version += 1
        if kind == "secrets":
            return _json_response(200, {k: {"description": v["description"], "updatedAt": v["updatedAt"]}
                                        for k, v in store.items()} if method == "GET" else {})
        return _json_response(200, {k: {"value": v["value"], "description": v["description"],
                                        "updatedAt": v["updatedAt"]} for k, v in store.items()})

    def _whoami(self, headers: Mapping[str, str]) -> _Response:
        auth = headers.get("Authorization") or ""
        token = auth[len("Bearer ") :].strip() if auth.startswith("Bearer ") else None
        identity = self._tokens.get(token) if token else None
        if identity is None:
            return _error(401, "Invalid credentials in Authorization header")
        return _json_response(200, identity)
