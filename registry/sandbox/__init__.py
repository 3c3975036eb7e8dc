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

This is **not a VM**. The server shares the host kernel. Where the machine
allows, it gets its own network, PID and mount namespaces, a private root
holding no host files but /usr (see isolation.py), no privileges and an
environment built from scratch. What each layer does, and what happens when it
is unavailable, is listed in `RunningServer.isolation`; `SandboxConfig.require`
turns a missing layer into an error instead of a note. Production should run
this inside a container or VM that holds no credentials.

No Django: the caller passes paths and limits in. The modules, one job each:
`requirements` (what may be installed), `venvs` (building and caching venvs),
`processes` (rlimits, process groups, capped output, HTTP over a Unix socket),
`isolation` (the layers, the jail) and `server` (running and supervising).
"""

from .config import LAYERS, GiB, MiB, RequirementsError, SandboxConfig, SandboxError, SandboxLimits
from .processes import uds_request
from .requirements import normalize_requirement, package_requirements
from .server import RunningServer, running_server
from .venvs import ensure_venv, venv_key

__all__ = [
    "GiB",
    "LAYERS",
    "MiB",
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
