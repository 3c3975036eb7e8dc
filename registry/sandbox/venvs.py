"""Virtual environments for packages: built once per requirement set, atomically, under a lock, then cached.

Installing is trusted tooling (pip, with the network), never the package's
code: with `binary_only` only wheels are unpacked. A venv directory exists
only complete; the sandboxed server reads it and can never write it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from .config import TOOL_ENV, MiB, SandboxConfig, SandboxError, SandboxLimits, clip, discard
from .processes import pip_rlimits, run_logged
from .requirements import normalize_requirement

# Bump to invalidate every cached venv (a change in how venvs are built or keyed).
VENV_FORMAT = 1
VENV_INFO_FILE = "sandbox-venv.json"


@functools.lru_cache(maxsize=32)
def _interpreter_tag(python: str) -> str:
    """`cpython-3.11.2-x86_64` for an interpreter path: what a venv built from it is bound to."""
    code = ("import platform, sys; "
            "print(sys.implementation.name, platform.python_version(), platform.machine(), sep='-')")
    try:
        result = subprocess.run(
            [python, "-I", "-c", code], capture_output=True, text=True, timeout=30, env=TOOL_ENV, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandboxError(f"cannot run interpreter {python}: {e}") from None
    tag = result.stdout.strip()
    if result.returncode != 0 or not re.fullmatch(r"[a-z]+-[0-9][0-9a-z.+]*-[A-Za-z0-9_]+", tag):
        raise SandboxError(f"cannot identify interpreter {python}: {clip(result.stderr.strip(), 300)}")
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
                                env=TOOL_ENV, check=False)
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
    env = dict(TOOL_ENV)
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
    log: Callable[[str], None] = discard,
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
            run_logged([config.python, "-m", "venv", "--prompt", key, *(["--without-pip"] if host_pip else []), str(tmp)],
                        cwd=tmp, env=TOOL_ENV, deadline=deadline, limits=pip_rlimits(limits), log=log,
                        what="python -m venv")
            if canonical:
                pip = [*host_pip, "--python", str(tmp / "bin" / "python")] if host_pip else [
                    str(tmp / "bin" / "python"), "-m", "pip"]
                cmd = [*pip, "install", "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
                       *options, "--", *canonical]
                run_logged(cmd, cwd=tmp, env=_pip_env(venv_root), deadline=deadline,
                            limits=pip_rlimits(limits), log=log, what="pip install")
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
