"""Run an untrusted OpenEnv environment package on this machine, as safely as the machine allows.

The local validation lane does three things with a package directory (a local
source folder or a Hub Space snapshot at a pinned sha):

1. `package_requirements(dir)` reads what it depends on, refusing anything
   that is not a plain PEP 508 requirement on a named distribution (no URLs,
   no paths, no pip options);
2. `ensure_venv(reqs, ...)` installs those into a virtual environment cached
   under `config.venv_root/<venv_key>`, built once, atomically, under a lock;
3. `running_server(dir, venv=..., ...)` starts the package's ASGI app with
   uvicorn on a Unix socket inside every isolation layer this machine offers,
   waits for `/health`, yields a `RunningServer`, and always tears it down.

This is **not a container**. The server shares the host kernel and can read
any file its user can read. What each layer does, and what happens when it is
unavailable, is listed in `RunningServer.isolation`; `SandboxConfig.require`
turns a missing layer into an error instead of a note. Production should run
this inside a container or VM that holds no credentials.

Pure standard library, no Django: the caller passes paths and limits in.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import http.client
import json
import os
import pwd
import re
import resource
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "RequirementsError",
    "RunningServer",
    "SandboxConfig",
    "SandboxError",
    "SandboxLimits",
    "ensure_venv",
    "normalize_requirement",
    "package_requirements",
    "running_server",
    "uds_request",
    "venv_key",
]

# Bump to invalidate every cached venv (a change in how venvs are built or keyed).
VENV_FORMAT = 1
VENV_INFO_FILE = "sandbox-venv.json"
DEFAULT_APP = "server.app:app"

MiB = 1024 * 1024
GiB = 1024 * MiB

# What a package may ask pip for.
MAX_REQUIREMENTS = 200
MAX_REQUIREMENT_LENGTH = 500
MAX_PYPROJECT_BYTES = 256 * 1024
MAX_REQUIREMENTS_TXT_BYTES = 64 * 1024
REQUIREMENTS_TXT_PATHS = ("requirements.txt", "server/requirements.txt")

# Environment variables a caller may add for the server (e.g. a manifest's Space `variables`).
MAX_EXTRA_ENV = 64
MAX_ENV_VALUE = 4096

# Linux sun_path is 108 bytes including the terminating NUL.
MAX_UDS_PATH = 107

# Isolation layer ids, as reported in RunningServer.applied and accepted by SandboxConfig.require.
LAYERS = frozenset({"net", "pid", "user", "rlimits", "session", "env"})

# Environment of the trusted wrappers (prlimit, unshare, setpriv, env) and of probes.
_TOOL_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


class SandboxError(Exception):
    """The package could not be installed, started or kept within its limits; `log_tail` is the evidence."""

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        self.log_tail = log_tail
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
    isolation layers ("net", "pid", "user", "rlimits") whose absence must fail
    the run instead of being reported.
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


def _discard(_line: str) -> None:
    pass


# ---------------------------------------------------------------------------
# Requirements
# ---------------------------------------------------------------------------

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_REQUIREMENT_RE = re.compile(
    rf"""
    \s*(?P<name>{_NAME})\s*
    (?:\[\s*(?P<extras>{_NAME}(?:\s*,\s*{_NAME})*)?\s*\])?\s*
    (?P<spec>
        \(?\s*
        (?:===|~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9_.*+!-]+
        (?:\s*,\s*(?:===|~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9_.*+!-]+)*
        \s*\)?
    )?\s*
    (?:;\s*(?P<marker>.+?))?\s*
    """,
    re.VERBOSE,
)
_SPEC_CLAUSE_RE = re.compile(r"(===|~=|==|!=|<=|>=|<|>)\s*([A-Za-z0-9_.*+!-]+)")
_MARKER_VARIABLES = (
    "python_version python_full_version os_name sys_platform platform_release platform_system "
    "platform_version platform_machine platform_python_implementation implementation_name "
    "implementation_version extra"
).split()
_MARKER_TOKEN_RE = re.compile(
    r"""\s*(?:(?P<string>'[^'\\\n]*'|"[^"\\\n]*")|(?P<op>===|~=|==|!=|<=|>=|<|>|\(|\))|(?P<word>[a-z_]+))"""
)
# pip treats an argument ending like an archive as a file path, not as a distribution name.
_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tgz", ".tbz", ".txz", ".tlz", ".gz", ".bz2", ".xz", ".lz", ".lzma")


def _clip(text: str, n: int = 80) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= n else text[: n - 1] + "…"


def _check_marker(marker: str, original: str) -> str:
    words = {"and", "or", "in", "not", *_MARKER_VARIABLES}
    pos, tokens = 0, []
    while pos < len(marker):
        m = _MARKER_TOKEN_RE.match(marker, pos)
        if not m or m.end() == pos:
            if marker[pos:].strip() == "":
                break
            raise RequirementsError(f"unsupported environment marker in {_clip(original)!r}")
        if m.group("word") is not None and m.group("word") not in words:
            raise RequirementsError(f"unknown marker word {m.group('word')!r} in {_clip(original)!r}")
        tokens.append(m.group("string") or m.group("op") or m.group("word"))
        pos = m.end()
    if not tokens:
        raise RequirementsError(f"empty environment marker in {_clip(original)!r}")
    return " ".join(tokens)


def _canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def normalize_requirement(text: str) -> str:
    """One PEP 508 requirement on a named distribution, in canonical form; `RequirementsError` otherwise.

    Accepted: a name, extras, version specifiers and an environment marker.
    Refused: direct references (`name @ URL`), URLs, paths, archives, pip
    options (`-e`, `--index-url`, `--hash`, `-r`), anything else a requirement
    file or pip's command line would interpret.
    """
    if not isinstance(text, str):
        raise RequirementsError(f"a requirement must be a string, not {type(text).__name__}")
    if len(text) > MAX_REQUIREMENT_LENGTH:
        raise RequirementsError(f"requirement longer than {MAX_REQUIREMENT_LENGTH} characters: {_clip(text)!r}")
    stripped = text.strip()
    if not stripped:
        raise RequirementsError("empty requirement")
    if stripped.startswith("-"):
        raise RequirementsError(f"pip options are not accepted as requirements: {_clip(stripped)!r}")
    head = stripped.split(";", 1)[0]
    if "@" in head or "://" in stripped:
        raise RequirementsError(f"direct references and URLs are not accepted: {_clip(stripped)!r}")
    if any(c in head for c in "/\\") or head.startswith("."):
        raise RequirementsError(f"paths are not accepted as requirements: {_clip(stripped)!r}")
    m = _REQUIREMENT_RE.fullmatch(stripped)
    if not m:
        raise RequirementsError(f"not a PEP 508 requirement on a named distribution: {_clip(stripped)!r}")
    name = m.group("name")
    if name.lower().endswith(_ARCHIVE_SUFFIXES):
        raise RequirementsError(f"archive files are not accepted as requirements: {_clip(stripped)!r}")
    out = _canonical_name(name)
    if m.group("extras"):
        extras = sorted({_canonical_name(e.strip()) for e in m.group("extras").split(",")})
        out += "[" + ",".join(extras) + "]"
    if m.group("spec"):
        clauses = sorted(f"{op}{version}" for op, version in _SPEC_CLAUSE_RE.findall(m.group("spec")))
        out += ",".join(clauses)
    if m.group("marker"):
        out += "; " + _check_marker(m.group("marker"), stripped)
    return out


def _read_package_file(package_dir: Path, relative: str, cap: int) -> str | None:
    """The text of a file inside the package, or None if absent. A symlink out of the package is refused."""
    root = package_dir.resolve()
    path = package_dir / relative
    if not os.path.lexists(path):
        return None
    real = path.resolve()
    if not real.is_relative_to(root):
        raise RequirementsError(f"{relative} points outside the package")
    if not real.is_file():
        raise RequirementsError(f"{relative} is not a regular file")
    with open(real, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise RequirementsError(f"{relative} is larger than {cap // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequirementsError(f"{relative} is not UTF-8: {e}") from None


def _requirements_txt_lines(text: str, source: str) -> list[str]:
    out: list[str] = []
    logical = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        line, logical = (logical + line).strip(), ""
        if not line:
            continue
        if line.startswith("-"):
            raise RequirementsError(f"{source} line {number}: pip options are not accepted: {_clip(line)!r}")
        out.append(line)
    if logical.strip():
        out.append(logical.strip())
    return out


def package_requirements(package_dir: Path) -> list[str]:
    """The package's dependencies, validated and canonical, in declaration order without duplicates.

    `[project].dependencies` of pyproject.toml when it declares them (not
    `dynamic`); otherwise requirements.txt, then server/requirements.txt (what
    `openenv init` scaffolds). `RequirementsError` when none of them declares
    anything or when any entry is not a plain requirement (see
    `normalize_requirement`).
    """
    package_dir = Path(package_dir)
    raw: list | None = None
    source = ""
    text = _read_package_file(package_dir, "pyproject.toml", MAX_PYPROJECT_BYTES)
    if text is not None:
        try:
            data = tomllib.loads(text)
        except (ValueError, RecursionError) as e:  # TOMLDecodeError, or a value Python will not convert
            raise RequirementsError(f"pyproject.toml is not valid TOML: {e}") from None
        project = data.get("project")
        if isinstance(project, dict) and "dependencies" in project:
            raw, source = project["dependencies"], "pyproject.toml [project].dependencies"
            if not isinstance(raw, list):
                raise RequirementsError(f"{source} must be a list of strings")
    if raw is None:
        for relative in REQUIREMENTS_TXT_PATHS:
            text = _read_package_file(package_dir, relative, MAX_REQUIREMENTS_TXT_BYTES)
            if text is not None:
                raw, source = _requirements_txt_lines(text, relative), relative
                break
    if raw is None:
        raise RequirementsError(
            "the package declares no dependencies: expected [project].dependencies in pyproject.toml, "
            "requirements.txt or server/requirements.txt"
        )
    if len(raw) > MAX_REQUIREMENTS:
        raise RequirementsError(f"{source} lists {len(raw)} requirements; at most {MAX_REQUIREMENTS} are accepted")
    out: list[str] = []
    for item in raw:
        try:
            requirement = normalize_requirement(item)
        except RequirementsError as e:
            raise RequirementsError(f"{source}: {e}") from None
        if requirement not in out:
            out.append(requirement)
    return out


# ---------------------------------------------------------------------------
# Virtual environments
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def _interpreter_tag(python: str) -> str:
    """`cpython-3.11.2-x86_64` for an interpreter path: what a venv built from it is bound to."""
    code = ("import platform, sys; "
            "print(sys.implementation.name, platform.python_version(), platform.machine(), sep='-')")
    try:
        result = subprocess.run(
            [python, "-I", "-c", code], capture_output=True, text=True, timeout=30, env=_TOOL_ENV, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandboxError(f"cannot run interpreter {python}: {e}") from None
    tag = result.stdout.strip()
    if result.returncode != 0 or not re.fullmatch(r"[a-z]+-[0-9][0-9a-z.+]*-[A-Za-z0-9_]+", tag):
        raise SandboxError(f"cannot identify interpreter {python}: {_clip(result.stderr.strip(), 300)}")
    return tag


def venv_key(requirements: Iterable[str], python: str, *, options: Sequence[str] = ()) -> str:
    """A stable directory name for the venv holding `requirements` on interpreter `python`.

    Order, duplicates, spacing and name spelling (`Foo_Bar` vs `foo-bar`) do
    not change the key; the interpreter's implementation, full version and
    machine do, and so do build `options` (index arguments, binary-only).
    """
    canonical = sorted({normalize_requirement(r) for r in requirements})
    tag = _interpreter_tag(python)
    blob = json.dumps(
        {"format": VENV_FORMAT, "python": tag, "requirements": canonical, "options": list(options)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return f"{tag}-{hashlib.sha256(blob.encode()).hexdigest()[:24]}"


def _build_options(config: SandboxConfig) -> list[str]:
    return (["--only-binary=:all:"] if config.binary_only else []) + list(config.pip_index_args)


@contextlib.contextmanager
def _exclusive_lock(path: Path, timeout: float) -> Iterator[None]:
    # flock, not fcntl/lockf: each open() is its own lock owner, so two threads of one process exclude each other too.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SandboxError(f"timed out after {timeout:.0f} s waiting for {path}") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=4)
def _host_pip(python: str) -> tuple[str, ...] | None:
    """`python -m pip` if it can install into another interpreter's venv (`--python`, pip >= 22.3), else None.

    Driving the new venv with this pip avoids ensurepip, which installs and
    byte-compiles pip into every venv (7 s or more), and leaves pip out of the
    sandbox's venv.
    """
    try:
        result = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True, timeout=60,
                                env=_TOOL_ENV, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.match(r"pip (\d+)\.(\d+)", result.stdout)
    if result.returncode != 0 or not m or (int(m.group(1)), int(m.group(2))) < (22, 3):
        return None
    return (python, "-m", "pip")


def _venv_is_complete(path: Path) -> bool:
    return (path / VENV_INFO_FILE).is_file() and (path / "bin" / "python").exists()


def _pip_env(venv_root: Path) -> dict[str, str]:
    # pip is trusted tooling with network: it keeps the operator's pip/proxy/CA settings (config files are read
    # anyway). Nothing else from the parent passes, so a build backend (binary_only=False) sees no app secrets.
    env = dict(_TOOL_ENV)
    for name, value in os.environ.items():
        if name.startswith("PIP_") or name.lower() in {
            "http_proxy", "https_proxy", "no_proxy", "all_proxy", "ssl_cert_file", "requests_ca_bundle", "home",
        }:
            env[name] = value
    env["PIP_CACHE_DIR"] = str(venv_root / ".pip-cache")
    env["PIP_NO_INPUT"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _relocate(tmp: Path, final: Path) -> None:
    """Rewrite the build path into the final one in bin/ (console-script shebangs, activate scripts)."""
    old, new = str(tmp).encode(), str(final).encode()
    for entry in (tmp / "bin").iterdir():
        if entry.is_symlink() or not entry.is_file() or entry.stat().st_size > 4 * MiB:
            continue
        data = entry.read_bytes()
        if old in data:
            entry.write_bytes(data.replace(old, new))


def _make_world_readable(root: Path) -> None:
    # The server runs as another user: the venv must be readable (and never writable) by it whatever the umask was.
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                continue
            mode = stat.S_IMODE(st.st_mode)
            want = mode | 0o044
            if stat.S_ISDIR(st.st_mode) or mode & 0o100:
                want |= 0o011
            want &= ~0o022
            if want != mode:
                os.chmod(path, want)
    os.chmod(root, 0o755)


def ensure_venv(
    requirements: Sequence[str],
    *,
    config: SandboxConfig,
    limits: SandboxLimits = SandboxLimits(),
    log: Callable[[str], None] = _discard,
) -> Path:
    """The venv directory holding `requirements`, from the cache or built now; `SandboxError` if pip fails.

    Invariant: `venv_root/<key>` exists only complete. It is built in a temp
    dir next to it and renamed into place; a lock file per key makes
    concurrent callers (threads or processes) wait for one build; a failed or
    killed build leaves nothing behind (leftovers of a crash are removed by the
    next build of the key). pip runs with rlimits, a wall-clock timeout and a
    scrubbed environment; `log` receives its output line by line, in the
    calling thread.

    Installing is not sandboxed: pip needs the network. With
    `config.binary_only` (the default) it only unpacks wheels, so no code from
    the package or its dependencies runs until the server starts inside the
    sandbox; a dependency published only as an sdist then fails to install.
    Without it, sdist build backends run arbitrary code as the calling user.
    """
    canonical = [normalize_requirement(r) for r in requirements]
    canonical = sorted(set(canonical), key=canonical.index)
    options = _build_options(config)
    key = venv_key(canonical, config.python, options=options)
    venv_root = Path(config.venv_root)
    final = venv_root / key
    if _venv_is_complete(final):
        log(f"venv {key}: cached")
        return final
    venv_root.mkdir(parents=True, exist_ok=True)
    if venv_root.stat().st_uid == os.geteuid():
        os.chmod(venv_root, 0o755)  # the sandbox user must reach the venvs, whatever the umask was
    with _exclusive_lock(venv_root / f"{key}.lock", limits.pip_timeout_s + 300):
        if _venv_is_complete(final):
            log(f"venv {key}: built by another worker while waiting")
            return final
        for stale in venv_root.glob(f".build-{key}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # not complete: debris from something else; never trust it
            shutil.rmtree(final)
        started = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=venv_root))
        try:
            host_pip = _host_pip(sys.executable)
            how = f"{sys.executable} -m pip --python" if host_pip else "ensurepip and the venv's own pip"
            log(f"venv {key}: building with {config.python} via {how} ({len(canonical)} requirements, "
                f"options {options})")
            deadline = started + limits.pip_timeout_s
            _run_logged([config.python, "-m", "venv", "--prompt", key, *(["--without-pip"] if host_pip else []), str(tmp)],
                        cwd=tmp, env=_TOOL_ENV, deadline=deadline, limits=_pip_rlimits(limits), log=log,
                        what="python -m venv")
            if canonical:
                pip = [*host_pip, "--python", str(tmp / "bin" / "python")] if host_pip else [
                    str(tmp / "bin" / "python"), "-m", "pip"]
                cmd = [*pip, "install", "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
                       *options, "--", *canonical]
                _run_logged(cmd, cwd=tmp, env=_pip_env(venv_root), deadline=deadline,
                            limits=_pip_rlimits(limits), log=log, what="pip install")
            info = {
                "key": key, "format": VENV_FORMAT, "python": config.python,
                "interpreter": _interpreter_tag(config.python),
                "requirements": canonical, "options": options, "built_at": time.time(),
                "build_seconds": round(time.monotonic() - started, 2),
            }
            (tmp / VENV_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
            _relocate(tmp, final)
            _make_world_readable(tmp)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    log(f"venv {key}: ready in {time.monotonic() - started:.1f} s")
    return final


# ---------------------------------------------------------------------------
# Child processes: rlimits, output capture
# ---------------------------------------------------------------------------


class _Capture:
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


def _pump(fd: int, capture: _Capture, should_stop: Callable[[], bool], drain_s: float = 2.0) -> None:
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


def _pip_rlimits(limits: SandboxLimits) -> dict[str, tuple[int, int]]:
    timeout = int(limits.pip_timeout_s)
    return {
        "as": (limits.pip_memory_bytes, limits.pip_memory_bytes),
        "cpu": (timeout, timeout + 5),
        "fsize": (limits.pip_max_file_bytes, limits.pip_max_file_bytes),
        "nofile": (4096, 4096),
        "core": (0, 0),
    }


def _server_rlimits(limits: SandboxLimits) -> dict[str, tuple[int, int]]:
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


def _rlimit_wrapper(rlimits: Mapping[str, tuple[int, int]]) -> tuple[list[str], Callable[[], None] | None, str]:
    """How to apply `rlimits` to a child: a `prlimit` argv prefix, or else a preexec_fn (not thread-safe)."""
    rlimits = _clamped(rlimits)
    prlimit = shutil.which("prlimit", path=_TOOL_ENV["PATH"])
    if prlimit:
        return [prlimit, *(f"--{n}={s}:{h}" for n, (s, h) in rlimits.items()), "--"], None, "prlimit"

    def apply() -> None:
        for n, (s, h) in rlimits.items():
            resource.setrlimit(_RLIMIT_CONSTANTS[n], (s, h))

    # Only without prlimit(1): a preexec_fn runs Python between fork and exec, which can deadlock a threaded parent.
    return [], apply, "preexec_fn"


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _run_logged(cmd: list[str], *, cwd: Path, env: Mapping[str, str], deadline: float,
                limits: Mapping[str, tuple[int, int]], log: Callable[[str], None], what: str) -> None:
    """Run a trusted build step in its own process group with rlimits; kill the group at `deadline`."""
    prefix, preexec, _ = _rlimit_wrapper(limits)
    capture = _Capture(tail_bytes=16 * 1024, on_line=log)
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

        _pump(proc.stdout.fileno(), capture, stop)
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid, signal.SIGKILL)
        proc.wait()
        _kill_group(proc.pid, signal.SIGKILL)  # stragglers (e.g. a build backend's children)
        proc.stdout.close()
        capture.close()
    if timed_out:
        raise SandboxError(f"{what} timed out", log_tail=capture.tail())
    if proc.returncode != 0:
        raise SandboxError(f"{what} failed with exit status {proc.returncode}", log_tail=capture.tail())


# ---------------------------------------------------------------------------
# Isolation layers
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _namespace_prefix(euid: int) -> tuple[tuple[str, ...], frozenset[str], str]:
    """The strongest `unshare` invocation that works here, the layers it gives, and why others failed."""
    unshare = shutil.which("unshare", path=_TOOL_ENV["PATH"])
    true = shutil.which("true", path=_TOOL_ENV["PATH"])
    if not unshare or not true:
        return (), frozenset(), "unshare(1) not found"
    # Without root, a user namespace is what allows creating the others (if the kernel permits it).
    base = [unshare] if euid == 0 else [unshare, "--map-root-user"]
    attempts = [
        ([*base, "--net", "--pid", "--fork", "--kill-child", "--mount-proc"], frozenset({"net", "pid"})),
        ([*base, "--net"], frozenset({"net"})),
    ]
    errors = []
    for prefix, layers in attempts:
        try:
            result = subprocess.run([*prefix, "--", true], capture_output=True, timeout=10, env=_TOOL_ENV, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(str(e))
            continue
        if result.returncode == 0:
            return (*prefix, "--"), layers, "; ".join(errors)
        errors.append(_clip(result.stderr.decode("utf-8", "replace").strip(), 200))
    return (), frozenset(), "; ".join(errors)


def _user_prefix(user: str) -> tuple[list[str], pwd.struct_passwd | None, str]:
    """setpriv argv dropping root to `user`, or the reason it cannot."""
    if os.geteuid() != 0:
        return [], None, f"started unprivileged as uid {os.geteuid()}"
    setpriv = shutil.which("setpriv", path=_TOOL_ENV["PATH"])
    if not setpriv:
        return [], None, "setpriv(1) not found"
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return [], None, f"no user {user!r}"
    if pw.pw_uid == 0:
        return [], None, f"user {user!r} is root"
    return [
        # --pdeathsig again: changing uid clears the parent-death signal, and this process becomes the
        # PID namespace's init, whose death takes the whole namespace down.
        setpriv, f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--no-new-privs",
        "--inh-caps=-all", "--bounding-set=-all", "--pdeathsig=KILL", "--",
    ], pw, ""


_ACCESS_PROBE = (
    "import os, sysconfig; os.listdir('.'); os.listdir(sysconfig.get_paths()['purelib']); "
    "open('.sandbox-probe', 'w').close(); os.remove('.sandbox-probe')"
)


def _user_can_run(prefix: list[str], python: Path, cwd: Path) -> str:
    """'' if the dropped user can run the venv's interpreter and write its working copy; else why not."""
    try:
        result = subprocess.run([*prefix, str(python), "-s", "-c", _ACCESS_PROBE], cwd=cwd, env=_TOOL_ENV,
                                capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if result.returncode == 0:
        return ""
    lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
    return _clip(lines[-1] if lines else f"exit status {result.returncode}", 200)


# ---------------------------------------------------------------------------
# The package's working copy
# ---------------------------------------------------------------------------


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


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), uid, gid)


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


# ---------------------------------------------------------------------------
# The running server
# ---------------------------------------------------------------------------


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


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _children_of(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:  # kernel without CONFIG_PROC_CHILDREN: scan
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent_of(int(p)) == pid]
    except (OSError, ValueError):
        return []


class _Supervisor:
    """Owns the server process tree: finds its namespace init, enforces the deadline, stops it exactly once."""

    def __init__(self, proc: subprocess.Popen, capture: _Capture, *, grace: float, has_pid_ns: bool) -> None:
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
            target=_pump, args=(proc.stdout.fileno(), capture, self._stopped.is_set), daemon=True,
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
        for pid in _children_of(self.proc.pid)[:1]:
            self._open_pidfd(pid)
            # The pidfd is race-free from here on; check it is still unshare's child (not a recycled pid).
            if _parent_of(pid) == self.proc.pid:
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
        _kill_group(self.proc.pid, sig)

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
            _kill_group(self.proc.pid, signal.SIGKILL)
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
    workdir: Path  # the package copy: the server's cwd and HOME
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
            raise SandboxError(f"invalid environment variable name {_clip(str(name))!r}")
        if name.upper() in _RESERVED_ENV or name.upper().startswith(_RESERVED_ENV_PREFIXES):
            raise SandboxError(f"environment variable {name} is reserved by the sandbox")
        if not isinstance(value, str) or len(value) > MAX_ENV_VALUE or "\0" in value:
            raise SandboxError(f"environment variable {name} must be a string under {MAX_ENV_VALUE} characters")
    return dict(extra)


def _server_env(venv: Path, home: Path, tmp: Path, extra: Mapping[str, str]) -> dict[str, str]:
    return {
        "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


@dataclass
class _Plan:
    """How to wrap the server command: argv prefix, preexec fallback, and the honest report of each layer."""

    prefix: list[str] = field(default_factory=list)
    preexec: Callable[[], None] | None = None
    layers: list[str] = field(default_factory=list)
    applied: set[str] = field(default_factory=set)


def _plan_isolation(config: SandboxConfig, limits: SandboxLimits, *, python: Path, writable: Sequence[Path],
                    env: Mapping[str, str]) -> _Plan:
    """Decide every isolation layer for one run, probing what this machine allows; `writable[0]` is the cwd.

    Order of the wrappers: prlimit (limits inherited by all), unshare (needs root or a user namespace),
    setpriv (drops root last).
    """
    plan = _Plan()
    layers, applied = plan.layers, plan.applied
    workdir = writable[0]

    rl_prefix, plan.preexec, rl_how = _rlimit_wrapper(_server_rlimits(limits))

    ns_prefix, ns_layers, ns_error = _namespace_prefix(os.geteuid())
    applied |= ns_layers
    if "net" in ns_layers:
        layers.append("net: applied: new empty network namespace (unshare --net); no usable interface, "
                      "not even loopback; the prober reaches the server only through its Unix socket")
    else:
        layers.append(f"net: NOT applied ({ns_error}): the server has this host's network")
    if "pid" in ns_layers:
        layers.append("pid: applied: own PID namespace with a private /proc; the server cannot see or signal "
                      "host processes, and killing its init kills everything it started")
    else:
        layers.append(f"pid: NOT applied ({ns_error or 'unshare --pid failed'}): host processes are visible; "
                      "a child that leaves the process group can survive teardown")

    user_prefix, pw, user_note = _user_prefix(config.sandbox_user)
    user_name = pwd.getpwuid(os.geteuid()).pw_name if os.geteuid() != 0 else "root"
    if pw is not None:
        for d in writable:
            _chown_tree(d, pw.pw_uid, pw.pw_gid)
        problem = _user_can_run(user_prefix, python, workdir)
        if problem:
            user_prefix = []
            layers.append(f"user: NOT applied: {config.sandbox_user} cannot run {python} from {workdir} "
                          f"({problem}); the server runs as ROOT and can write the shared venv")
        else:
            applied.add("user")
            user_name = config.sandbox_user
            layers.append(f"user: applied: runs as {config.sandbox_user} (uid {pw.pw_uid}, gid {pw.pw_gid}) via "
                          "setpriv: no supplementary groups, no capabilities, no_new_privs")
    elif os.geteuid() != 0:
        # Unprivileged already, but not separated: the server is the worker's own user and can write what
        # the worker writes (the shared venv cache among them). That does not meet HUB_SANDBOX_REQUIRE=user.
        layers.append(f"user: NOT applied ({user_note}): the server runs as the worker's own user "
                      f"({user_name}) and can write what it writes, the shared venv cache included")
    else:
        layers.append(f"user: NOT applied ({user_note}): the server runs as ROOT")

    applied.add("rlimits")
    nproc_note = " (ignored: runs as root)" if os.geteuid() == 0 and "user" not in applied else ""
    layers.append(
        f"rlimits: applied via {rl_how}: address space {limits.memory_bytes // MiB} MiB, "
        f"cpu {limits.cpu_seconds} s per process, file size {limits.max_file_bytes // MiB} MiB, "
        f"open files {limits.max_open_files}, processes {limits.max_processes} per user{nproc_note}, core 0"
    )
    applied |= {"session", "env"}
    layers.append(f"session: applied: own session and process group; stopped with SIGTERM, SIGKILL after "
                  f"{limits.terminate_grace_s:g} s; killed at the {limits.wall_seconds:g} s wall-clock deadline")
    layers.append(f"env: applied: built from scratch ({', '.join(sorted(env))}); nothing inherited")
    layers.append(f"filesystem: NOT isolated (not a container): private writable copy in {workdir}, "
                  f"but the server can read whatever {user_name} can read and write where {user_name} can "
                  "(e.g. /tmp, /dev/shm; what it leaves there outlives the run)")
    # The worker dying (even by SIGKILL) must not orphan the server: the first wrapper gets SIGKILL from the
    # kernel when its parent dies, keeps it across the execs into prlimit and unshare, and unshare's
    # --kill-child passes it on to the namespace's init, which takes everything else with it.
    death_prefix = _pdeathsig_prefix()
    if death_prefix:
        layers.append("orphan: applied: killed with the worker process if that dies (setpriv --pdeathsig)")
    else:
        layers.append("orphan: NOT applied (setpriv without --pdeathsig): a server outlives a killed worker "
                      "(nothing else stops it once the worker is gone)")
    plan.prefix = [*death_prefix, *rl_prefix, *ns_prefix, *user_prefix]
    return plan


def _pdeathsig_prefix() -> list[str]:
    setpriv = shutil.which("setpriv", path=_TOOL_ENV["PATH"])
    if not setpriv:
        return []
    probe = subprocess.run([setpriv, "--pdeathsig", "KILL", "--", "true"], capture_output=True, timeout=10)
    return [setpriv, "--pdeathsig", "KILL", "--"] if probe.returncode == 0 else []


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
    """Start `app` from a copy of `package_dir` with `venv`'s uvicorn on a Unix socket; yield once /health is 200.

    The original directory is never written: the server runs in a fresh copy
    under `config.work_root`, which is its cwd and HOME, with an environment
    built from scratch (PATH, HOME, TMPDIR, LANG, PYTHONDONTWRITEBYTECODE,
    PYTHONUNBUFFERED, plus `env`, e.g. the manifest's Space variables or
    OPENENV_MODE, validated; nothing is inherited from this process). If the
    process exits, or /health does not answer 200 within
    `limits.startup_timeout_s`, `SandboxError` carries the log tail. On exit,
    and at the wall-clock deadline, the whole process tree is stopped (SIGTERM,
    then SIGKILL) and the copy is deleted.
    """
    if not _APP_RE.fullmatch(app):
        raise SandboxError(f"app must look like 'module.path:attribute', not {_clip(app)!r}")
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
        workdir, sock_dir, tmp_dir = run_dir / "pkg", run_dir / "sock", run_dir / "tmp"
        uds = str(sock_dir / "server.sock")
        if len(uds.encode()) > MAX_UDS_PATH:
            raise SandboxError(f"socket path {uds} is longer than {MAX_UDS_PATH} bytes: use a shorter work_root")
        for d in (workdir, sock_dir, tmp_dir):
            d.mkdir(mode=0o755)
        _copy_package(Path(package_dir), workdir, limits, link_root)
        if not python.exists():
            raise SandboxError(f"{venv} is not a virtual environment (no bin/python)")

        server_env = _server_env(venv, workdir, tmp_dir, extra_env)
        plan = _plan_isolation(config, limits, python=python, writable=(workdir, sock_dir, tmp_dir), env=server_env)
        missing = set(config.require) - plan.applied
        if missing:
            raise SandboxError(f"required isolation not available: {', '.join(sorted(missing))}\n"
                               + "\n".join(plan.layers))

        env_bin = shutil.which("env", path=_TOOL_ENV["PATH"])
        # Variables reach the server through `env -i` after the privilege drop: the root-run wrappers
        # (prlimit, unshare, setpriv) never see caller-supplied values such as a loader variable.
        if env_bin:
            env_args, popen_env = [env_bin, "-i", *(f"{k}={v}" for k, v in server_env.items())], dict(_TOOL_ENV)
        else:
            env_args, popen_env = [], server_env
        server_cmd = [str(python), "-s", "-m", "uvicorn", app, "--uds", uds, "--log-level", "info"]
        command = (*plan.prefix, *env_args, *server_cmd)

        capture = _Capture(tail_bytes=limits.log_tail_bytes, log_path=run_dir / "server.log",
                           max_bytes=limits.max_log_bytes)
        started = time.monotonic()
        proc = subprocess.Popen(
            list(command), cwd=workdir, env=popen_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=plan.preexec,
        )
        supervisor = _Supervisor(proc, capture, grace=limits.terminate_grace_s, has_pid_ns="pid" in plan.applied)
        supervisor.start_deadline(limits.wall_seconds)
        ready_after = _wait_answering(supervisor, uds, started, limits)
        server = RunningServer(
            uds=uds, pid=proc.pid, started_at=started, ready_after_s=ready_after,
            deadline=started + limits.wall_seconds, workdir=workdir, isolation=tuple(plan.layers),
            applied=frozenset(plan.applied), command=command, _supervisor=supervisor,
        )
        yield server
    finally:
        if supervisor is not None:
            supervisor.stop()
        _remove_tree(run_dir)


def _wait_answering(supervisor: _Supervisor, uds: str, started: float, limits: SandboxLimits) -> float:
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
        if os.path.exists(uds):
            try:
                uds_request(uds, "GET", "/health", timeout=max(0.2, min(2.0, deadline - time.monotonic())))
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
