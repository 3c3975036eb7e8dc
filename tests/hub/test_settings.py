"""Settings helpers and the deployment files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from hub import settings as s

ROOT = Path(__file__).resolve().parents[2]


def test_database_from_url_postgres():
    db = s.database_from_url("postgres://hub:p%40ss@db.example:6543/registry?sslmode=require")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == ("hub", "p@ss", "db.example", "6543", "registry")
    assert db["OPTIONS"] == {"sslmode": "require", "options": "-c max_parallel_workers_per_gather=0"}
    own = s.database_from_url("postgres://hub@db/registry?options=-c%20work_mem%3D64MB")
    assert own["OPTIONS"] == {"options": "-c work_mem=64MB"}  # the URL's own server options replace ours


def test_postgres_connections_plan_without_parallel_workers(db):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL setting")
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_parallel_workers_per_gather")
        assert cursor.fetchone() == ("0",)


def test_database_from_url_sqlite_and_errors():
    assert s.database_from_url("sqlite:////tmp/x.sqlite3")["NAME"] == "/tmp/x.sqlite3"
    assert s.database_from_url("sqlite:///var/x.sqlite3")["NAME"] == "var/x.sqlite3"
    with pytest.raises(ImproperlyConfigured, match="mysql"):
        s.database_from_url("mysql://x/y")
    assert s.database_from_url("sqlite:///var/my%20db.sqlite3")["NAME"] == "var/my db.sqlite3"
    with pytest.raises(ImproperlyConfigured, match="sqlite:///relative/path"):
        s.database_from_url("sqlite://var/hub.sqlite3")  # two slashes: 'var' would be a host


def test_a_malformed_database_url_never_shows_the_password():
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL is malformed") as info:
        s.database_from_url("postgres://hub:Sup3rS3cret#1@db:5432/hub")  # '#' not percent-encoded
    assert "Sup3r" not in str(info.value)


def test_env_helpers_are_strict(monkeypatch):
    monkeypatch.setenv("X_BOOL", "TRUE")
    assert s.env_bool("X_BOOL", False) is True
    monkeypatch.setenv("X_BOOL", "yes")
    with pytest.raises(ImproperlyConfigured, match="'true' or 'false'"):
        s.env_bool("X_BOOL", False)
    monkeypatch.setenv("X_INT", "12x")
    with pytest.raises(ImproperlyConfigured, match="integer"):
        s.env_int("X_INT", 1)
    monkeypatch.setenv("X_LIST", " a, ,b ")
    assert s.env_list("X_LIST", []) == ["a", "b"]
    monkeypatch.setenv("X_STR", "")
    assert s.env_str("X_STR", "default") == "default"


def test_every_setting_read_is_documented_in_env_example():
    source = (ROOT / "hub" / "settings.py").read_text()
    import re

    read = set(re.findall(r'env_(?:str|bool|int|float|list)\("([A-Z_]+)"', source))
    read |= set(re.findall(r'os\.environ\.get\("([A-Z_]+)"', source))
    documented = set(re.findall(r"^#?\s*([A-Z_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert read - documented == set()


def test_compose_file_shape():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"db", "redis", "web", "worker", "validator", "beat"}
    for name in ("db", "redis", "web", "worker", "validator", "beat"):
        assert "healthcheck" in services[name], name
    for name in ("web", "worker", "validator", "beat"):
        deps = services[name]["depends_on"]
        assert deps["db"]["condition"] == deps["redis"]["condition"] == "service_healthy"
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://") and env["REDIS_URL"].startswith("redis://")
    assert "gunicorn" in " ".join(services["web"]["command"])
    # Validations and evaluations (both run environments' code) run in their own worker, which must isolate or
    # refuse (never degrade silently).
    assert services["worker"]["command"][-3:-2] == ["default"]
    assert services["validator"]["command"][-3:-2] == ["validation,evaluation"]
    assert set(services["validator"]["environment"]["HUB_SANDBOX_REQUIRE"].split(",")) == {"net", "pid", "fs", "user"}
    # Its venv cache lives on a volume of its own, not on the one the other services share.
    assert services["validator"]["volumes"][0].split(":")[1] == services["validator"]["environment"]["HUB_SANDBOX_DIR"]
    assert "beat" in services["beat"]["command"]


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI")
def test_compose_config_validates():
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("the docker compose plugin is not installed")
    result = subprocess.run(["docker", "compose", "config", "-q"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
