"""Importing an openenv collect dataset from the Hub: HubClient's dataset reads against the stand-in (real HTTP,
the real huggingface_hub client), then registry.evaluation.ingest on what came back.

The dataset is tests/data/collect/counter-run/, written by openenv 0.10.0's own collect code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.evaluation.episodes import DONE, STEP_BOUND
from registry.evaluation.ingest import IngestError, match_environment, read_collect_dataset
from registry.hub import (
    DatasetFacts,
    DatasetNotFound,
    FileNotFound,
    HubClient,
    HubUnavailable,
    RevisionNotFound,
    SpaceNotFound,
)

pytestmark = pytest.mark.integration

RUN = Path(__file__).resolve().parents[1] / "data" / "collect" / "counter-run"
FILES = {name: (RUN / name).read_bytes() for name in ("README.md", "metadata.json", "results.jsonl")}
DATASET = "alice/counter-rollouts"
ENVIRONMENT = "openenv/counter_env"  # its Space host is https://openenv-counter-env.hf.space, the run's env_base_url


@pytest.fixture
def published(hub_stub):
    """The environment's Space and the collect dataset, published on the stand-in."""
    hub_stub.put_space(ENVIRONMENT, {"openenv.yaml": "spec_version: 1\nname: counter_env\n", "README.md": "x"})
    sha = hub_stub.put_dataset(DATASET, FILES, commit_message="Add 4 collected episode(s)")
    hub_stub.reset_requests()
    return sha


def test_a_collect_dataset_is_read_back_pinned_to_its_sha(hub_stub, published):
    client = HubClient()
    facts = client.dataset(DATASET)
    assert isinstance(facts, DatasetFacts)
    assert (facts.repo_id, facts.sha, facts.author, facts.private, facts.files_known) == (
        DATASET, published, "alice", False, True)
    assert facts.files == {name: len(data) for name, data in FILES.items()}
    assert facts.card_data["configs"][0]["data_files"][0]["path"] == "results.jsonl"

    # Someone pushes again after we read the head: the import still reads the commit it started from.
    hub_stub.put_dataset(DATASET, {**FILES, "results.jsonl": b'{"episode_id": "x", "reward": NaN, "done": true}\n'})
    results = client.read_dataset_file(DATASET, "results.jsonl", sha=facts.sha, cap=facts.files["results.jsonl"])
    metadata = client.read_dataset_file(DATASET, "metadata.json", sha=facts.sha, cap=facts.files["metadata.json"])
    assert (results, metadata) == (FILES["results.jsonl"], FILES["metadata.json"])
    resolves = [r.path for r in hub_stub.requests if r.kind == "resolve"]
    assert resolves == [f"/datasets/{DATASET}/resolve/{published}/results.jsonl",
                        f"/datasets/{DATASET}/resolve/{published}/metadata.json"]

    dataset = read_collect_dataset(results, metadata, max_episodes=1000, max_bytes=1 << 20)
    assert [(e.episode_id, e.reward, e.steps, e.ended) for e in dataset.episodes] == [
        ("ep-000000", 1.0, 2, DONE), ("ep-000001", 1.0, 3, DONE), ("ep-000002", 0.25, 4, STEP_BOUND),
        ("ep-000003", 1.0, 1, DONE)]
    space = client.space(ENVIRONMENT)
    match = match_environment(dataset.metadata, mapping=None, candidates=[space])
    assert (match.repo_id, match.matched_by) == (ENVIRONMENT, "env_base_url")

    # The head is the broken push: read it, and it is refused with its line.
    head = client.dataset(DATASET)
    assert head.sha != facts.sha
    broken = client.read_dataset_file(DATASET, "results.jsonl", sha=head.sha, cap=1 << 20)
    with pytest.raises(IngestError, match=r"^results.jsonl line 1: reward is NaN"):
        read_collect_dataset(broken, metadata, max_episodes=1000, max_bytes=1 << 20)
    assert hub_stub.errors == []


def test_a_read_stops_at_its_cap_whatever_size_the_hub_declares(hub_stub, published):
    hub_stub.set_file_size_lie(DATASET, "results.jsonl", 10)
    client = HubClient()
    facts = client.dataset(DATASET)
    assert facts.files["results.jsonl"] == 10  # what the Hub says
    cap = 100
    data = client.read_dataset_file(DATASET, "results.jsonl", sha=facts.sha, cap=cap)
    assert data == FILES["results.jsonl"][: cap + 1]  # more than the cap: "too large"
    with pytest.raises(IngestError, match=f"^results.jsonl is {cap + 1} bytes; at most {cap} are accepted$"):
        read_collect_dataset(data, FILES["metadata.json"], max_episodes=10, max_bytes=cap)


def test_missing_private_and_unknown_things_raise_the_hub_errors(hub_stub, published):
    client = HubClient()
    with pytest.raises(DatasetNotFound, match="the dataset does not exist or is not public"):
        client.dataset("alice/no-such-dataset")
    hub_stub.set_dataset_private(DATASET)
    with pytest.raises(DatasetNotFound):
        client.dataset(DATASET)
    with pytest.raises(DatasetNotFound):
        client.read_dataset_file(DATASET, "results.jsonl", sha=published, cap=1000)
    hub_stub.set_dataset_private(DATASET, False)
    with pytest.raises(FileNotFound):
        client.read_dataset_file(DATASET, "no-such-file.jsonl", sha=published, cap=1000)
    with pytest.raises(RevisionNotFound):
        client.dataset(DATASET, "0" * 40)
    with pytest.raises(RevisionNotFound):
        client.read_dataset_file(DATASET, "results.jsonl", sha="0" * 40, cap=1000)
    # A dataset is not a Space, and the other way round.
    with pytest.raises(SpaceNotFound):
        client.space(DATASET)
    with pytest.raises(DatasetNotFound):
        client.dataset(ENVIRONMENT)


def test_429_and_5xx_on_dataset_reads_are_retried_as_for_spaces(hub_stub, published):
    slept: list[float] = []
    client = HubClient(sleep=slept.append)
    hub_stub.inject("info", status=503, times=1, repo_type="dataset")
    hub_stub.inject("resolve", status=429, retry_after=2, times=1, repo_type="dataset")
    facts = client.dataset(DATASET)
    assert client.read_dataset_file(DATASET, "metadata.json", sha=facts.sha, cap=10_000) == FILES["metadata.json"]
    assert slept == [0.01, 2.0]  # one backoff for the 503, then Retry-After to the second
    assert hub_stub.count(repo_type="dataset", injected=True) == 2

    hub_stub.inject("resolve", status=500, times=None, repo_type="dataset")
    with pytest.raises(HubUnavailable, match="kept failing after 3 attempts"):
        client.read_dataset_file(DATASET, "metadata.json", sha=facts.sha, cap=10_000)
