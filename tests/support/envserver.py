"""Start real OpenEnv environment servers for tests, and always stop them.

Each package is served the way a Space serves it: ``python -m uvicorn
server.app:app`` from the package directory, on a free loopback port or on a
Unix socket. The interpreter must have ``openenv`` installed: ``OPENENV_PYTHON`` names
one, else `interpreter()` builds it with the sandbox's venv builder
(registry/sandbox.py) and caches it where the local runner looks.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 120.0
# Where test venvs are cached: the local runner's own default (settings.HUB_SANDBOX_DIR), so both share one build.
SANDBOX_CACHE = Path(os.environ.get("HUB_SANDBOX_CACHE") or REPO / "var" / "sandbox").resolve()
SANDBOX_PYTHON = os.environ.get("HUB_SANDBOX_PYTHON") or (
    "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable)
OPENENV_REQUIREMENTS = ["openenv==0.10.0"]  # what every example and fixture package declares


def openenv_venv() -> Path:
    """A venv with openenv 0.10.0, built by the sandbox's own builder (slow once: it comes from PyPI), then cached."""
    from registry.sandbox import SandboxConfig, ensure_venv

    config = SandboxConfig(venv_root=SANDBOX_CACHE / "venvs", work_root=SANDBOX_CACHE / "work", python=SANDBOX_PYTHON)
    return ensure_venv(OPENENV_REQUIREMENTS, config=config)


def interpreter() -> tuple[str | None, str]:
    """(path to a Python with openenv, or None; the reason when None).

    OPENENV_PYTHON names one explicitly; otherwise the sandbox venv is built
    (a failure to build is an error, not a reason to skip).
    """
    python = os.environ.get("OPENENV_PYTHON")
    if not python:
        return str(openenv_venv() / "bin" / "python"), ""
    if not Path(python).is_file() or not os.access(python, os.X_OK):
        return None, f"OPENENV_PYTHON={python} is not an executable interpreter"
    return python, ""


_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def free_port() -> int:
    """A loopback port nothing listens on, never the same one twice in this process: servers that boot in
    parallel bind their ports later, and two of them given one port would answer for each other."""
    with _handed_out_lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port


class EnvServer:
    """One environment package served by uvicorn in its own process group.

    `start()` returns at once (`started_at` is time.monotonic() at launch);
    `wait_ready()` blocks until the server answers any HTTP request;
    `stop()` terminates, then kills, and is safe to call any number of times.
    """

    def __init__(self, package_dir: Path, *, python: str, uds: bool = False):
        self.package_dir = Path(package_dir)
        self.python = python
        self.name = self.package_dir.name
        self._tmp = Path(tempfile.mkdtemp(prefix=f"envserver-{self.name}-"))
        self.log_path = self._tmp / "server.log"
        self.uds = str(self._tmp / "server.sock") if uds else None
        self.port = None if uds else free_port()
        self.base_url = "http://localhost" if uds else f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.started_at: float | None = None

    def start(self) -> EnvServer:
        env = {k: v for k, v in os.environ.items() if k not in ("ENABLE_WEB_INTERFACE", "OPENENV_MODE", "PYTHONPATH")}
        where = ["--uds", self.uds] if self.uds else ["--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_path, "wb") as log:
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(
                [self.python, "-m", "uvicorn", "server.app:app", *where],
                cwd=self.package_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so stop() reaches any child too
            )
        return self

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> EnvServer:
        transport = httpx.HTTPTransport(uds=self.uds) if self.uds else None
        deadline = time.monotonic() + timeout_s
        with httpx.Client(transport=transport, trust_env=False, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    client.get(self.base_url + "/health")  # any HTTP answer means it is up
                    return self
                except httpx.TransportError:
                    time.sleep(0.25)
        raise RuntimeError(f"{self.name} gave no HTTP answer within {timeout_s:.0f} s:\n{self.log_tail()}")

    def request_stop(self) -> None:
        """Ask the server to shut down (SIGTERM) without waiting, so many can stop at once."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self, grace_s: float = 3.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after `grace_s`; always reaps it and removes its files."""
        self.request_stop()
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                # e.g. reset_hangs: a worker thread still sleeps in reset() and blocks shutdown.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        shutil.rmtree(self._tmp, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> EnvServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
