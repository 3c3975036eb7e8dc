"""A real Celery worker process for tests, connected to the test database and the configured broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    """The URL of the database the tests are using right now (pytest-django's test database)."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    auth = quote(db["USER"] or "")
    if db["PASSWORD"]:
        auth += ":" + quote(db["PASSWORD"])
    return f"postgres://{auth}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}/{db['NAME']}"


def purge_queues(*queues: str) -> None:
    """Drop messages left by an earlier run so the worker only sees this test's tasks."""
    from hub.celery import app

    with app.connection_for_write() as conn:
        for queue in queues:
            try:
                conn.default_channel.queue_purge(queue)
            except Exception:  # noqa: BLE001 - a queue that does not exist yet has nothing to purge
                pass


@contextmanager
def celery_worker(*, env: dict[str, str] | None = None, queues: str = "default",
                  concurrency: int = 1, log: Path | None = None) -> Iterator[subprocess.Popen]:
    """Start `celery -A hub worker` as a subprocess; stop it (SIGTERM, then SIGKILL) on exit."""
    purge_queues(*queues.split(","))
    child_env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "HUB_VAR_DIR": str(settings.VAR_DIR),
        "HF_ENDPOINT": settings.HF_ENDPOINT,
        "HF_CACHE_DIR": str(settings.HF_CACHE_DIR),
        "HUB_LOCAL_SOURCES": ":".join(settings.HUB_LOCAL_SOURCES),
        "HUB_RETRY_BASE_S": str(settings.HUB_RETRY_BASE_S),
        **(env or {}),
    }
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "hub", "worker", "--loglevel", "INFO", "-Q", queues,
         "--concurrency", str(concurrency), "--pool", "prefork", "--without-heartbeat", "--without-mingle",
         "--without-gossip", "--hostname", f"test-{os.getpid()}-{time.monotonic_ns()}@%h"],
        cwd=ROOT, env=child_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # leftover pool children
            except ProcessLookupError:
                pass
        if log:
            out.close()


def wait_for(predicate: Callable[[], object], *, timeout: float = 60, interval: float = 0.2, what: str = "condition"):
    """Poll until predicate() is truthy; fail the test with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
