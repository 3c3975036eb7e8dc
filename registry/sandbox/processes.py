"""Process plumbing: rlimits, process groups, output capture with caps, and HTTP over a Unix socket.

Nothing here isolates anything on its own (see isolation.py); it makes sure
that every child we start is bounded, is killed with its whole group, and
cannot flood us with output.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from .config import TOOL_ENV, MiB, SandboxError, SandboxLimits


class Capture:
    """A child's output: the first `max_bytes` into a file, the last `tail_bytes` in memory, lines to a callback."""

    def __init__(self, *, tail_bytes: int, log_path: Path | None = None, max_bytes: int = 0,
                 on_line: Callable[[str], None] | None = None) -> None:
        self._tail = bytearray()
        self._tail_bytes = tail_bytes
        self._lock = threading.Lock()
        self._file = open(log_path, "xb") if log_path else None  # closed in close()
        self._max_bytes = max_bytes
        self._written = 0
        self._on_line = on_line
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self._tail += chunk
            del self._tail[: max(0, len(self._tail) - self._tail_bytes)]
        if self._file is not None and self._written < self._max_bytes:
            part = chunk[: self._max_bytes - self._written]
            self._file.write(part)
            self._written += len(part)
            if self._written >= self._max_bytes:
                self._file.write(b"\n[sandbox: log truncated here; later output is only kept in the tail]\n")
            self._file.flush()
        if self._on_line is not None:
            lines = (self._partial + chunk).split(b"\n")
            self._partial = lines.pop()[-65536:]
            for line in lines:
                self._on_line(line.decode("utf-8", "replace").rstrip("\r"))

    def close(self) -> None:
        if self._on_line is not None and self._partial:
            self._on_line(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        if self._file is not None:
            self._file.close()
            self._file = None

    def tail(self) -> str:
        with self._lock:
            return bytes(self._tail).decode("utf-8", "replace")


def pump(fd: int, capture: Capture, should_stop: Callable[[], bool], drain_s: float = 2.0) -> None:
    """Read `fd` until EOF; once `should_stop()`, only until it is idle or for `drain_s` more seconds.

    A process that escaped teardown may hold the pipe open (and keep writing): EOF alone is not enough.
    """
    stop_at = None
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if stop_at is None and should_stop():
                stop_at = time.monotonic() + drain_s
            if not ready:
                if stop_at is not None:
                    return
                continue
            chunk = os.read(fd, 65536)
            if not chunk or (stop_at is not None and time.monotonic() > stop_at):
                return
            capture.feed(chunk)
    except OSError:
        return


def pip_rlimits(limits: SandboxLimits) -> dict[str, tuple[int, int]]:
    timeout = int(limits.pip_timeout_s)
    return {
        "as": (limits.pip_memory_bytes, limits.pip_memory_bytes),
        "cpu": (timeout, timeout + 5),
        "fsize": (limits.pip_max_file_bytes, limits.pip_max_file_bytes),
        "nofile": (4096, 4096),
        "core": (0, 0),
    }


def server_rlimits(limits: SandboxLimits) -> dict[str, tuple[int, int]]:
    return {
        "as": (limits.memory_bytes, limits.memory_bytes),
        "cpu": (limits.cpu_seconds, limits.cpu_seconds + 5),
        "fsize": (limits.max_file_bytes, limits.max_file_bytes),
        "nofile": (limits.max_open_files, limits.max_open_files),
        "nproc": (limits.max_processes, limits.max_processes),
        "core": (0, 0),
    }


_RLIMIT_CONSTANTS = {
    "as": resource.RLIMIT_AS, "cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE, "nproc": resource.RLIMIT_NPROC, "core": resource.RLIMIT_CORE,
}


def _clamped(rlimits: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    # An unprivileged process cannot raise a hard limit: stay under the current one.
    out = {}
    for name, (soft, hard) in rlimits.items():
        _, current_hard = resource.getrlimit(_RLIMIT_CONSTANTS[name])
        if current_hard != resource.RLIM_INFINITY and os.geteuid() != 0:
            hard = min(hard, current_hard)
        out[name] = (min(soft, hard), hard)
    return out


def rlimit_wrapper(rlimits: Mapping[str, tuple[int, int]]) -> tuple[list[str], Callable[[], None] | None, str]:
    """How to apply `rlimits` to a child: a `prlimit` argv prefix, or else a preexec_fn (not thread-safe)."""
    rlimits = _clamped(rlimits)
    prlimit = shutil.which("prlimit", path=TOOL_ENV["PATH"])
    if prlimit:
        return [prlimit, *(f"--{n}={s}:{h}" for n, (s, h) in rlimits.items()), "--"], None, "prlimit"

    def apply() -> None:
        for n, (s, h) in rlimits.items():
            resource.setrlimit(_RLIMIT_CONSTANTS[n], (s, h))

    # Only without prlimit(1): a preexec_fn runs Python between fork and exec, which can deadlock a threaded parent.
    return [], apply, "preexec_fn"


def kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def run_logged(cmd: list[str], *, cwd: Path, env: Mapping[str, str], deadline: float,
                limits: Mapping[str, tuple[int, int]], log: Callable[[str], None], what: str) -> None:
    """Run a trusted build step in its own process group with rlimits; kill the group at `deadline`."""
    prefix, preexec, _ = rlimit_wrapper(limits)
    capture = Capture(tail_bytes=16 * 1024, on_line=log)
    proc = subprocess.Popen(
        [*prefix, *cmd], cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec,
    )
    timed_out = False
    try:
        def stop() -> bool:
            nonlocal timed_out
            if proc.poll() is not None:
                return True
            timed_out = time.monotonic() > deadline
            return timed_out

        pump(proc.stdout.fileno(), capture, stop)
    finally:
        if proc.poll() is None:
            kill_group(proc.pid, signal.SIGKILL)
        proc.wait()
        kill_group(proc.pid, signal.SIGKILL)  # stragglers (e.g. a build backend's children)
        proc.stdout.close()
        capture.close()
    if timed_out:
        raise SandboxError(f"{what} timed out", log_tail=capture.tail())
    if proc.returncode != 0:
        raise SandboxError(f"{what} failed with exit status {proc.returncode}", log_tail=capture.tail())


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._uds_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._uds_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def uds_request(uds: str, method: str, path: str, body: bytes | None = None, *,
                headers: Mapping[str, str] | None = None, timeout: float = 10.0,
                max_bytes: int = 16 * MiB) -> tuple[int, bytes]:
    """One HTTP request over a Unix socket: (status, body). Raises OSError/HTTPException on failure."""
    conn = _UnixHTTPConnection(uds, timeout)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        response = conn.getresponse()
        return response.status, response.read(max_bytes)
    finally:
        conn.close()


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def children_of(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:  # kernel without CONFIG_PROC_CHILDREN: scan
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and parent_of(int(p)) == pid]
    except (OSError, ValueError):
        return []
