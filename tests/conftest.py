"""Shared fixtures: the Hub stand-in wired into settings, the corpus, a real Celery worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.hubstub import HubStub

TESTS_DIR = Path(__file__).resolve().parent
CORPUS = TESTS_DIR / "data" / "openenv-envs"
CORPUS_NAMES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


@pytest.fixture
def hub_stub(settings, tmp_path):
    """A running Hub stand-in that the indexer talks to through the real huggingface_hub client."""
    with HubStub(page_size=10) as stub:
        settings.HF_ENDPOINT = stub.url
        settings.HF_TOKEN = ""
        settings.HF_CACHE_DIR = tmp_path / "hf-cache"
        settings.HUB_RETRY_ATTEMPTS = 3
        settings.HUB_RETRY_BASE_S = 0.01
        settings.HUB_LOCAL_SOURCES = []
        yield stub
        assert stub.errors == [], "the Hub stand-in hit a bug of its own"


@pytest.fixture
def corpus_stub(hub_stub):
    """The stand-in seeded with the 34 real OpenEnv environments as openenv/<name> Spaces."""
    hub_stub.seed_from_corpus(CORPUS, owner="openenv")
    hub_stub.reset_requests()
    return hub_stub
