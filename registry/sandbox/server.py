"""The running server: the package's working copy, the environment it gets, starting it inside the isolation
plan, waiting for its first HTTP answer, the wall-clock deadline, and a teardown that always happens."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from registry.manifest import DEFAULT_APP

from .config import TOOL_ENV, MiB, SandboxConfig, SandboxError, SandboxLimits, clip
from .isolation import JAIL_APP, JAIL_SOCKET, JAIL_TMP, plan_isolation
from .processes import Capture, children_of, kill_group, parent_of, pump, uds_request

# Environment variables a caller may add for the server (e.g. a manifest's Space `variables`).
MAX_EXTRA_ENV = 64
MAX_ENV_VALUE = 4096
# Linux sun_path is 108 bytes including the terminating NUL.
MAX_UDS_PATH = 107


def _copy_package(src: Path, dest: Path, limits: SandboxLimits, link_root: Path | None) -> None:
    """Copy the package into `dest` (which exists), refusing what could reach outside it.

    A symlink is allowed only if it resolves inside the package, or inside
    `link_root` (a Hub cache repo folder, whose snapshot files are links into
    `blobs/`). File links are copied as regular files; directory links inside
    the package become relative links inside the copy; special files are
    refused. `.git` is skipped. Set-id bits are dropped.
    """
    try:
        root = src.resolve(strict=True)
    except OSError as e:
        raise SandboxError(f"cannot read the package at {src}: {e}") from None
    if not root.is_dir():
        raise SandboxError(f"{src} is not a directory")
    allowed = [root] + ([Path(link_root).resolve()] if link_root else [])
    total = files = 0
    dir_links: list[tuple[Path, Path]] = []

    def account(size: int) -> None:
        nonlocal total, files
        total += size
        files += 1
        if total > limits.max_package_bytes or files > limits.max_package_files:
            raise SandboxError(f"the package is larger than {limits.max_package_bytes // MiB} MiB "
                               f"or {limits.max_package_files} files")

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(root)
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in [*dirnames, *filenames]:
            path = here / name
            rel = rel_dir / name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                target = Path(os.path.realpath(path))
                if not any(target.is_relative_to(a) for a in allowed):
                    raise SandboxError(f"symlink {rel} points outside the package")
                if target.is_dir():
                    if not target.is_relative_to(root):
                        raise SandboxError(f"symlink {rel} points to a directory outside the package")
                    dir_links.append((rel, target.relative_to(root)))
                elif target.is_file():
                    account(target.stat().st_size)
                    shutil.copyfile(target, dest / rel)
                    os.chmod(dest / rel, 0o644)
                # a dangling link inside the package is dropped: nothing to copy
            elif stat.S_ISDIR(st.st_mode):
                (dest / rel).mkdir(mode=0o755)
            elif stat.S_ISREG(st.st_mode):
                account(st.st_size)
                shutil.copyfile(path, dest / rel)
                os.chmod(dest / rel, 0o755 if st.st_mode & 0o100 else 0o644)
            else:
                raise SandboxError(f"{rel} is a special file (fifo, socket or device)")
    for rel, target_rel in dir_links:
        link = dest / rel
        os.symlink(os.path.relpath(dest / target_rel, link.parent), link)


def _remove_tree(path: Path) -> None:
    def retry(func, p, _exc):  # a sandbox that chmod'ed things 000 (only matters when not root)
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry)
    else:  # pragma: no cover (the hub runs 3.12+; onerror is deprecated there)
        shutil.rmtree(path, onerror=retry)


class _Supervisor:
    """Owns the server process tree: finds its namespace init, enforces the deadline, stops it exactly once."""

    def __init__(self, proc: subprocess.Popen, capture: Capture, *, grace: float, has_pid_ns: bool) -> None:
        self.proc = proc
        self.capture = capture
        self.grace = grace
        self.has_pid_ns = has_pid_ns
        self.expired = False
        self.server_pid: int | None = None if has_pid_ns else proc.pid
        self._pidfd: int | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._timer: threading.Timer | None = None
        self._pump = threading.Thread(
            target=pump, args=(proc.stdout.fileno(), capture, self._stopped.is_set), daemon=True,
            name=f"sandbox-log-{proc.pid}",
        )
        self._pump.start()
        if not has_pid_ns:
            self._open_pidfd(proc.pid)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _open_pidfd(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            self._pidfd = os.pidfd_open(pid)

    def find_init(self) -> None:
        """Pin (with a pidfd) the namespace's init, the child `unshare --fork` made: killing it kills the namespace."""
        if self.server_pid is not None or self.proc.poll() is not None:
            return
        for pid in children_of(self.proc.pid)[:1]:
            self._open_pidfd(pid)
            # The pidfd is race-free from here on; check it is still unshare's child (not a recycled pid).
            if parent_of(pid) == self.proc.pid:
                self.server_pid = pid
            elif self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None

    def start_deadline(self, seconds: float) -> None:
        def expire() -> None:
            self.stop(deadline=True)

        self._timer = threading.Timer(seconds, expire)
        self._timer.daemon = True
        self._timer.start()

    def _signal(self, sig: int) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, sig)
            # In a PID namespace the init's exit takes everything else with it, and a second SIGTERM
            # through the group would make uvicorn skip its graceful shutdown.
            if self.has_pid_ns and sig != signal.SIGKILL:
                return
        kill_group(self.proc.pid, sig)

    def _server_gone(self, timeout: float) -> bool:
        if self._pidfd is not None:
            ready, _, _ = select.select([self._pidfd], [], [], timeout)
            if not ready:
                return False
        try:
            self.proc.wait(timeout=timeout if self._pidfd is None else 1.0)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self, *, deadline: bool = False) -> None:
        """SIGTERM, then SIGKILL after the grace period, to the server and all it started; idempotent, thread-safe."""
        with self._lock:
            if self._stopped.is_set():
                return
            self.expired = deadline
            if self._timer is not None and threading.current_thread() is not self._timer:
                self._timer.cancel()
            if self.proc.poll() is None or self._pidfd is not None:
                self._signal(signal.SIGTERM)
                self._server_gone(self.grace)
            self._signal(signal.SIGKILL)  # a no-op for what already exited
            self.proc.wait()
            kill_group(self.proc.pid, signal.SIGKILL)
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            self._stopped.set()
            self._pump.join(timeout=5)
            self.proc.stdout.close()
            self.capture.close()


@dataclass(eq=False)
class RunningServer:
    """A package's server listening on a Unix socket inside the sandbox; valid inside `running_server` only.

    `pid` is the sandbox's root process, leader of its own session and process
    group (the `prlimit`/`unshare` wrapper when used); `server_pid` the
    server's Python process as seen from the host. `isolation` says, one line
    per layer, what was applied and what was not; `applied` holds the ids.
    """

    uds: str
    pid: int
    started_at: float  # time.monotonic() when the process was spawned
    ready_after_s: float
    deadline: float  # time.monotonic() after which the server is killed
    workdir: Path  # the package copy, the server's cwd and HOME, as the host reaches it
    isolation: tuple[str, ...]
    applied: frozenset[str]
    command: tuple[str, ...]
    base_url: str = "http://localhost"
    _supervisor: _Supervisor | None = field(default=None, repr=False)

    @property
    def server_pid(self) -> int | None:
        return self._supervisor.server_pid if self._supervisor else None

    @property
    def expired(self) -> bool:
        """The wall-clock deadline passed and the server was killed."""
        return bool(self._supervisor and self._supervisor.expired and self._supervisor.stopped)

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def log_tail(self) -> str:
        """The last `limits.log_tail_bytes` of the server's stdout+stderr (also after teardown)."""
        return self._supervisor.capture.tail() if self._supervisor else ""

    def request(self, method: str, path: str, body: bytes | None = None, *,
                headers: Mapping[str, str] | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
        """One HTTP request to the server over its Unix socket: (status, body)."""
        return uds_request(self.uds, method, path, body, headers=headers, timeout=timeout)


_NAME_PATH = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_APP_RE = re.compile(rf"{_NAME_PATH}:{_NAME_PATH}")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_RESERVED_ENV = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "SHELL", "USER", "LOGNAME"}
_RESERVED_ENV_PREFIXES = ("LD_", "PYTHON", "UVICORN_", "GCONV_", "MALLOC_", "GLIBC_")


def _checked_extra_env(extra: Mapping[str, str]) -> dict[str, str]:
    """Caller-supplied variables for the server, refusing any that would override the sandbox's own."""
    if len(extra) > MAX_EXTRA_ENV:
        raise SandboxError(f"at most {MAX_EXTRA_ENV} extra environment variables")
    for name, value in extra.items():
        if not isinstance(name, str) or not _ENV_NAME_RE.fullmatch(name):
            raise SandboxError(f"invalid environment variable name {clip(str(name))!r}")
        if name.upper() in _RESERVED_ENV or name.upper().startswith(_RESERVED_ENV_PREFIXES):
            raise SandboxError(f"environment variable {name} is reserved by the sandbox")
        if not isinstance(value, str) or len(value) > MAX_ENV_VALUE or "\0" in value:
            raise SandboxError(f"environment variable {name} must be a string under {MAX_ENV_VALUE} characters")
    return dict(extra)


def _server_env(venv: Path, home: str, tmp: str, extra: Mapping[str, str]) -> dict[str, str]:
    return {
        "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


@contextlib.contextmanager
def running_server(
    package_dir: Path,
    *,
    venv: Path,
    app: str = DEFAULT_APP,
    config: SandboxConfig,
    limits: SandboxLimits = SandboxLimits(),
    env: Mapping[str, str] | None = None,
    link_root: Path | None = None,
) -> Iterator[RunningServer]:
    """Start `app` from a copy of `package_dir` with `venv`'s uvicorn on a Unix socket; yield once it answers HTTP.

    The original directory is never written: the server runs in a fresh copy
    (inside its jail when the filesystem layer applies, else under
    `config.work_root`), which is its cwd and HOME, with an environment built
    from scratch (PATH, HOME, TMPDIR, LANG, PYTHONDONTWRITEBYTECODE,
    PYTHONUNBUFFERED, plus `env`, e.g. the manifest's Space variables or
    OPENENV_MODE, validated; nothing is inherited from this process). If the
    process exits, or does not answer HTTP within `limits.startup_timeout_s`,
    `SandboxError` carries the log tail. On exit, and at the wall-clock
    deadline, the whole process tree is stopped (SIGTERM, then SIGKILL) and
    the copy is deleted.
    """
    if not _APP_RE.fullmatch(app):
        raise SandboxError(f"app must look like 'module.path:attribute', not {clip(app)!r}")
    venv = Path(venv)
    python = venv / "bin" / "python"
    extra_env = _checked_extra_env(env or {})
    work_root = Path(config.work_root)
    work_root.mkdir(parents=True, exist_ok=True)
    if work_root.stat().st_uid == os.geteuid():
        # Every sandbox runs as the same user: it may traverse work_root but not list it, so it cannot
        # find another run's copy (the run dirs have unguessable names).
        os.chmod(work_root, 0o711)
    run_dir = Path(tempfile.mkdtemp(prefix="sbx-", dir=work_root))
    supervisor: _Supervisor | None = None
    try:
        os.chmod(run_dir, 0o711)  # the sandbox user may traverse, not list; the log stays root's
        package, sock_dir, tmp_dir, jail_root = run_dir / "pkg", run_dir / "sock", run_dir / "tmp", run_dir / "root"
        for d in (package, sock_dir, tmp_dir, jail_root):
            d.mkdir(mode=0o755)
        _copy_package(Path(package_dir), package, limits, link_root)
        if not python.exists():
            raise SandboxError(f"{venv} is not a virtual environment (no bin/python)")

        plan = plan_isolation(config, limits, venv=venv, package=package, jail_root=jail_root,
                              writable=(package, sock_dir, tmp_dir))
        if plan.jail is not None:
            cwd, home, tmp, inside_uds = JAIL_APP, JAIL_APP, JAIL_TMP, JAIL_SOCKET
        else:
            cwd, home, tmp, inside_uds = str(package), str(package), str(tmp_dir), str(sock_dir / "server.sock")
            if len(inside_uds.encode()) > MAX_UDS_PATH:
                raise SandboxError(f"socket path {inside_uds} is longer than {MAX_UDS_PATH} bytes: "
                                   "use a shorter work_root")
        server_env = _server_env(venv, home, tmp, extra_env)
        plan.applied.add("env")
        plan.layers.append(f"env: applied: built from scratch ({', '.join(sorted(server_env))}); nothing inherited")
        missing = set(config.require) - plan.applied
        if missing:
            raise SandboxError(f"required isolation not available: {', '.join(sorted(missing))}\n"
                               + "\n".join(plan.layers))

        env_bin = shutil.which("env", path=TOOL_ENV["PATH"])
        # Variables reach the server through `env -i` after the privilege drop: the root-run wrappers
        # (prlimit, unshare, the jail, setpriv) never see caller-supplied values such as a loader variable.
        if env_bin:
            env_args, popen_env = [env_bin, "-i", *(f"{k}={v}" for k, v in server_env.items())], dict(TOOL_ENV)
        else:
            env_args, popen_env = [], server_env
        server_cmd = [str(python), "-s", "-m", "uvicorn", app, "--uds", inside_uds, "--log-level", "info"]
        command = (*plan.prefix, *env_args, *server_cmd)

        capture = Capture(tail_bytes=limits.log_tail_bytes, log_path=run_dir / "server.log",
                          max_bytes=limits.max_log_bytes)
        started = time.monotonic()
        proc = subprocess.Popen(
            list(command), cwd=package if plan.jail is None else run_dir, env=popen_env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=plan.preexec,
        )
        supervisor = _Supervisor(proc, capture, grace=limits.terminate_grace_s, has_pid_ns="pid" in plan.applied)
        supervisor.start_deadline(limits.wall_seconds)

        def host_path(inside: str) -> str | None:
            """Where the host finds a path of the server's: through the jail's root once its init is known."""
            if plan.jail is None:
                return inside
            return f"/proc/{supervisor.server_pid}/root{inside}" if supervisor.server_pid else None

        try:
            ready_after = _wait_answering(supervisor, lambda: host_path(inside_uds), started, limits)
        except SandboxError as exc:
            exc.isolation = tuple(plan.layers)
            raise
        server = RunningServer(
            uds=host_path(inside_uds), pid=proc.pid, started_at=started, ready_after_s=ready_after,
            deadline=started + limits.wall_seconds, workdir=Path(host_path(cwd)), isolation=tuple(plan.layers),
            applied=frozenset(plan.applied), command=command, _supervisor=supervisor,
        )
        yield server
    finally:
        if supervisor is not None:
            supervisor.stop()
        _remove_tree(run_dir)


def _wait_answering(supervisor: _Supervisor, uds: Callable[[], str | None], started: float,
                    limits: SandboxLimits) -> float:
    """Seconds until GET /health got an HTTP answer, whatever its status: judging it is the probe's work
    (`runtime.startup` tells "the app is up and /health says no" from "not started"). `SandboxError`
    with the log tail if the server dies first or never answers within the startup timeout."""
    deadline = started + limits.startup_timeout_s  # the wall-clock deadline, if shorter, is the timer's to enforce
    last = "the socket never appeared"
    proc = supervisor.proc
    while True:
        supervisor.find_init()
        if proc.poll() is not None:
            supervisor.stop()
            why = " (killed at the wall-clock deadline)" if supervisor.expired else ""
            raise SandboxError(f"the server exited with status {proc.returncode} before it answered HTTP{why}",
                               log_tail=supervisor.capture.tail())
        path = uds()
        if path and os.path.exists(path):
            try:
                uds_request(path, "GET", "/health", timeout=max(0.2, min(2.0, deadline - time.monotonic())))
                supervisor.find_init()
                return time.monotonic() - started
            except (OSError, http.client.HTTPException) as e:
                last = f"/health failed: {e!r}"
        if time.monotonic() > deadline:
            supervisor.stop()
            raise SandboxError(
                f"the server did not answer HTTP within {deadline - started:.0f} s ({last})",
                log_tail=supervisor.capture.tail(),
            )
        time.sleep(0.1)
