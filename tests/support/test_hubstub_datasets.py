"""Dataset repos in the Hub stand-in, driven by the real huggingface_hub 2.4 client over real HTTP (no mocks)."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    BadRequestError,
    EntryNotFoundError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import DatasetInfo, RepoFile

from tests.support.hubstub import HubStub, git_blob_oid

pytestmark = pytest.mark.integration

RUN = Path(__file__).resolve().parents[1] / "data" / "collect" / "counter-run"
FILES = {name: (RUN / name).read_bytes() for name in ("README.md", "metadata.json", "results.jsonl")}
DATASET = "alice/counter-rollouts"


@pytest.fixture
def stub():
    with HubStub(page_size=5) as hub:
        hub.add_token("alice-token", "alice", orgs=["lab"], role="read")
        hub.add_token("bob-token", "bob")
        yield hub
        assert hub.errors == []


def api(stub, token=False) -> HfApi:
    return HfApi(endpoint=stub.url, token=token)


def download(stub, repo_id, filename, revision, cache_dir, token=False) -> Path:
    return Path(hf_hub_download(repo_id, filename, repo_type="dataset", revision=revision, cache_dir=cache_dir,
                                endpoint=stub.url, token=token))


def test_dataset_info_has_the_sha_files_sizes_and_card(stub):
    sha = stub.put_dataset(DATASET, FILES)
    info = api(stub).dataset_info(DATASET, files_metadata=True)
    assert isinstance(info, DatasetInfo)
    assert (info.id, info.sha, info.author, info.private) == (DATASET, sha, "alice", False)
    assert info.sha == stub.dataset_head(DATASET) and len(sha) == 40
    assert {s.rfilename: s.size for s in info.siblings} == {name: len(data) for name, data in FILES.items()}
    assert {s.rfilename: s.blob_id for s in info.siblings} == {n: git_blob_oid(d) for n, d in FILES.items()}
    # The dataset card openenv collect writes pins results.jsonl as the data file.
    assert info.card_data.to_dict()["configs"][0]["data_files"][0]["path"] == "results.jsonl"
    assert info.tags == ["region:us"]
    plain = api(stub).dataset_info(DATASET)
    assert plain.sha == sha and all(s.size is None for s in plain.siblings)
    only = api(stub).dataset_info(DATASET, expand=["sha", "private"])
    assert (only.sha, only.private, only.siblings, only.tags) == (sha, False, None, None)
    assert stub.requests[-1].repo_type == "dataset" and stub.requests[-1].kind == "info"


def test_every_revision_stays_readable_by_its_sha_or_a_unique_prefix(stub, tmp_path):
    first = stub.put_dataset(DATASET, FILES)
    second = stub.put_dataset(DATASET, {**FILES, "results.jsonl": FILES["results.jsonl"][:300]})
    assert stub.dataset_revisions(DATASET) == [first, second] and first != second
    assert api(stub).dataset_info(DATASET).sha == second
    assert api(stub).dataset_info(DATASET, revision=first).sha == first
    assert api(stub).dataset_info(DATASET, revision=first[:10]).sha == first

    old = download(stub, DATASET, "results.jsonl", first, tmp_path / "a")
    new = download(stub, DATASET, "results.jsonl", "main", tmp_path / "b")
    assert old.read_bytes() == FILES["results.jsonl"] and new.read_bytes() == FILES["results.jsonl"][:300]
    with pytest.raises(RevisionNotFoundError):
        api(stub).dataset_info(DATASET, revision="0" * 40)
    with pytest.raises(RevisionNotFoundError):
        download(stub, DATASET, "results.jsonl", "f" * 40, tmp_path / "c")


def test_resolve_sends_the_commit_etag_and_length_and_tree_routes_answer(stub, tmp_path):
    sha = stub.put_dataset(DATASET, {**FILES, "data/extra.jsonl": "{}\n"})
    response = httpx2.head(f"{stub.url}/datasets/{DATASET}/resolve/main/metadata.json")
    assert response.status_code == 200
    assert response.headers["X-Repo-Commit"] == sha
    assert response.headers["ETag"] == f'"{git_blob_oid(FILES["metadata.json"])}"'
    assert int(response.headers["Content-Length"]) == len(FILES["metadata.json"])

    assert sorted(api(stub).list_repo_files(DATASET, repo_type="dataset", revision=sha)) == sorted(
        [*FILES, "data/extra.jsonl"])
    [entry] = api(stub).get_paths_info(DATASET, ["results.jsonl"], repo_type="dataset", revision=sha)
    assert isinstance(entry, RepoFile) and entry.size == len(FILES["results.jsonl"])
    with pytest.raises(EntryNotFoundError):
        download(stub, DATASET, "missing.json", sha, tmp_path)
    assert {r.repo_type for r in stub.requests} == {"dataset"}


def test_missing_and_private_datasets_answer_401_or_404_as_the_hub_does(stub, tmp_path):
    stub.put_dataset("lab/secret-runs", FILES, private=True)
    for repo_id in ("lab/secret-runs", "nobody/nothing"):
        # Without a token: 401 RepoNotFound, whether the dataset is private or missing.
        with pytest.raises(RepositoryNotFoundError) as anonymous:
            api(stub).dataset_info(repo_id)
        assert anonymous.value.response.status_code == 401
        with pytest.raises(RepositoryNotFoundError):
            download(stub, repo_id, "metadata.json", "main", tmp_path)
        # With a token that may not read it: 404 RepoNotFound.
        with pytest.raises(RepositoryNotFoundError) as stranger:
            api(stub, "bob-token").dataset_info(repo_id)
        assert stranger.value.response.status_code == 404
    # A member of the organization reads it, whatever the role.
    member = api(stub, "alice-token").dataset_info("lab/secret-runs", files_metadata=True)
    assert member.private is True and member.sha == stub.dataset_head("lab/secret-runs")
    path = download(stub, "lab/secret-runs", "metadata.json", member.sha, tmp_path, token="alice-token")
    assert path.read_bytes() == FILES["metadata.json"]
    # A token the Hub does not know is refused as such, not as a missing repo.
    with pytest.raises(HfHubHTTPError) as unknown:
        api(stub, "made-up-token").dataset_info(DATASET)
    assert unknown.value.response.status_code == 401 and not isinstance(unknown.value, RepositoryNotFoundError)
    # Made public, and deleted.
    stub.set_dataset_private("lab/secret-runs", False)
    assert api(stub).dataset_info("lab/secret-runs").private is False
    stub.delete_dataset("lab/secret-runs")
    with pytest.raises(RepositoryNotFoundError):
        api(stub).dataset_info("lab/secret-runs")


def test_a_space_and_a_dataset_of_the_same_id_are_different_repos(stub, tmp_path):
    space_sha = stub.put_space(DATASET, {"README.md": "a Space"})
    dataset_sha = stub.put_dataset(DATASET, FILES)
    assert space_sha != dataset_sha
    assert api(stub).space_info(DATASET).sha == space_sha
    assert api(stub).dataset_info(DATASET).sha == dataset_sha
    with pytest.raises(RevisionNotFoundError):
        api(stub).dataset_info(DATASET, revision=space_sha)
    assert download(stub, DATASET, "metadata.json", dataset_sha, tmp_path).read_bytes() == FILES["metadata.json"]
    assert [s.id for s in api(stub).list_spaces(author="alice")] == [DATASET]  # datasets are not listed as Spaces
    stub.put_space("alice/only-a-space", {"README.md": "a Space"})
    with pytest.raises(RepositoryNotFoundError):
        api(stub).dataset_info("alice/only-a-space")


def test_injections_and_counts_can_be_narrowed_to_datasets(stub, tmp_path):
    stub.put_space("alice/env", {"openenv.yaml": "name: env\n"})
    stub.put_dataset(DATASET, FILES)
    stub.reset_requests()
    injection = stub.inject("info", status=503, times=None, repo_type="dataset")
    assert api(stub).space_info("alice/env").sha == stub.head("alice/env")
    with pytest.raises(HfHubHTTPError) as caught:
        HfApi(endpoint=stub.url, token=False).dataset_info(DATASET)
    assert caught.value.response.status_code == 503 and injection.hits >= 1
    assert stub.count("info", repo_type="space") == 1
    assert stub.count("info", repo_type="dataset", injected=True) == injection.hits


def test_unknown_expand_values_are_refused(stub):
    stub.put_dataset(DATASET, FILES)
    with pytest.raises(BadRequestError):
        api(stub).dataset_info(DATASET, expand=["runtime"])
