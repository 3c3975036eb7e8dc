"""Isolation layers: what this machine can take away from a server, probed and reported honestly.

Each layer is applied by a trusted wrapper (util-linux's prlimit, unshare and
setpriv, `env -i`, and the jail script below); what could not be applied is
reported as such, and `SandboxConfig.require` turns a missing layer into a
refusal.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .config import TOOL_ENV, MiB, SandboxConfig, SandboxLimits, clip
from .processes import rlimit_wrapper, server_rlimits


# The filesystem layer: run as the PID namespace's init, as root, inside fresh mount, network and PID
# namespaces, before the privilege drop. It builds a private root on a size-capped tmpfs holding only what a
# Python server needs, copies the package into it, pivots into it and throws the host's tree away, then
# execs the rest of the command. Paths come in as arguments, never spliced into the script.
JAIL_SCRIPT = r"""
set -eu
root=$1 size=$2 inodes=$3 pkg=$4 venv=$5 base=$6 uid=$7 gid=$8
shift 8
[ "$1" = "--" ] && shift
mount -t tmpfs -o "size=$size,nr_inodes=$inodes,mode=0755" sandbox "$root"
cd "$root"
mkdir -p usr etc dev proc tmp app run/sock ".$venv"
mount --bind -o ro,nosuid,nodev /usr usr
for d in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$d"
  elif [ -d "/$d" ]; then mkdir "$d"; mount --bind -o ro,nosuid,nodev "/$d" "$d"
  fi
done
mount --bind -o ro,nosuid,nodev "$venv" ".$venv"
if [ "$base" != "-" ]; then mkdir -p ".$base"; mount --bind -o ro,nosuid,nodev "$base" ".$base"; fi
printf 'root:x:0:0:root:/root:/usr/sbin/nologin
' > etc/passwd
printf 'root:x:0:
' > etc/group
if [ "$uid" != 0 ]; then
  printf 'sandbox:x:%s:%s:sandbox:/app:/usr/sbin/nologin
' "$uid" "$gid" >> etc/passwd
  printf 'sandbox:x:%s:
' "$gid" >> etc/group
fi
printf '127.0.0.1 localhost
::1 localhost
' > etc/hosts
printf 'passwd: files
group: files
hosts: files
' > etc/nsswitch.conf
for f in ld.so.cache localtime mime.types; do if [ -e "/etc/$f" ]; then cp -L "/etc/$f" "etc/$f"; fi; done
for n in null zero full random urandom; do : > "dev/$n"; mount --bind "/dev/$n" "dev/$n"; done
ln -s /proc/self/fd dev/fd
mkdir dev/shm
chmod 1777 tmp dev/shm
mount -t proc -o nosuid,nodev,noexec proc proc
cp -R "$pkg/." app/
chown -R "$uid:$gid" app run/sock
mkdir .host
pivot_root . .host
cd /
umount -l /.host
rmdir /.host
cd /app
exec "$@"
"""

# Where things are inside the jail (and, for the socket, how the host reaches it).
JAIL_APP, JAIL_TMP, JAIL_SOCKET = "/app", "/tmp", "/run/sock/server.sock"


@functools.lru_cache(maxsize=4)
def _namespace_prefix(euid: int) -> tuple[tuple[str, ...], frozenset[str], str]:
    """The strongest `unshare` invocation that works here, the layers it gives, and why others failed.

    The filesystem layer needs a mount namespace and the jail script to succeed, so it is probed by
    building a jail for real around `true`.
    """
    unshare = shutil.which("unshare", path=TOOL_ENV["PATH"])
    true = shutil.which("true", path=TOOL_ENV["PATH"])
    if not unshare or not true:
        return (), frozenset(), "unshare(1) not found"
    # Without root, a user namespace is what allows creating the others (if the kernel permits it).
    base = [unshare] if euid == 0 else [unshare, "--map-root-user"]
    pid_net = [*base, "--net", "--pid", "--fork", "--kill-child"]
    attempts = [
        ([*pid_net, "--mount"], frozenset({"net", "pid", "fs"})),
        ([*pid_net, "--mount-proc"], frozenset({"net", "pid"})),
        ([*base, "--net"], frozenset({"net"})),
    ]
    errors = []
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as scratch:
        for prefix, layers in attempts:
            command = [*prefix, "--", *(jail_args(_probe_layout(Path(scratch))) if "fs" in layers else []), true]
            try:
                result = subprocess.run(command, capture_output=True, timeout=20, env=TOOL_ENV, check=False)
            except (OSError, subprocess.TimeoutExpired) as e:
                errors.append(str(e))
                continue
            if result.returncode == 0:
                return (*prefix, "--"), layers, "; ".join(errors)
            errors.append(clip(result.stderr.decode("utf-8", "replace").strip(), 200) or f"exit {result.returncode}")
    return (), frozenset(), "; ".join(errors)


@dataclass(frozen=True)
class JailLayout:
    """The host paths a jail is built from: an empty mount point, the package copy, the venv, and the limits."""

    root: Path
    package: Path
    venv: Path
    base_prefix: str  # the interpreter's installation outside /usr, bound read-only too ("-": none)
    size_bytes: int
    inodes: int
    uid: int = 0
    gid: int = 0


def _probe_layout(scratch: Path) -> JailLayout:
    for name in ("root", "package", "venv"):
        (scratch / name).mkdir(exist_ok=True)
    return JailLayout(root=scratch / "root", package=scratch / "package", venv=scratch / "venv", base_prefix="-",
                      size_bytes=4 * MiB, inodes=1024)


def jail_args(layout: JailLayout) -> list[str]:
    """`sh -c JAIL_SCRIPT …` up to the `--` after which the jailed command follows."""
    sh = shutil.which("sh", path=TOOL_ENV["PATH"]) or "/bin/sh"
    return [sh, "-c", JAIL_SCRIPT, "sandbox-jail", str(layout.root), str(layout.size_bytes), str(layout.inodes),
            str(layout.package), str(layout.venv), layout.base_prefix, str(layout.uid), str(layout.gid), "--"]


def jail_socket(init_pid: int) -> str:
    """The server's socket as the host reaches it: through the jail's root, seen from its init process."""
    return f"/proc/{init_pid}/root{JAIL_SOCKET}"


def _user_prefix(user: str) -> tuple[list[str], pwd.struct_passwd | None, str]:
    """setpriv argv dropping root to `user`, or the reason it cannot."""
    if os.geteuid() != 0:
        return [], None, f"started unprivileged as uid {os.geteuid()}"
    setpriv = shutil.which("setpriv", path=TOOL_ENV["PATH"])
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
        result = subprocess.run([*prefix, str(python), "-s", "-c", _ACCESS_PROBE], cwd=cwd, env=TOOL_ENV,
                                capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if result.returncode == 0:
        return ""
    lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
    return clip(lines[-1] if lines else f"exit status {result.returncode}", 200)


@dataclass
class Plan:
    """How to wrap the server command: argv prefix, preexec fallback, the honest report of each layer, and, when
    the filesystem layer applies, the jail the server lives in (its paths inside differ from the host's)."""

    prefix: list[str] = field(default_factory=list)
    preexec: Callable[[], None] | None = None
    layers: list[str] = field(default_factory=list)
    applied: set[str] = field(default_factory=set)
    jail: JailLayout | None = None


def _base_prefix(venv: Path) -> str:
    """The venv interpreter's installation when it lives outside /usr (it must be visible in the jail), else "-"."""
    try:
        cfg = (venv / "pyvenv.cfg").read_text(errors="replace")
    except OSError:
        return "-"
    home = next((line.split("=", 1)[1].strip() for line in cfg.splitlines()
                 if line.split("=", 1)[0].strip() == "home"), "")
    if not home:
        return "-"
    prefix = Path(home).resolve().parent if Path(home).name == "bin" else Path(home).resolve()
    return "-" if prefix == Path("/usr") or prefix.is_relative_to("/usr") else str(prefix)


def plan_isolation(config: SandboxConfig, limits: SandboxLimits, *, venv: Path, package: Path, jail_root: Path,
                   writable: Sequence[Path]) -> Plan:
    """Decide every isolation layer for one run, probing what this machine allows.

    `package` is the host copy of the package (the cwd when there is no jail); `writable` the host folders
    the server writes without a jail; `jail_root` an empty folder the jail's root is mounted on. Order of the
    wrappers: setpriv --pdeathsig, prlimit (limits inherited by all), unshare (needs root or a user
    namespace), the jail script (root inside the namespaces), setpriv (drops root last).
    """
    plan = Plan()
    layers, applied = plan.layers, plan.applied
    python = venv / "bin" / "python"

    rl_prefix, plan.preexec, rl_how = rlimit_wrapper(server_rlimits(limits))

    ns_prefix, ns_layers, ns_error = _namespace_prefix(os.geteuid())
    applied |= ns_layers
    if "net" in ns_layers:
        layers.append("net: applied: new empty network namespace (unshare --net); no usable interface, "
                      "not even loopback, and no abstract Unix sockets of the host; the prober reaches the "
                      "server only through its Unix socket")
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
        problem = _user_can_run(user_prefix, python, package)
        if problem:
            user_prefix = []
            layers.append(f"user: NOT applied: {config.sandbox_user} cannot run {python} from {package} "
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

    jail: list[str] = []
    if "fs" in ns_layers:
        uid, gid = (pw.pw_uid, pw.pw_gid) if "user" in applied else (0, 0)
        plan.jail = JailLayout(
            root=jail_root, package=package, venv=venv, base_prefix=_base_prefix(venv),
            size_bytes=limits.disk_bytes, inodes=limits.max_package_files + 50_000, uid=uid, gid=gid)
        jail = jail_args(plan.jail)
        layers.append(
            f"fs: applied: own mount namespace whose root is a {limits.disk_bytes // MiB} MiB tmpfs holding only "
            f"/usr (read-only), a minimal /etc (no host accounts), /dev/null, zero, full, random and urandom, its "
            f"own /proc, /tmp, the package copy at {JAIL_APP} and its venv (read-only); the host's tree is "
            "unmounted: no home directories, no /run or /var (no host sockets), nothing of the hub; everything "
            f"it writes counts against those {limits.disk_bytes // MiB} MiB and vanishes with it")
    else:
        layers.append(f"fs: NOT applied ({ns_error or 'no mount namespace'}): the server sees the host's "
                      f"filesystem, reads whatever {user_name} can read and writes where {user_name} can "
                      "(e.g. /tmp, /dev/shm, host Unix sockets; what it leaves there outlives the run)")

    applied.add("rlimits")
    nproc_note = " (ignored: runs as root)" if os.geteuid() == 0 and "user" not in applied else ""
    layers.append(
        f"rlimits: applied via {rl_how}: address space {limits.memory_bytes // MiB} MiB, "
        f"cpu {limits.cpu_seconds} s per process, file size {limits.max_file_bytes // MiB} MiB, "
        f"open files {limits.max_open_files}, processes {limits.max_processes} per user{nproc_note}, core 0"
    )
    applied.add("session")
    layers.append(f"session: applied: own session and process group; stopped with SIGTERM, SIGKILL after "
                  f"{limits.terminate_grace_s:g} s; killed at the {limits.wall_seconds:g} s wall-clock deadline")
    # The worker dying (even by SIGKILL) must not orphan the server: the first wrapper gets SIGKILL from the
    # kernel when its parent dies, keeps it across the execs into prlimit and unshare, and unshare's
    # --kill-child passes it on to the namespace's init, which takes everything else with it.
    death_prefix = _pdeathsig_prefix()
    if death_prefix:
        layers.append("orphan: applied: killed with the worker process if that dies (setpriv --pdeathsig)")
    else:
        layers.append("orphan: NOT applied (setpriv without --pdeathsig): a server outlives a killed worker "
                      "(nothing else stops it once the worker is gone)")
    plan.prefix = [*death_prefix, *rl_prefix, *ns_prefix, *jail, *user_prefix]
    return plan


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _pdeathsig_prefix() -> list[str]:
    setpriv = shutil.which("setpriv", path=TOOL_ENV["PATH"])
    if not setpriv:
        return []
    probe = subprocess.run([setpriv, "--pdeathsig", "KILL", "--", "true"], capture_output=True, timeout=10)
    return [setpriv, "--pdeathsig", "KILL", "--"] if probe.returncode == 0 else []
