"""Running `openenv-hub` as a real process: piped or on a pseudo-terminal, with a clean environment."""

from __future__ import annotations

import errno
import os
import pty
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.envserver import SANDBOX_CACHE

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def both(self) -> str:
        return self.out + self.err


def _sandbox_cache_root(tmp: Path) -> Path:
    """A cache folder whose `sandbox/` is the test suite's sandbox cache (so the CLI reuses the venvs built)."""
    if SANDBOX_CACHE.name == "sandbox":
        return SANDBOX_CACHE.parent
    root = tmp / "cli-cache"
    root.mkdir(exist_ok=True)
    if not (root / "sandbox").exists():
        (root / "sandbox").symlink_to(SANDBOX_CACHE)
    return root


@pytest.fixture
def cli_env(tmp_path):
    """The environment the CLI runs in: no token, no Hugging Face login, config and cache under tmp_path."""
    home = tmp_path / "home"
    home.mkdir()
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
        "XDG_CONFIG_HOME": str(tmp_path / "config"), "OPENENV_HUB_CACHE_DIR": str(_sandbox_cache_root(tmp_path)),
        "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(REPO),
        "OPENENV_HUB_URL": "http://127.0.0.1:9",  # tests say where their hub is
    }


@pytest.fixture
def run_cli(cli_env):
    """run_cli(*args, env={...}, input="...") -> Ran: `python -m cli ARGS`, its stdout and stderr piped."""

    def run(*args: str, env: dict | None = None, input: str | None = None, timeout: float = 600) -> Ran:
        done = subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO, env={**cli_env, **(env or {})},
                              input=input, capture_output=True, text=True, timeout=timeout)
        return Ran(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def run_cli_tty(cli_env):
    """run_cli_tty(*args, env={...}, send="...") -> Ran: the CLI on a pseudo-terminal that is its controlling
    terminal (stdin, stdout and stderr, as in an interactive shell); `send` is typed once the terminal shows
    "hidden" (the password prompt); `out` is everything the terminal showed, `err` is empty."""

    def run(*args: str, env: dict | None = None, send: str | None = None, timeout: float = 600) -> Ran:
        master, slave = pty.openpty()
        # setsid -c: a session of its own whose controlling terminal is the pty (what getpass opens as /dev/tty).
        proc = subprocess.Popen(["setsid", "-c", sys.executable, "-m", "cli", *args], cwd=REPO,
                                env={**cli_env, "TERM": "xterm", "COLUMNS": "160", **(env or {})},
                                stdin=slave, stdout=slave, stderr=slave, close_fds=True)
        os.close(slave)
        chunks, deadline, sent = [], time.monotonic() + timeout, False
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.2)
                if send is not None and not sent and b"hidden" in b"".join(chunks):
                    os.write(master, send.encode())
                    sent = True
                if ready:
                    try:
                        data = os.read(master, 65536)
                    except OSError as exc:
                        if exc.errno != errno.EIO:
                            raise
                        break  # the child closed the terminal
                    if not data:
                        break
                    chunks.append(data)
                elif proc.poll() is not None:
                    break
        finally:
            os.close(master)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return Ran(proc.returncode, b"".join(chunks).decode("utf-8", "replace"), "")

    return run
