"""What every part of the sandbox shares: its errors, its limits and configuration, and the layer names."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

MiB = 1024 * 1024
GiB = 1024 * MiB

# Isolation layer ids, as reported in RunningServer.applied and accepted by SandboxConfig.require.
LAYERS = frozenset({"net", "pid", "fs", "user", "rlimits", "session", "env"})

# Environment of the trusted wrappers (prlimit, unshare, setpriv, env, the jail's mount steps) and of probes.
TOOL_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class SandboxError(Exception):
    """The package could not be installed, started or kept within its limits; `log_tail` is the evidence, and
    `isolation` what the server was contained by."""

    def __init__(self, message: str, *, log_tail: str = "", isolation: tuple[str, ...] = ()) -> None:
        self.log_tail = log_tail
        self.isolation = isolation  # the layers the server ran in, when it got as far as starting
        if log_tail:
            message = f"{message}\n--- log (tail) ---\n{log_tail[-4000:]}"
        super().__init__(message)


class RequirementsError(SandboxError):
    """The package's declared dependencies are missing, malformed or not allowed."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one install or one server run. Defaults fit an OpenEnv server (FastAPI + Gradio)."""

    memory_bytes: int = 2 * GiB  # RLIMIT_AS of the server: address space, not resident memory
    cpu_seconds: int = 600  # RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL 5 s later
    wall_seconds: float = 900.0  # the server is killed this long after it was started, whatever happens
    startup_timeout_s: float = 120.0  # for the Unix socket to appear and /health to answer 200
    terminate_grace_s: float = 5.0  # between SIGTERM and SIGKILL at teardown
    max_processes: int = 256  # RLIMIT_NPROC: per user (all of nobody's threads), ignored for root
    max_file_bytes: int = 1 * GiB  # RLIMIT_FSIZE: largest file the server may write
    max_open_files: int = 1024  # RLIMIT_NOFILE
    # Everything the server may write, its package copy included: the size of its private root (a tmpfs, so
    # it is memory, not disk), when the filesystem layer applies.
    disk_bytes: int = 1 * GiB
    max_log_bytes: int = 4 * MiB  # server output kept in the log file; the rest is dropped (the tail is still kept)
    log_tail_bytes: int = 32 * 1024  # what log_tail() and SandboxError carry
    max_package_bytes: int = 512 * MiB  # total size of the package copy
    max_package_files: int = 50_000
    pip_timeout_s: float = 1800.0  # wall clock for one venv build
    pip_memory_bytes: int = 4 * GiB  # RLIMIT_AS of pip
    pip_max_file_bytes: int = 4 * GiB  # RLIMIT_FSIZE of pip (large wheels)


@dataclass(frozen=True)
class SandboxConfig:
    """Where the sandbox keeps things and which interpreter it builds venvs from.

    `python` must be runnable by `sandbox_user` for the privilege drop to work
    (a pyenv interpreter under a 0700 /root is not: the drop is then reported as
    not applied). `pip_index_args` are trusted operator options for pip (e.g.
    `("--index-url", URL)`); they are part of the venv key. `binary_only`
    passes `--only-binary=:all:` so that installing runs no package code; turn
    it off only for packages that need sdists, knowing their build backends
    then run unsandboxed, with network, as the calling user. `require` lists
    isolation layers ("net", "pid", "fs", "user", "rlimits") whose absence must
    fail the run instead of being reported.
    """

    venv_root: Path
    work_root: Path
    python: str = sys.executable
    pip_index_args: tuple[str, ...] = ()
    binary_only: bool = True
    sandbox_user: str = "nobody"
    require: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = set(self.require) - LAYERS
        if unknown:
            raise ValueError(f"unknown isolation layers {sorted(unknown)}; known: {sorted(LAYERS)}")


def clip(text: str, n: int = 80) -> str:
    """One line of a message, at most `n` characters."""
    text = text.replace("\n", " ")
    return text if len(text) <= n else text[: n - 1] + "…"


def discard(_line: str) -> None:
    pass
