"""Shared fixtures: the Hub stand-in wired into settings, the corpus, a real Celery worker."""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.hubstub import HubStub

TESTS_DIR = Path(__file__).resolve().parent
CORPUS = TESTS_DIR / "data" / "openenv-envs"
CORPUS_NAMES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())


@pytest.fixture(scope="session", autouse=True)
def _collected_static(django_db_blocker):
    """Pages name their assets by hashed names from the manifest, as in production: collect them once."""
    from django.core.management import call_command

    call_command("collectstatic", interactive=False, verbosity=0)


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    """Each test starts with an empty cache (identity answers, cached facet counts, rate limits) and no badge
    remembered from another test's database."""
    from django.core.cache import cache

    from registry import selectors

    cache.clear()
    selectors._badge_memo.clear()
    selectors._badge_version[:] = [0.0, 0]
    monkeypatch.setattr(selectors, "BADGE_VERSION_S", 0.0)  # tests see each change at once (one test times it)
    yield


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


EXAMPLES = TESTS_DIR.parent / "examples" / "envs"
FIXTURE_ENVS = TESTS_DIR / "fixtures" / "envs"


@pytest.fixture
def validation_settings(settings):
    """Budgets that hold on a loaded 2-core machine; runs go to the sandbox cache shared with the probe tests."""
    from tests.support.envserver import SANDBOX_CACHE, SANDBOX_PYTHON

    settings.HUB_SANDBOX_DIR = SANDBOX_CACHE
    settings.HUB_SANDBOX_PYTHON = SANDBOX_PYTHON
    settings.HUB_PROBE_FIRST_WORK_BUDGET_S = 150.0
    settings.HUB_SANDBOX_STARTUP_S = 150.0
    settings.HUB_PROBE_DEADLINE_S = 120.0
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    return settings


@pytest.fixture(scope="session")
def openenv_python():
    """A Python with openenv 0.10.0 (the sandbox venv every example and fixture package shares)."""
    from tests.support.envserver import interpreter

    python, why = interpreter()
    assert python, why
    return python


@pytest.fixture
def local_envs(validation_settings, openenv_python):
    """The examples and the broken fixtures indexed as local sources: local/<name> and broken/<name>.

    The test itself asks for the database (db or transactional) with its django_db mark."""
    from registry import services

    validation_settings.HUB_LOCAL_SOURCES = [f"local={EXAMPLES}", f"broken={FIXTURE_ENVS}"]
    run = services.local_sync().run
    assert run.errors == 0 and run.new == run.found
    return run


@pytest.fixture
def tiny_envs(settings, tmp_path):
    """Two minimal local packages, local/alpha and local/beta, indexed without validating them; returns alpha."""
    from registry import services
    from registry.models import Environment

    root = tmp_path / "envs"
    for name in ("alpha", "beta"):
        (root / name).mkdir(parents=True)
        (root / name / "openenv.yaml").write_text(f"name: {name}\n")
    settings.HUB_LOCAL_SOURCES = [f"local={root}"]
    settings.HUB_VALIDATE_NEW_REVISIONS = False
    services.local_sync()
    return Environment.objects.select_related("head").get(key="local/alpha")


# --- the integration marker, applied by what a test uses --------------------------------------------------------

# Fixtures that bring a real server or the package index into a test: using one makes it an integration test,
# whether or not the test remembered to say so.
INTEGRATION_FIXTURES = {
    "hub_stub", "corpus_stub", "openenv_python", "local_envs", "openenv_venv", "listeners", "contained",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


def _infrastructure() -> set[tuple[str, int]]:
    """The database and the broker/cache: what every test may reach, offline runs included."""
    from django.conf import settings

    allowed = set()
    db = settings.DATABASES["default"]
    if db.get("HOST"):
        allowed.add((db["HOST"], int(db.get("PORT") or 5432)))
    for url in (settings.REDIS_URL, settings.CELERY_BROKER_URL):
        parts = urlsplit(url or "")
        if parts.scheme.startswith("redis") and parts.hostname:
            allowed.add((parts.hostname, parts.port or 6379))
    return {(socket.gethostbyname(host) if host != "localhost" else "127.0.0.1", port) for host, port in allowed}


@pytest.fixture(autouse=True)
def _offline_unless_integration(request, monkeypatch):
    """A test not marked `integration` talks to the database and the broker, and to nothing else over the network:
    `pytest -m "not integration"` is a true offline run. Anything else fails the test with how to fix it."""
    if request.node.get_closest_marker("integration"):
        yield
        return
    allowed = _infrastructure()
    original = socket.socket.connect
    refused: list[str] = []

    def guarded(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host, port = address[0], address[1]
            if (host, port) not in allowed and not (host in ("::1", "localhost") and ("127.0.0.1", port) in allowed):
                refused.append(f"{host}:{port}")
                raise ConnectionRefusedError(f"offline test: {host}:{port} is not the database or the broker")
        return original(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    yield
    # Checked here, not only where it was raised: the code under test may well have caught the refusal.
    if refused:
        pytest.fail(f"this test is not marked `integration` but connected to {', '.join(sorted(set(refused)))}: "
                    "mark it (or use a fixture that does)", pytrace=False)
