"""A real browser against a real server: Debian's Chromium driven by Playwright, never a downloaded browser.

The hub under test is a separate gunicorn process serving the demo catalog (tests/support/demo.py: real
indexing, real validations) from a database of its own, built once per session. Without Chromium the
browser tests skip, saying how to get it; CI installs it (.ci/run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings

from tests.support.envserver import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                  "--disable-background-networking", "--disable-component-update"]


def chromium() -> str | None:
    """Debian's Chromium (HUB_CHROMIUM names another binary)."""
    for candidate in (os.environ.get("HUB_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def pytest_collection_modifyitems(config, items):
    if chromium() is None:
        skip = pytest.mark.skip(reason="no Chromium found: install Debian's package (`apt-get install chromium`) "
                                       "or set HUB_CHROMIUM; CI installs it and runs these")
        for item in items:
            if "tests/browser" in str(item.fspath):
                item.add_marker(skip)


def _database(name: str) -> tuple[str, callable]:
    """A database for the served hub, apart from the test database: (its URL, how to drop it)."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        path = Path(settings.VAR_DIR) / f"{name}.sqlite3"
        for leftover in path.parent.glob(f"{name}.sqlite3*"):
            leftover.unlink()
        return f"sqlite:///{path}", lambda: [p.unlink() for p in path.parent.glob(f"{name}.sqlite3*")]
    import psycopg

    auth = quote(db["USER"] or "") + (":" + quote(db["PASSWORD"]) if db["PASSWORD"] else "")
    server = f"postgres://{auth}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}"

    def execute(sql: str) -> None:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(sql)

    execute(f'DROP DATABASE IF EXISTS "{name}"')
    execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}", lambda: execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def served_hub(tmp_path_factory):
    """The demo catalog served by gunicorn: yields its base URL."""
    work = tmp_path_factory.mktemp("served-hub")
    url, drop = _database(f"test_openenv_hub_browser_{os.getpid()}")
    env = {**os.environ, "DATABASE_URL": url, "HUB_VAR_DIR": str(work / "var"), "DEBUG": "false",
           "HUB_SANDBOX_DIR": str(settings.HUB_SANDBOX_DIR), "HUB_SANDBOX_PYTHON": settings.HUB_SANDBOX_PYTHON,
           "HUB_LOCAL_SOURCES": str(work / "demo" / "local")}
    log = open(work / "server.log", "wb")
    server = None
    try:
        subprocess.run([sys.executable, "-m", "tests.support.demo", str(work / "demo")], cwd=ROOT, env=env, check=True,
                       stdout=log, stderr=subprocess.STDOUT, timeout=900)
        subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env,
                       check=True, timeout=300)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "gunicorn", "hub.wsgi", "--bind", f"127.0.0.1:{port}",
                                   "--workers", "2"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"the served hub never answered; see {work / 'server.log'}")
        yield base
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        log.close()
        drop()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        yield instance
        instance.close()


class Watched:
    """A page whose dialogs and script errors are recorded: any dialog means a script ran that should not have."""

    def __init__(self, page):
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def xss(self) -> object:
        return self.page.evaluate("window.__xss")


@pytest.fixture
def open_page(browser, served_hub):
    """open_page(path, width=1280, scheme="light", **context options) -> Watched, at the served hub."""
    contexts = []

    def opener(path: str, *, width: int = 1280, height: int = 900, scheme: str = "light", **options) -> Watched:
        context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme,
                                      base_url=served_hub, **options)
        contexts.append(context)
        watched = Watched(context.new_page())
        watched.page.goto(path)
        return watched

    yield opener
    for context in contexts:
        context.close()
