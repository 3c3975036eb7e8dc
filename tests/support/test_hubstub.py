"""The Hub stand-in, driven by the real huggingface_hub 2.4 client over real HTTP (no mocks, no Django)."""

from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx2
import pytest
import yaml
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    BadRequestError,
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder, SpaceInfo
from huggingface_hub.repocard_data import SpaceCardData

from tests.support.hubstub import HubStub, git_blob_oid

pytestmark = pytest.mark.integration

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "openenv-envs"
if not CORPUS.is_dir():  # the repository may be checked out elsewhere
    CORPUS = Path("/work/shared/corpus/openenv-envs")

EXPAND = [
    "author", "cardData", "createdAt", "lastModified", "likes", "private", "runtime", "sdk", "sha", "subdomain", "tags",
]


def corpus_ids_tagged_openenv() -> set[str]:
    """What the seeded Hub should list for filter="openenv", computed without the stub."""
    ids = set()
    for directory in CORPUS.iterdir():
        readme = (directory / "README.md").read_text()
        if not readme.startswith("---"):
            ids.add(f"openenv/{directory.name}")  # `openenv push` adds tags: [openenv]
            continue
        front = yaml.safe_load(readme.split("---", 2)[1])
        if "openenv" in (front.get("tags") or []):
            ids.add(f"openenv/{directory.name}")
    return ids


@pytest.fixture
def stub():
    with HubStub(page_size=5) as hub:
        hub.seed_from_corpus(CORPUS)
        yield hub
        assert hub.errors == []


@pytest.fixture
def api(stub):
    return HfApi(endpoint=stub.url, token=False)


def download(stub, repo_id, filename, revision, cache_dir, **kwargs):
    return Path(
        hf_hub_download(
            repo_id,
            filename,
            repo_type="space",
            revision=revision,
            cache_dir=cache_dir,
            endpoint=stub.url,
            token=False,
            **kwargs,
        )
    )


# ---------------------------------------------------------------- listing


def test_list_spaces_filter_pages_through_link_headers(stub, api):
    expected = corpus_ids_tagged_openenv()
    assert len(expected) == 33  # 34 envs; grid_world_env has front-matter without the tag

    spaces = list(api.list_spaces(filter="openenv", expand=EXPAND))

    assert [s.id for s in spaces] == sorted(expected)
    assert stub.count("list") == math.ceil(33 / 5)
    # Every follow-up page keeps the original parameters and adds only the cursor.
    for request in stub.requests:
        assert request.query["filter"] == ["openenv"]
        assert request.query["expand"] == EXPAND
    assert ["cursor" in r.query for r in stub.requests] == [False] + [True] * 6

    echo = next(s for s in spaces if s.id == "openenv/echo_env")
    assert isinstance(echo, SpaceInfo)
    assert echo.sha == stub.head("openenv/echo_env")
    assert echo.author == "openenv"
    assert echo.tags == ["openenv", "docker", "region:us"]
    assert isinstance(echo.card_data, SpaceCardData)
    assert echo.card_data.title == "Echo Environment Server"
    assert echo.card_data.app_port == 8000
    assert echo.runtime.stage == "RUNNING"
    assert echo.runtime.hardware == "cpu-basic"
    assert echo.subdomain == "openenv-echo-env"
    assert echo.sdk == "docker"
    assert echo.private is False
    assert echo.last_modified.tzinfo is not None
    assert echo.created_at == echo.last_modified
    assert echo.siblings is None  # not requested


def test_list_spaces_only_returns_requested_fields(stub, api):
    [space] = api.list_spaces(search="echo_env", expand=["runtime"])
    assert space.runtime.stage == "RUNNING"
    assert space.sha is None and space.tags is None and space.card_data is None

    [space] = api.list_spaces(search="echo_env")  # no expand: a small default set
    assert space.tags and space.created_at and space.sha is None

    [space] = api.list_spaces(search="echo_env", full=True)
    assert space.sha and space.siblings and space.host == "https://openenv-echo-env.hf.space"


def test_list_spaces_search_author_and_private(stub, api):
    stub.put_space("someone/OpenEnv-Private", {"README.md": "---\ntags: [openenv]\n---\n"}, private=True)
    stub.put_space("someone/my-openenv-thing", {"README.md": "no front-matter"})
    stub.put_space("other/unrelated", {"README.md": "---\ntags: [openenv]\n---\n"})

    found = [s.id for s in api.list_spaces(search="OPENENV")]
    assert len(found) == 35
    assert "someone/my-openenv-thing" in found
    assert "someone/OpenEnv-Private" not in found
    assert "other/unrelated" not in found

    assert [s.id for s in api.list_spaces(author="someone")] == ["someone/my-openenv-thing"]
    assert len(list(api.list_spaces(author="openenv"))) == 34
    assert [s.id for s in api.list_spaces(filter="openenv", author="other")] == ["other/unrelated"]
    assert list(api.list_spaces(filter=["openenv", "no-such-tag"])) == []

    stub.set_private("someone/OpenEnv-Private", False)
    assert "someone/OpenEnv-Private" in [s.id for s in api.list_spaces(search="openenv")]


def test_list_spaces_sort_and_limit(stub, api):
    stub.set_likes("openenv/chess_env", 30)
    stub.set_likes("openenv/echo_env", 20)
    stub.set_likes("openenv/maze_env", 10)

    top = list(api.list_spaces(sort="likes", limit=3, expand=["likes"]))
    assert [(s.id, s.likes) for s in top] == [
        ("openenv/chess_env", 30),
        ("openenv/echo_env", 20),
        ("openenv/maze_env", 10),
    ]
    assert stub.count("list") == 1

    stub.reset_requests()
    by_likes = list(api.list_spaces(sort="likes", expand=["likes"]))
    assert len(by_likes) == 34 and stub.count("list") == 7
    assert [s.likes for s in by_likes] == sorted((s.likes for s in by_likes), reverse=True)

    sha = stub.put_space("openenv/atari_env", {"README.md": "new"})
    newest = next(iter(api.list_spaces(sort="last_modified", expand=["sha", "lastModified"])))
    assert (newest.id, newest.sha) == ("openenv/atari_env", sha)


def test_list_spaces_bad_expand_is_a_400(api):
    with pytest.raises(BadRequestError):
        list(api.list_spaces(expand=["nope"]))


def test_listing_10000_spaces_pages_quickly():
    with HubStub(page_size=1000) as hub:
        started = time.perf_counter()
        for i in range(10_000):
            tags = ["openenv"] if i % 2 else ["other"]
            hub.put_space(f"user{i % 97}/env-{i:05d}", {"openenv.yaml": f"name: env_{i}\n"}, tags=tags)
        seeded = time.perf_counter() - started
        api = HfApi(endpoint=hub.url, token=False)
        started = time.perf_counter()
        ids = [s.id for s in api.list_spaces(filter="openenv", expand=["sha", "tags", "runtime"])]
        listed = time.perf_counter() - started
        assert len(ids) == 5_000 and ids == sorted(ids)
        assert hub.count("list") == 5
        assert seeded < 10 and listed < 10, (seeded, listed)
        assert hub.errors == []


# ---------------------------------------------------------------- one Space


def test_space_info_pinned_with_files_metadata(stub, api):
    sha = stub.head("openenv/echo_env")
    info = api.space_info("openenv/echo_env", revision=sha, files_metadata=True)

    assert info.sha == sha
    assert info.host == "https://openenv-echo-env.hf.space"
    assert "openenv" in info.tags
    expected = {p.name: p.read_bytes() for p in (CORPUS / "echo_env").iterdir()}
    sizes = {s.rfilename: (s.size, s.blob_id) for s in info.siblings}
    assert sizes == {name: (len(data), git_blob_oid(data)) for name, data in expected.items()}
    assert stub.requests[-1].path == f"/api/spaces/openenv/echo_env/revision/{sha}"
    assert stub.requests[-1].query == {"blobs": ["true"]}

    short = api.space_info("openenv/echo_env", revision=sha[:7])
    assert short.sha == sha
    assert all(s.size is None for s in short.siblings)


def test_space_info_errors_are_typed(stub, api):
    with pytest.raises(RepositoryNotFoundError):
        api.space_info("openenv/does_not_exist")
    stub.set_private("openenv/echo_env")
    with pytest.raises(RepositoryNotFoundError):
        api.space_info("openenv/echo_env")
    stub.set_private("openenv/echo_env", False)
    with pytest.raises(RevisionNotFoundError):
        api.space_info("openenv/echo_env", revision="0" * 40)
    stub.delete_space("openenv/echo_env")
    with pytest.raises(RepositoryNotFoundError):
        api.space_info("openenv/echo_env")


def test_a_moved_space_keeps_its_commits_and_object_id(stub, api):
    shas = stub.revisions("openenv/echo_env")
    object_id = stub.repo_object_id("openenv/echo_env")
    stub.move_space("openenv/echo_env", "someone/echo")
    with pytest.raises(RepositoryNotFoundError):
        api.space_info("openenv/echo_env")
    info = api.space_info("someone/echo")
    assert info.id == "someone/echo" and info.sha == shas[-1] and info.subdomain == "someone-echo"
    assert stub.revisions("someone/echo") == shas and stub.repo_object_id("someone/echo") == object_id
    assert "someone/echo" in {s.id for s in api.list_spaces(filter="openenv")}
    with pytest.raises(ValueError, match="already exists"):
        stub.move_space("openenv/chess_env", "someone/echo")


def test_space_info_expand_and_runtime_changes(stub, api):
    stub.set_runtime("openenv/echo_env", "SLEEPING")
    info = api.space_info("openenv/echo_env", expand=["runtime", "sha"])
    assert info.runtime.stage == "SLEEPING"
    assert info.runtime.hardware is None and info.runtime.requested_hardware == "cpu-basic"
    assert info.sha == stub.head("openenv/echo_env") and info.tags is None


def test_unparsable_front_matter_gives_no_card(stub, api):
    stub.put_space("x/broken", {"README.md": b"---\ntags: [openenv\n---\n"})
    stub.put_space("x/list", {"README.md": b"---\n- a\n- b\n---\nbody"})
    stub.put_space("x/binary", {"README.md": b"---\n\xff\xfe\n---\n"})
    for repo_id in ("x/broken", "x/list", "x/binary"):
        info = api.space_info(repo_id)
        assert info.card_data is None
        assert info.tags == ["docker", "region:us"]
    stub.put_space("x/explicit", {"README.md": b"whatever"}, tags=["a", "b"], card_data={"k": [1, 2]})
    info = api.space_info("x/explicit")
    assert info.tags == ["a", "b"] and info.card_data.to_dict() == {"k": [1, 2]}


# ---------------------------------------------------------------- files


def test_download_pinned_then_cached(stub, tmp_path):
    sha = stub.head("openenv/echo_env")
    path = download(stub, "openenv/echo_env", "openenv.yaml", sha, tmp_path)
    assert path.read_bytes() == (CORPUS / "echo_env" / "openenv.yaml").read_bytes()
    assert [(r.method, r.kind, r.status) for r in stub.requests] == [("HEAD", "resolve", 200), ("GET", "resolve", 200)]

    stub.reset_requests()
    again = download(stub, "openenv/echo_env", "openenv.yaml", sha, tmp_path)
    assert again == path
    assert stub.requests == []  # pinned to a sha and cached: no request at all

    download(stub, "openenv/echo_env", "openenv.yaml", "main", tmp_path)
    assert [(r.method, r.kind) for r in stub.requests] == [("HEAD", "resolve")]  # a branch still asks


def test_download_missing_file_and_repo(stub, tmp_path):
    sha = stub.head("openenv/echo_env")
    with pytest.raises(EntryNotFoundError):
        download(stub, "openenv/echo_env", "server/app.py", sha, tmp_path)
    with pytest.raises(RevisionNotFoundError):
        download(stub, "openenv/echo_env", "openenv.yaml", "f" * 40, tmp_path)
    with pytest.raises(RepositoryNotFoundError):
        download(stub, "openenv/nope", "openenv.yaml", "main", tmp_path)


def test_old_sha_still_downloads_old_content(stub, tmp_path):
    old = stub.head("openenv/echo_env")
    new = stub.put_space("openenv/echo_env", {"openenv.yaml": b"name: echo_env\nversion: 2\n", "README.md": b"v2"})
    assert new != old and len(new) == 40 and stub.revisions("openenv/echo_env") == [old, new]

    for revision, cache in ((new, "a"), ("main", "b")):
        fetched = download(stub, "openenv/echo_env", "openenv.yaml", revision, tmp_path / cache)
        assert fetched.read_bytes().endswith(b"version: 2\n")
    old_bytes = download(stub, "openenv/echo_env", "openenv.yaml", old, tmp_path / "c").read_bytes()
    assert old_bytes == (CORPUS / "echo_env" / "openenv.yaml").read_bytes()
    with pytest.raises(EntryNotFoundError):
        download(stub, "openenv/echo_env", "pyproject.toml", new, tmp_path / "d")


def test_arbitrary_bytes_report_their_real_size(stub, api, tmp_path):
    weird = bytes(range(256)) * 4 + b"\r\n\x00"
    big = b"\x00\xff" * (3 * 1024 * 1024)
    sha = stub.put_space("x/hostile", {"openenv.yaml": weird, "big.bin": big, "README.md": "é ✓".encode()})

    info = api.space_info("x/hostile", revision=sha, files_metadata=True)
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes == {"openenv.yaml": len(weird), "big.bin": len(big), "README.md": 6}
    assert download(stub, "x/hostile", "openenv.yaml", sha, tmp_path).read_bytes() == weird
    assert download(stub, "x/hostile", "big.bin", sha, tmp_path).read_bytes() == big


def test_size_lie_is_caught_by_the_client(stub, api, tmp_path):
    sha = stub.head("openenv/echo_env")
    stub.set_file_size_lie("openenv/echo_env", "openenv.yaml", 10)
    info = api.space_info("openenv/echo_env", files_metadata=True)
    assert next(s.size for s in info.siblings if s.rfilename == "openenv.yaml") == 10
    with pytest.raises(OSError, match="Consistency check failed"):
        download(stub, "openenv/echo_env", "openenv.yaml", sha, tmp_path)


def test_list_repo_tree_and_paths_info(stub, api):
    stub.tree_page_size = 2
    files = {
        "README.md": "r",
        "openenv.yaml": "o",
        "server/app.py": "a",
        "server/env.py": "e",
        "server/x/deep.txt": "d",
    }
    sha = stub.put_space("x/tree", files)

    top = list(api.list_repo_tree("x/tree", repo_type="space", revision=sha))
    assert [(type(e), e.path) for e in top] == [
        (RepoFile, "README.md"),
        (RepoFile, "openenv.yaml"),
        (RepoFolder, "server"),
    ]
    assert stub.count("tree") == 2  # 3 entries, 2 per page

    assert sorted(api.list_repo_files("x/tree", repo_type="space", revision=sha)) == sorted(files)
    inner = list(api.list_repo_tree("x/tree", "server", repo_type="space", revision=sha, expand=True))
    assert [e.path for e in inner] == ["server/app.py", "server/env.py", "server/x"]
    assert inner[0].size == 1 and inner[0].blob_id == git_blob_oid(b"a") and inner[0].last_commit.oid == sha
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree("x/tree", "nope", repo_type="space", revision=sha))

    info = api.get_paths_info("x/tree", ["server/app.py", "server", "missing"], repo_type="space", revision=sha)
    assert [(type(e), e.path) for e in info] == [(RepoFile, "server/app.py"), (RepoFolder, "server")]


def test_range_requests_and_content_length_everywhere(stub):
    sha = stub.head("openenv/echo_env")
    data = (CORPUS / "echo_env" / "openenv.yaml").read_bytes()
    base = f"{stub.url}/spaces/openenv/echo_env/resolve/{sha}/openenv.yaml"
    with httpx2.Client() as client:
        ranged = client.get(base, headers={"Range": "bytes=5-"})
        assert ranged.status_code == 206 and ranged.content == data[5:]
        assert ranged.headers["Content-Range"] == f"bytes 5-{len(data) - 1}/{len(data)}"
        head = client.head(base)
        assert head.headers["Content-Length"] == str(len(data))
        assert head.headers["X-Repo-Commit"] == sha and head.headers["ETag"] == f'"{git_blob_oid(data)}"'
        for method, url in [
            ("GET", f"{stub.url}/api/spaces?filter=openenv"),
            ("GET", f"{stub.url}/api/spaces/openenv/echo_env"),
            ("GET", f"{stub.url}/api/nothing/here"),
            ("HEAD", f"{stub.url}/spaces/openenv/echo_env/resolve/{sha}/missing"),
            ("GET", f"{stub.url}/api/whoami-v2"),
            ("POST", f"{stub.url}/api/spaces"),
        ]:
            response = client.request(method, url)
            assert "Content-Length" in response.headers, (method, url)
        unknown = client.get(f"{stub.url}/api/nothing/here")
        assert unknown.status_code == 404 and "error" in unknown.json()


# ---------------------------------------------------------------- identity


def test_whoami(stub, api):
    stub.add_token("hf_good", "alice", orgs=["openenv"])
    me = api.whoami(token="hf_good")
    assert me["name"] == "alice" and [o["name"] for o in me["orgs"]] == ["openenv"]
    assert stub.requests[-1].headers["authorization"] == "Bearer hf_good"
    with pytest.raises(HfHubHTTPError) as caught:
        api.whoami(token="hf_bad")
    assert caught.value.response.status_code == 401


# ---------------------------------------------------------------- faults


def test_listing_retries_429_and_500_by_itself(stub, api):
    stub.inject("list", status=429, retry_after=0)
    # Fail the second page too: follow-up pages go through the same backoff.
    stub.inject(lambda r: r.kind == "list" and "cursor" in r.query, status=500, retry_after=0)

    spaces = list(api.list_spaces(filter="openenv"))

    assert len(spaces) == 33
    assert stub.count("list", injected=True) == 2
    assert stub.count("list", injected=False) == 7
    assert [r.status for r in stub.requests][:4] == [429, 200, 500, 200]


def test_space_info_does_not_retry(stub, api):
    injection = stub.inject("info", status=503, repo_id="openenv/echo_env", times=None)
    with pytest.raises(HfHubHTTPError) as caught:
        api.space_info("openenv/echo_env")
    assert caught.value.response.status_code == 503
    assert stub.count("info") == 1 and injection.hits == 1
    assert api.space_info("openenv/chess_env").id == "openenv/chess_env"  # other repos unaffected


def test_download_retries_a_failed_head_once_with_backoff(stub, tmp_path):
    sha = stub.head("openenv/echo_env")
    stub.inject("resolve", method="HEAD", status=503, retry_after=0)
    path = download(stub, "openenv/echo_env", "openenv.yaml", sha, tmp_path)
    assert path.read_bytes() == (CORPUS / "echo_env" / "openenv.yaml").read_bytes()
    assert [(r.method, r.status) for r in stub.requests] == [("HEAD", 503), ("HEAD", 200), ("GET", 200)]


def test_download_does_not_retry_a_5xx_get(stub, tmp_path):
    sha = stub.head("openenv/echo_env")
    stub.inject("resolve", method="GET", status=502)
    with pytest.raises(HfHubHTTPError):
        download(stub, "openenv/echo_env", "openenv.yaml", sha, tmp_path)
    assert [(r.method, r.status) for r in stub.requests] == [("HEAD", 200), ("GET", 502)]


def test_injection_options(stub):
    stub.inject("info", status=418, body=b"teapot", headers={"X-Custom": "1"}, times=2)
    with httpx2.Client() as client:
        first = client.get(f"{stub.url}/api/spaces/openenv/echo_env")
        second = client.get(f"{stub.url}/api/spaces/openenv/echo_env")
        third = client.get(f"{stub.url}/api/spaces/openenv/echo_env")
    assert (first.status_code, first.text, first.headers["X-Custom"]) == (418, "teapot", "1")
    assert second.status_code == 418 and third.status_code == 200
    assert [r.injected for r in stub.requests] == [True, True, False]
    with pytest.raises(ValueError):
        stub.inject("nonsense")


def test_stop_is_clean_and_url_requires_start():
    hub = HubStub()
    with pytest.raises(RuntimeError):
        hub.url
    with hub:
        hub.put_space("a/b", {"README.md": "x"})
        assert HfApi(endpoint=hub.url, token=False).space_info("a/b").id == "a/b"
    hub.stop()  # idempotent


def test_deterministic_clock_and_shas():
    def build():
        hub = HubStub()
        shas = [hub.put_space("a/b", {"f": "1"}), hub.put_space("a/b", {"f": "2"}), hub.put_space("c/d", {"f": "1"})]
        return shas, hub

    (first, hub), (second, _) = build(), build()
    assert first == second and len(set(first)) == 3
    with hub:
        info = HfApi(endpoint=hub.url, token=False).space_info("a/b")
    assert info.last_modified == datetime(2025, 1, 1, 0, 0, 2, tzinfo=timezone.utc)
    assert info.created_at == datetime(2025, 1, 1, 0, 0, 1, tzinfo=timezone.utc)
