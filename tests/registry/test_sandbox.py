"""registry.sandbox with real processes, no mocks.

SLOW ON THE FIRST RUN: `test_slow_ensure_venv_builds_openenv_then_reuses_it`
(and the `openenv_venv` fixture every server test shares) installs
openenv==0.10.0 from the configured package index, about 2 minutes. The venv
is cached under $HUB_SANDBOX_CACHE (default <repo>/var/sandbox), so later runs
reuse it and the whole module takes well under a minute.

The venvs are built from $HUB_SANDBOX_PYTHON, default /usr/bin/python3 when it
exists: the server drops root to `nobody`, which must be able to execute the
interpreter (a pyenv Python under a 0700 /root cannot be, and the drop would be
reported as not applied). Other venvs are built offline from a wheel the test
writes itself (`--no-index --find-links`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from websockets.sync.client import unix_connect

from registry.sandbox import (
    RequirementsError,
    SandboxConfig,
    SandboxError,
    SandboxLimits,
    ensure_venv,
    package_requirements,
    running_server,
    venv_key,
)

from tests.support.envserver import OPENENV_REQUIREMENTS, REPO, SANDBOX_CACHE, SANDBOX_PYTHON

CACHE, PYTHON = SANDBOX_CACHE, SANDBOX_PYTHON
ECHO_ENV = REPO / "examples" / "envs" / "echo_env"
OPENENV = OPENENV_REQUIREMENTS
AS_ROOT = os.geteuid() == 0


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def tree_digest(root: Path) -> dict[str, tuple[str, int]]:
    """Every entry under root: content hash (or link target) and mode. Equal digests = untouched directory."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                content = "->" + os.readlink(path)
            elif path.is_dir():
                content = "dir"
            else:
                content = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(root))] = (content, st.st_mode)
    return out


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def pids_with_marker(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def fastapi_package(root: Path, app_source: str) -> Path:
    """A minimal environment package: plain FastAPI (brought by openenv) so that it starts in about a second."""
    return write_tree(root, {
        "pyproject.toml": '[project]\nname = "probe"\nversion = "0"\ndependencies = ["openenv==0.10.0"]\n',
        "server/__init__.py": "",
        "server/app.py": app_source,
    })


# ---------------------------------------------------------------------------
# package_requirements / venv_key: pure, no processes
# ---------------------------------------------------------------------------


def test_requirements_of_the_echo_example():
    assert package_requirements(ECHO_ENV) == ["openenv==0.10.0"]


def test_requirements_from_pyproject_are_validated_and_canonical(tmp_path):
    write_tree(tmp_path, {"pyproject.toml": """
        [project]
        name = "x"
        dependencies = [
            "openenv==0.10.0",
            "Foo_Bar[Zed, alpha] >= 1.0 , <2 ; python_version >= '3.10'",
            "numpy (>=1.26)",
            "openenv == 0.10.0",
        ]
    """, "requirements.txt": "ignored-when-pyproject-declares==1\n"})
    assert package_requirements(tmp_path) == [
        "openenv==0.10.0",
        'foo-bar[alpha,zed]<2,>=1.0; python_version >= "3.10"',
        "numpy>=1.26",
    ]


def test_requirements_txt_when_pyproject_has_dynamic_dependencies(tmp_path):
    write_tree(tmp_path, {
        "pyproject.toml": '[project]\nname = "x"\ndynamic = ["dependencies"]\n',
        "server/requirements.txt": """
            # the scaffold's list
            openenv==0.10.0  # pinned
            requests>=2 \\
                ,<3

            uvicorn[standard]
        """,
    })
    assert package_requirements(tmp_path) == ["openenv==0.10.0", "requests<3,>=2", "uvicorn[standard]"]


def test_an_explicitly_empty_dependency_list_is_empty(tmp_path):
    write_tree(tmp_path, {"pyproject.toml": '[project]\nname = "x"\ndependencies = []\n'})
    assert package_requirements(tmp_path) == []


HOSTILE = [
    "pkg @ https://evil.example/pkg-1.0-py3-none-any.whl",
    "pkg@file:///etc/passwd",
    "pkg @ file:../outside",
    "https://evil.example/pkg.tar.gz",
    "git+https://evil.example/repo.git",
    "./local-dir",
    "../outside",
    "/abs/path/pkg",
    "pkg.whl",
    "pkg-1.0.tar.gz",
    "--index-url https://evil.example/simple",
    "--extra-index-url=https://evil.example/simple",
    "-i https://evil.example/simple",
    "-e .",
    "-r other.txt",
    "-c constraints.txt",
    "--find-links /tmp",
    "pkg==1.0 --hash=sha256:" + "0" * 64,
    "pkg; __import__('os').system('id')",
    "pkg; os_name == 'posix' or whatever",
    "pkg ${HOME}",
    "pkg==1.0\n--index-url=https://evil.example",
    "",
    "x" * 600,
]


@pytest.mark.parametrize("requirement", HOSTILE)
def test_hostile_requirements_are_refused_in_pyproject(tmp_path, requirement):
    write_tree(tmp_path, {"pyproject.toml": "[project]\nname = 'x'\ndependencies = [" + json.dumps(requirement) + "]\n"})
    with pytest.raises(RequirementsError):
        package_requirements(tmp_path)


@pytest.mark.parametrize("line", [r for r in HOSTILE if r and "\n" not in r])
def test_hostile_requirements_are_refused_in_requirements_txt(tmp_path, line):
    (tmp_path / "requirements.txt").write_text(f"openenv==0.10.0\n{line}\n")
    with pytest.raises(RequirementsError):
        package_requirements(tmp_path)


def test_huge_lists_and_files_are_refused(tmp_path):
    many = tmp_path / "many"
    write_tree(many, {"requirements.txt": "".join(f"pkg{i}\n" for i in range(5000))})
    with pytest.raises(RequirementsError, match="at most"):
        package_requirements(many)
    big = tmp_path / "big"
    write_tree(big, {"pyproject.toml": "# " + "x" * (2 * 1024 * 1024) + "\n"})
    with pytest.raises(RequirementsError, match="larger than"):
        package_requirements(big)


def test_malformed_declarations_are_refused(tmp_path):
    cases = {
        "toml": {"pyproject.toml": "[project\n"},
        "not-a-list": {"pyproject.toml": '[project]\ndependencies = "openenv"\n'},
        "not-strings": {"pyproject.toml": "[project]\ndependencies = [1, 2]\n"},
        "nothing": {"README.md": "no dependencies declared anywhere\n"},
    }
    for name, files in cases.items():
        with pytest.raises(RequirementsError):
            package_requirements(write_tree(tmp_path / name, files))


def test_a_requirements_symlink_out_of_the_package_is_refused_without_reading_it(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hf_supersecrettoken\n")
    package = tmp_path / "package"
    package.mkdir()
    (package / "requirements.txt").symlink_to(secret)
    with pytest.raises(RequirementsError, match="outside the package") as info:
        package_requirements(package)
    assert "supersecret" not in str(info.value)


def test_venv_key_ignores_order_spelling_and_duplicates():
    key = venv_key(["openenv==0.10.0", "Foo_Bar >= 1.0, <2"], PYTHON)
    assert venv_key(["foo-bar<2,>=1.0", "openenv == 0.10.0", "OpenEnv==0.10.0"], PYTHON) == key
    assert venv_key(["openenv==0.10.1", "foo-bar<2,>=1.0"], PYTHON) != key
    assert venv_key(["openenv==0.10.0", "Foo_Bar >= 1.0, <2"], PYTHON, options=["--only-binary=:all:"]) != key
    assert key.startswith("cpython-") and "/" not in key


def test_venv_key_is_stable_across_processes_and_interpreters():
    code = "from registry.sandbox import venv_key; print(venv_key(['b>=1', 'a'], %r))" % PYTHON
    again = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert again.stdout.strip() == venv_key(["a", "b>=1"], PYTHON)
    other = "/usr/bin/python3" if PYTHON != "/usr/bin/python3" else sys.executable
    version = subprocess.run([other, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if version != subprocess.run([PYTHON, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True, check=True).stdout.strip():
        assert venv_key(["a"], other) != venv_key(["a"], PYTHON)


# ---------------------------------------------------------------------------
# ensure_venv
# ---------------------------------------------------------------------------


def make_wheel(directory: Path, name: str = "hubsandboxprobe", version: str = "0.1") -> Path:
    """A real, minimal pure-Python wheel, so that venv tests need no package index."""
    files = {
        f"{name}/__init__.py": "VALUE = 42\n",
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{name}-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join(record) + "\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


@pytest.fixture
def offline_config(tmp_path):
    wheels = tmp_path / "wheels"
    make_wheel(wheels)
    return SandboxConfig(venv_root=tmp_path / "venvs", work_root=tmp_path / "work", python=PYTHON,
                         pip_index_args=("--no-index", "--find-links", str(wheels)))


def test_concurrent_ensure_venv_builds_once(offline_config):
    barrier = threading.Barrier(2)
    results, logs, errors = {}, {0: [], 1: []}, []

    def worker(i):
        try:
            barrier.wait()
            results[i] = ensure_venv(["HubSandboxProbe==0.1"], config=offline_config, log=logs[i].append)
        except Exception as e:  # surfaced by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert results[0] == results[1]
    all_lines = logs[0] + logs[1]
    assert sum(": building with " in line for line in all_lines) == 1, all_lines
    assert sum("built by another worker" in line for line in all_lines) == 1, all_lines
    venv = results[0]
    out = subprocess.run([venv / "bin" / "python", "-c", "import hubsandboxprobe; print(hubsandboxprobe.VALUE)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "42"
    info = json.loads((venv / "sandbox-venv.json").read_text())
    assert info["requirements"] == ["hubsandboxprobe==0.1"]
    assert [p.name for p in offline_config.venv_root.iterdir() if p.name.startswith(".build-")] == []


def test_a_failed_build_leaves_nothing_behind(offline_config):
    lines = []
    with pytest.raises(SandboxError, match="pip install failed") as info:
        ensure_venv(["hubsandboxprobe==9.9"], config=offline_config, log=lines.append)
    assert "hubsandboxprobe" in info.value.log_tail
    assert any("building" in line for line in lines)
    left = sorted(p.name for p in offline_config.venv_root.iterdir() if p.is_dir())
    assert left in ([], [".pip-cache"]), left


def test_ensure_venv_revalidates_requirements(offline_config):
    with pytest.raises(RequirementsError):
        ensure_venv(["--index-url=https://evil.example/simple"], config=offline_config)
    assert not offline_config.venv_root.exists()


@pytest.fixture(scope="module")
def config():
    return SandboxConfig(venv_root=CACHE / "venvs", work_root=CACHE / "work", python=PYTHON)


@pytest.fixture(scope="module")
def openenv_venv(config):
    """The venv every server test uses; built (slowly) once, then cached in HUB_SANDBOX_CACHE."""
    return ensure_venv(OPENENV, config=config)


def test_slow_ensure_venv_builds_openenv_then_reuses_it(config):
    """SLOW the first time (~2 min, downloads openenv and its dependencies); instant once cached."""
    first_log = []
    venv = ensure_venv(OPENENV, config=config, log=first_log.append)
    assert (venv / "sandbox-venv.json").is_file()
    version = subprocess.run(
        [venv / "bin" / "python", "-c", "import importlib.metadata as m; print(m.version('openenv'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert version == "0.10.0"
    second_log = []
    assert ensure_venv(["OpenEnv == 0.10.0"], config=config, log=second_log.append) == venv
    assert len(second_log) == 1 and second_log[0].endswith(": cached"), second_log  # no pip run
    mode = (venv / "lib").stat().st_mode
    assert mode & 0o005 == 0o005 and mode & 0o002 == 0  # readable by the sandbox user, writable by nobody else


# ---------------------------------------------------------------------------
# running_server
# ---------------------------------------------------------------------------


@pytest.mark.integration
def test_echo_env_answers_health_and_a_websocket_episode(config, openenv_venv):
    for _ in range(60):  # another engineer may still be writing the example
        if (ECHO_ENV / "server" / "app.py").exists():
            break
        time.sleep(1)
    before = tree_digest(ECHO_ENV)
    limits = SandboxLimits(terminate_grace_s=30)  # a loaded CI box must not turn the graceful stop into SIGKILL
    with running_server(ECHO_ENV, venv=openenv_venv, config=config, limits=limits) as server:
        assert server.started_at <= time.monotonic()
        assert server.request("GET", "/health") == (200, b'{"status":"healthy"}')
        with unix_connect(server.uds, uri="ws://localhost/ws") as ws:
            ws.send(json.dumps({"type": "reset", "data": {"episode_id": "ep-1"}}))
            reset = json.loads(ws.recv(timeout=60))
            assert reset["type"] == "observation" and reset["data"]["done"] is False
            ws.send(json.dumps({"type": "step", "data": {"message": "hello"}}))
            step = json.loads(ws.recv(timeout=60))
            assert step["data"]["observation"]["echoed_message"] == "hello"
            ws.send(json.dumps({"type": "state"}))
            state = json.loads(ws.recv(timeout=60))
            assert state["data"]["episode_id"] == "ep-1" and state["data"]["step_count"] == 1
        if AS_ROOT:
            assert {"net", "pid", "user", "rlimits"} <= server.applied, server.isolation
        assert "Uvicorn running on unix socket" in server.log_tail()
        pid, server_pid, workdir = server.pid, server.server_pid, server.workdir
    assert not group_alive(pid) and not process_alive(pid) and not process_alive(server_pid)
    assert not workdir.exists()
    assert tree_digest(ECHO_ENV) == before
    assert "Application shutdown complete" in server.log_tail()  # SIGTERM first: a graceful stop


PROBE_APP = """
import os, socket, sys
from pathlib import Path
from fastapi import FastAPI

app = FastAPI()

@app.get("/health")
def health():
    return {"status": "healthy"}

@app.get("/probe")
def probe():
    out = {"uid": os.getuid(), "env": dict(os.environ), "cwd": os.getcwd()}
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=3).close()
        out["tcp"] = "connected"
    except OSError as e:
        out["tcp"] = f"{type(e).__name__}: {e}"
    try:
        socket.getaddrinfo("pypi.org", 443)
        out["dns"] = "resolved"
    except OSError as e:
        out["dns"] = f"{type(e).__name__}: {e}"
    Path("written-by-env.txt").write_text("the copy is writable")
    try:
        Path(sys.prefix, "planted.pth").write_text("import os")
        out["venv_write"] = "ok"
    except OSError as e:
        out["venv_write"] = f"{type(e).__name__}: {e}"
    out["visible_pids"] = len([p for p in os.listdir("/proc") if p.isdigit()])
    return out
"""


@pytest.mark.integration
def test_the_server_has_no_network_no_credentials_and_no_root(tmp_path, config, openenv_venv, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_parent_secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:pw@db/hub")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    package = fastapi_package(tmp_path / "probe", PROBE_APP.replace("PORT", str(port)))
    (package / "data").mkdir()
    (package / "data" / "real.txt").write_text("inside")
    (package / "data" / "link.txt").symlink_to("real.txt")
    before = tree_digest(package)
    try:
        with running_server(package, venv=openenv_venv, config=config, env={"OPENENV_MODE": "simulation"}) as server:
            status, body = server.request("GET", "/probe", timeout=30)
            assert status == 200, body
            probe = json.loads(body)
            assert (server.workdir / "written-by-env.txt").exists()
            assert (server.workdir / "data" / "link.txt").read_text() == "inside"
        if not AS_ROOT:
            pytest.skip("namespaces and the privilege drop need root here; isolation was: " + repr(server.isolation))
        assert "net" in server.applied
        assert probe["tcp"].startswith("OSError") and "unreachable" in probe["tcp"], probe["tcp"]
        assert probe["dns"] != "resolved"
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever reached the host's loopback
        assert probe["uid"] == 65534
        # The venv is bound read-only into the jail; without one, it is simply not nobody's to write.
        refused = "Read-only file system" if "fs" in server.applied else "PermissionError"
        assert refused in probe["venv_write"], probe["venv_write"]
        assert not (openenv_venv / "planted.pth").exists()
        assert probe["visible_pids"] <= 3  # own PID namespace: the server and nothing of the host
        assert set(probe["env"]) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
                                     "OPENENV_MODE", "LC_CTYPE"}, probe["env"]
        assert "hf_parent_secret" not in body.decode() and "postgres://" not in body.decode()
        assert probe["env"]["OPENENV_MODE"] == "simulation"
    finally:
        listener.close()
    assert tree_digest(package) == before  # the original package was never written


@pytest.mark.integration
def test_every_process_is_gone_after_exit_even_one_that_left_the_group(tmp_path, config, openenv_venv):
    marker = f"hub-sandbox-escapee-{uuid.uuid4().hex}"
    package = fastapi_package(tmp_path / "escape", f"""
        import subprocess, sys
        from fastapi import FastAPI
        # A child in its own session: out of the process group the sandbox kills.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "{marker}"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        app = FastAPI()

        @app.get("/health")
        def health():
            return {{"status": "healthy"}}
    """)
    try:
        with running_server(package, venv=openenv_venv, config=config) as server:
            assert len(pids_with_marker(marker)) == 1
            pid, server_pid = server.pid, server.server_pid
            assert os.getpgid(pid) == pid and os.getsid(pid) == pid  # own session and group
        assert not group_alive(pid) and not process_alive(pid) and not process_alive(server_pid)
        if "pid" in server.applied:
            assert pids_with_marker(marker) == []
        else:
            pytest.xfail("no PID namespace here: a child that calls setsid() survives teardown")
    finally:
        for leftover in pids_with_marker(marker):
            os.kill(leftover, 9)


@pytest.mark.integration
def test_the_memory_limit_stops_a_package_that_allocates_too_much(tmp_path, config, openenv_venv):
    package = fastapi_package(tmp_path / "hog", """
        print("allocating 3 GiB", flush=True)
        hog = bytearray(3 * 1024**3)
        app = None
    """)
    limits = SandboxLimits(memory_bytes=2 * 1024**3)
    with pytest.raises(SandboxError, match="exited with status") as info:
        with running_server(package, venv=openenv_venv, config=config, limits=limits):
            pass
    assert "allocating 3 GiB" in info.value.log_tail and "MemoryError" in info.value.log_tail


@pytest.mark.integration
def test_a_server_that_never_answers_fails_within_the_startup_timeout(tmp_path, config, openenv_venv):
    package = fastapi_package(tmp_path / "stuck", """
        import time
        print("warming up forever", flush=True)
        time.sleep(3600)
    """)
    limits = SandboxLimits(startup_timeout_s=3, terminate_grace_s=1)
    run_dirs = set(config.work_root.glob("sbx-*"))
    started = time.monotonic()
    with pytest.raises(SandboxError, match="did not answer HTTP within 3 s") as info:
        with running_server(package, venv=openenv_venv, config=config, limits=limits):
            pass
    assert time.monotonic() - started < 3 + 1 + 6  # timeout + grace + slack for a loaded machine
    assert "warming up forever" in info.value.log_tail
    assert "warming up forever" in str(info.value)
    assert set(config.work_root.glob("sbx-*")) == run_dirs  # its working copy was removed too


RAW_ASGI_APP = """
# No framework: starts in a fraction of a second even on a loaded machine.
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"status":"healthy"}'})
"""


@pytest.mark.integration
def test_the_wall_clock_deadline_kills_a_running_server(tmp_path, config, openenv_venv):
    package = write_tree(tmp_path / "quick", {"server/__init__.py": "", "server/app.py": RAW_ASGI_APP})
    limits = SandboxLimits(wall_seconds=5, terminate_grace_s=1)
    with running_server(package, venv=openenv_venv, config=config, limits=limits) as server:
        assert server.request("GET", "/health")[0] == 200
        assert 0 < server.remaining_s() <= 5
        while not server.expired and time.monotonic() < server.deadline + 5:
            time.sleep(0.1)
        assert server.expired
        assert not process_alive(server.server_pid) and not group_alive(server.pid)
        with pytest.raises(OSError):
            server.request("GET", "/health", timeout=2)


@pytest.mark.integration
def test_the_wall_clock_deadline_also_bounds_startup(tmp_path, config, openenv_venv):
    package = write_tree(tmp_path / "stuck", {"server/__init__.py": "",
                                              "server/app.py": "import time\ntime.sleep(3600)\n"})
    limits = SandboxLimits(wall_seconds=2, startup_timeout_s=60, terminate_grace_s=1)
    started = time.monotonic()
    with pytest.raises(SandboxError, match="killed at the wall-clock deadline"):
        with running_server(package, venv=openenv_venv, config=config, limits=limits):
            pytest.fail("must not start")
    assert time.monotonic() - started < 2 + 1 + 6


def test_symlinks_out_of_the_package_are_refused_before_anything_runs(tmp_path, config):
    package = write_tree(tmp_path / "leaky", {"server/app.py": "app = None\n"})
    (package / "server" / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(SandboxError, match="points outside the package"):
        with running_server(package, venv=tmp_path / "no-venv-needed", config=config):
            pytest.fail("must not start")


@pytest.mark.parametrize("app", ["--reload", "server.app:app --host 0.0.0.0", "server/app.py:app", "app"])
def test_the_app_reference_cannot_inject_options(tmp_path, config, app):
    with pytest.raises(SandboxError, match="module.path:attribute"):
        with running_server(tmp_path, venv=tmp_path, app=app, config=config):
            pytest.fail("must not start")


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PATH", "PYTHONPATH", "HOME", "UVICORN_FD", "BAD-NAME", "GCONV_PATH"])
def test_extra_environment_cannot_override_the_sandbox(tmp_path, config, name):
    write_tree(tmp_path / "pkg", {"server/app.py": "app = None\n"})
    with pytest.raises(SandboxError, match="reserved|invalid"):
        with running_server(tmp_path / "pkg", venv=tmp_path, config=config, env={name: "x"}):
            pytest.fail("must not start")


def test_require_names_known_layers():
    with pytest.raises(ValueError, match="unknown isolation layers"):
        SandboxConfig(venv_root=CACHE, work_root=CACHE, require=frozenset({"net", "teleport"}))


@pytest.mark.integration
def test_a_hub_cache_snapshot_runs_when_its_blobs_folder_is_allowed(tmp_path, config, openenv_venv):
    """huggingface_hub's cache: snapshots/<sha>/<file> are symlinks to ../../blobs/<hash>."""
    repo = tmp_path / "spaces--owner--probe"
    sources = {
        "openenv.yaml": "name: probe\n",
        "server/__init__.py": "",
        "server/app.py": "from fastapi import FastAPI\napp = FastAPI()\n\n@app.get('/health')\ndef health():\n"
                         "    return {'status': 'healthy'}\n",
    }
    snapshot = repo / "snapshots" / ("a" * 40)
    for name, text in sources.items():
        blob = repo / "blobs" / hashlib.sha256(text.encode()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_text(text)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    with pytest.raises(SandboxError, match="points outside the package"):
        with running_server(snapshot, venv=openenv_venv, config=config):
            pytest.fail("must not start without link_root")
    with running_server(snapshot, venv=openenv_venv, config=config, link_root=repo) as server:
        assert server.request("GET", "/health")[0] == 200
        assert not (server.workdir / "server" / "app.py").is_symlink()


def test_a_missing_package_is_a_sandbox_error(tmp_path, config):
    with pytest.raises(SandboxError, match="cannot read the package"):
        with running_server(tmp_path / "nope", venv=tmp_path, config=config):
            pytest.fail("must not start")
