"""Shared set-up for benchmarks: a dedicated database, never the development or test one."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_django(name: str) -> None:
    """Point Django at a benchmark database (PostgreSQL when DATABASE_URL is set, else SQLite in var/) and migrate."""
    sys.path.insert(0, str(ROOT))
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        import psycopg

        base, _, _ = url.rpartition("/")
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        os.environ["DATABASE_URL"] = f"{base}/{name}"
    else:
        path = ROOT / "var" / f"{name}.sqlite3"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hub.settings")
    os.environ["HUB_LOCAL_SOURCES"] = ""
    os.environ["HUB_VALIDATE_NEW_REVISIONS"] = "false"  # index only: validation has its own benchmark
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def rss_mib() -> float:
    """Current resident set size of this process, in MiB (from /proc: Linux only)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def engine() -> str:
    from django.db import connection

    return connection.vendor
