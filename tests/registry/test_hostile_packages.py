"""Hostile packages, run for real through the local runner and the sandbox: each is contained, each run ends
with a failing verdict whose evidence shows the attempt, and no secret reaches a stored report or a log.

These need root (CI runs as root): the jail, the namespaces and the privilege drop are what is proven, and
the runs require every layer (HUB_SANDBOX_REQUIRE), so a machine that cannot build one fails here instead
of degrading. The packages are in tests/fixtures/hostile/ (see its README).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from registry import services
from registry.models import Environment, ValidationRun
from registry.services import validation
from tests.conftest import TESTS_DIR
from workers import tasks

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

HOSTILE = TESTS_DIR / "fixtures" / "hostile"
NOBODY = 65534


@pytest.fixture
def contained(validation_settings, openenv_python):
    if os.geteuid() != 0:
        pytest.skip("NOT PROVEN here: sandbox containment of hostile packages (the jail, namespaces and privilege "
                    "drop need root; CI runs these as root)")
    validation_settings.HUB_SANDBOX_REQUIRE = ["net", "pid", "fs", "user"]
    validation_settings.HUB_SANDBOX_MEMORY_MB = 512
    validation_settings.HUB_SANDBOX_DISK_MB = 64
    validation_settings.HUB_SANDBOX_STARTUP_S = 60.0
    return validation_settings


def validate(name: str, targets: dict, tmp_path: Path, settings) -> ValidationRun:
    """Index a copy of the hostile package (with its targets) as a local source and validate it inline."""
    source = tmp_path / "hostile"
    shutil.copytree(HOSTILE / name, source / name)
    (source / name / "targets.json").write_text(json.dumps(targets))
    settings.HUB_LOCAL_SOURCES = [f"hostile={source}"]
    assert services.local_sync().run.errors == 0
    env = Environment.objects.select_related("head").get(key=f"hostile/{name}")
    run, _ = validation.validation_run_request(revision=env.head, trigger="request")
    tasks.validate_run(run.pk)
    run.refresh_from_db()
    return run


def startup(run: ValidationRun) -> dict:
    assert run.state == "finished" and run.outcome in ("fail", "error"), (run.state, run.outcome, run.reason)
    check = next(r for r in run.report["results"] if r["check_id"] == "runtime.startup")
    assert check["status"] == "fail", check
    isolation = check["measured"]["sandbox_isolation"]
    for layer in ("net", "pid", "fs", "user"):
        assert any(line.startswith(f"{layer}: applied") for line in isolation), isolation
    return check


def evidence(check: dict) -> str:
    return "\n".join(check["evidence"])


def test_it_cannot_read_the_hubs_secrets(contained, tmp_path, monkeypatch, caplog):
    caplog.set_level("DEBUG")
    planted = {
        "SECRET_KEY": "sk-" + secrets.token_hex(16), "HF_TOKEN": "hf_" + secrets.token_hex(16),
        "DATABASE_URL": f"postgres://hub:{secrets.token_hex(12)}@127.0.0.1:5432/hub",
        "REDIS_URL": f"redis://:{secrets.token_hex(12)}@127.0.0.1:6379/0",
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    dotenv = Path(django_settings.BASE_DIR) / ".env"
    created = not dotenv.exists()
    if created:
        dotenv.write_text(f"SECRET_KEY=dotenv-{secrets.token_hex(16)}\nHF_TOKEN=hf_dotenv{secrets.token_hex(16)}\n")
    try:
        values = [v for line in dotenv.read_text().splitlines() if "=" in line
                  for v in [line.split("=", 1)[1].strip()] if len(v) >= 8]
        key_file = Path(django_settings.VAR_DIR) / "secret_key"
        forbidden = [*planted.values(), *values, django_settings.SECRET_KEY,
                     *([key_file.read_text().strip()] if key_file.exists() else [])]
        targets = {"variables": sorted(planted), "files": [
            str(dotenv), str(key_file), "/proc/1/environ", f"/proc/{os.getpid()}/environ", "/etc/shadow",
            str(Path(django_settings.BASE_DIR) / "hub" / "settings.py")]}
        run = validate("steal_secrets", targets, tmp_path, contained)
    finally:
        if created:
            dotenv.unlink()
    check = startup(run)
    text = evidence(check)
    assert f"read {dotenv}: FileNotFoundError" in text and f"read {key_file}: FileNotFoundError" in text
    assert "read /etc/shadow: FileNotFoundError" in text and "FOUND" not in text
    assert "read /proc/1/environ:" in text  # its own init: the sandbox's variables, none of the hub's
    stored = json.dumps(run.report) + run.reason + caplog.text
    leaked = [value for value in forbidden if value in stored]
    assert leaked == [], "a secret reached a stored report or a log"


@pytest.fixture
def listeners(tmp_path_factory):
    """What the hub's machine offers locally: a world-writable Unix socket in /tmp, an abstract socket, and a
    real Redis server on a Unix socket (when redis-server is installed)."""
    folder = Path(f"/tmp/hub-hostile-{secrets.token_hex(4)}")
    folder.mkdir(mode=0o755)
    plain = socket.socket(socket.AF_UNIX)
    plain.bind(str(folder / "world.sock"))
    os.chmod(folder / "world.sock", 0o777)
    plain.listen()
    plain.setblocking(False)
    abstract_name = f"hub-hostile-{secrets.token_hex(4)}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + abstract_name)
    abstract.listen()
    abstract.setblocking(False)
    redis_sock, redis = folder / "redis.sock", None
    if shutil.which("redis-server"):
        redis = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", str(redis_sock),
                                  "--unixsocketperm", "777", "--save", "", "--appendonly", "no"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if redis_sock.exists():
                break
            time.sleep(0.05)
    try:
        yield {"plain": plain, "abstract": abstract, "abstract_name": abstract_name,
               "unix": [str(folder / "world.sock"), *([str(redis_sock)] if redis else [])], "redis": redis_sock}
    finally:
        plain.close()
        abstract.close()
        if redis:
            redis.terminate()
            redis.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def _redis_connections(path: Path) -> int:
    reply = subprocess.run(["redis-cli", "-s", str(path), "info", "stats"], capture_output=True, text=True).stdout
    return int(next(line.split(":")[1] for line in reply.splitlines() if line.startswith("total_connections_received")))


def test_it_cannot_reach_the_hubs_services(contained, tmp_path, listeners):
    postgres = sorted(str(p) for p in Path("/var/run/postgresql").glob(".s.PGSQL.*") if p.is_socket())
    targets = {"tcp": [["127.0.0.1", 5432], ["127.0.0.1", 6379]], "unix": [*postgres, *listeners["unix"]],
               "abstract": [listeners["abstract_name"]]}
    run = validate("reach_services", targets, tmp_path, contained)
    text = evidence(startup(run))
    assert "CONNECTED" not in text
    for host, port in targets["tcp"]:
        assert f"tcp {host}:{port}: OSError: Network is unreachable" in text
    for path in targets["unix"]:
        assert f"unix {path}: FileNotFoundError" in text
    assert f"abstract @{listeners['abstract_name']}: ConnectionRefusedError" in text
    for name in ("plain", "abstract"):
        with pytest.raises(BlockingIOError):
            listeners[name].accept()  # nothing ever knocked
    if listeners["redis"].exists():
        assert _redis_connections(listeners["redis"]) == 1  # this check's own connection only


def test_it_cannot_write_outside_its_folder(contained, tmp_path, openenv_python):
    marker = f"hostile-{secrets.token_hex(6)}"
    venv = Path(openenv_python).parent.parent
    places = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path(django_settings.BASE_DIR),
              Path(django_settings.VAR_DIR), venv, Path(contained.HUB_SANDBOX_DIR) / "work",
              tmp_path / "hostile" / "write_outside"]
    targets = {"files": [str(place / marker) for place in places]}
    try:
        run = validate("write_outside", targets, tmp_path, contained)
        text = evidence(startup(run))
        assert f"write {venv / marker}: OSError: Read-only file system" in text
        written = [place / marker for place in places if (place / marker).exists()]
        assert written == [], "a hostile package wrote outside its sandbox"
    finally:
        for place in places:
            (place / marker).unlink(missing_ok=True)


def _nobody_processes() -> set[int]:
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uid_line.split()[1]) == NOBODY:
            found.add(int(status.parent.name))
    return found


def test_a_fork_bomb_is_contained(contained, tmp_path):
    before = _nobody_processes()
    run = validate("fork_bomb", {}, tmp_path, contained)
    text = evidence(startup(run))
    line = next(line for line in text.splitlines() if line.startswith("forked "))
    forked = int(line.split()[1])
    assert "then: BlockingIOError: Resource temporarily unavailable" in line
    assert forked < 256  # the per-user process limit, minus what nobody already runs
    assert _nobody_processes() <= before  # every child died with the sandbox


def test_filling_the_disk_stops_at_the_sandboxs_own_limit(contained, tmp_path):
    work = Path(contained.HUB_SANDBOX_DIR) / "work"
    run = validate("fill_disk", {}, tmp_path, contained)
    text = evidence(startup(run))
    line = next(line for line in text.splitlines() if line.startswith("wrote "))
    assert "then: OSError: No space left on device" in line
    assert int(line.split()[1]) <= contained.HUB_SANDBOX_DISK_MB
    assert not list(work.glob("**/fill-*.bin")) and not list(Path("/tmp").glob("fill-*.bin"))


def test_unbounded_allocation_stops_at_the_memory_limit(contained, tmp_path):
    run = validate("allocate_forever", {}, tmp_path, contained)
    text = evidence(startup(run))
    line = next(line for line in text.splitlines() if line.startswith("allocated "))
    assert line.endswith("then: MemoryError") and int(line.split()[1]) < contained.HUB_SANDBOX_MEMORY_MB
