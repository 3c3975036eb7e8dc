"""How to pull or use an environment at one revision: the single source of the pull commands.

Pure: facts in, forms out. The environment page's pull block and the API use it (the command-line
companion later), so they can never disagree.

Facts behind the forms (the `openenv` 0.10.0 package, the Hub):
- a Space answers at the Hub's `host` (`https://{subdomain}.hf.space`); its
  WebSocket session at `wss://{subdomain}.hf.space/ws`;
- `AutoEnv.from_env("owner/name")` derives the Space URL itself (openenv 0.10.0
  lowercases the id and turns every character outside [a-z0-9] into '-'; older
  releases did neither). Where that differs from the Hub's own host, the client
  snippet passes `base_url=` and says why;
- the client package installs from the Space's git repository, pinned here to
  the commit (`@sha`); the Docker image tag follows the Space, not the commit.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

HUB_WEB = "https://huggingface.co"
IMAGE_REGISTRY = "registry.hf.space"


@dataclass(frozen=True)
class PullForm:
    """One way to use the environment: `text` is what to copy (a URL, a command or a code snippet)."""

    kind: str  # running_url | websocket_url | client | pip | docker | local_run
    label: str
    text: str
    language: str = "shell"  # shell | python | url
    note: str = ""


@dataclass(frozen=True)
class PullTarget:
    """The facts a pull block needs about one revision of one environment."""

    owner: str
    name: str
    sha: str
    source: str = "huggingface"  # or "local", or "git" (a folder of a git repository, e.g. an imported GitHub card)
    host: str = ""  # the Hub's `host` fact, e.g. https://openenv-echo-env.hf.space
    subdomain: str = ""  # the Hub's `subdomain` fact
    app: str = "server.app:app"  # the manifest's `app`
    port: int = 8000
    local_path: str = ""  # for local sources, shown to staff only (empty: a placeholder is used)
    repo_uri: str = ""  # for "git": the repository's clone URI
    path: str = "."  # for "git": the environment's folder in it
    hub: str = HUB_WEB  # the Hub's web address (HF_ENDPOINT)

    @property
    def repo_id(self) -> str:
        return f"{self.owner}/{self.name}"


def pull_target(env, revision, *, hub: str, staff: bool = False) -> PullTarget:
    """The pull facts of `revision` of the indexed environment `env` (a registry Environment and Revision, read
    by attribute): its manifest's app and port (defaults for anything unusable), where its code lives (an
    imported card pulls from the source it names), and the local folder's path only for `staff`."""
    manifest = revision.manifest if isinstance(revision.manifest, dict) else {}
    app = manifest.get("app") if isinstance(manifest.get("app"), str) else "server.app:app"
    port = manifest.get("port")
    port = port if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 else 8000
    source = env.source
    if source == "catalog":
        source = {"huggingface": "huggingface", "github": "git"}.get(env.source_provider, "local")
    host, subdomain = revision.host, revision.subdomain
    space_id = getattr(revision, "space_id", "") or ""
    if env.source == "huggingface" and space_id and space_id.lower() != f"{env.owner}/{env.name}".lower():
        # Read before the Space moved on the Hub: its host moved with its name, so derive it from the new one.
        host = subdomain = ""
    return PullTarget(owner=env.owner, name=env.name, sha=revision.sha, source=source, host=host,
                      subdomain=subdomain, app=app, port=port, hub=hub,
                      local_path=env.local_path if staff else "", repo_uri=env.source_uri, path=env.source_path or ".")


def openenv_derived_subdomain(repo_id: str) -> str:
    """The Space subdomain `AutoEnv.from_env` assumes (openenv 0.10.0, `hf_space_subdomain`)."""
    return re.sub(r"[^a-z0-9]", "-", repo_id.lower())


def space_host(target: PullTarget) -> str:
    """The Space's URL from the Hub's facts: its `host`, else its `subdomain`, else what openenv would derive."""
    if target.host.startswith("https://"):
        return target.host.rstrip("/")
    subdomain = target.subdomain or openenv_derived_subdomain(target.repo_id)
    return f"https://{subdomain}.hf.space"


def pull_forms(target: PullTarget) -> list[PullForm]:
    """Every form, pinned to `target.sha` wherever the form can be pinned, in the order a page shows them."""
    if target.source == "local":
        return _local_forms(target)
    if target.source == "git":
        return _git_forms(target)
    host = space_host(target)
    subdomain = host.removeprefix("https://").split(".", 1)[0]
    derived = f"https://{openenv_derived_subdomain(target.repo_id)}.hf.space"
    repo = f"{target.hub.rstrip('/')}/spaces/{target.repo_id}"
    client = f'from openenv import AutoEnv\n\nenv = AutoEnv.from_env("{target.repo_id}", base_url="{host}")'
    client_note = ("AutoEnv installs the typed client from the Space's repository (allow it with "
                   "OPENENV_TRUST_REMOTE_CODE=1); add skip_install=True for a generic client and no installed code.")
    if host != derived:
        client = client.replace("\n\nenv", f"\n\n# AutoEnv would guess {derived}; the Hub serves this Space at "
                                f"{host}.\nenv")
        client_note = (f"base_url is passed explicitly: openenv derives {derived} from the id, but the Hub reports "
                       f"this Space's host as {host}. " + client_note)
    clone_dir = shlex.quote(target.name)
    return [
        PullForm("running_url", "Running API", host, "url",
                 "The Space as it runs now; it may have moved past this revision."),
        PullForm("websocket_url", "WebSocket session", f"wss://{host.removeprefix('https://')}/ws", "url",
                 "One episode per connection: reset, step, state (OpenEnv's /ws protocol)."),
        PullForm("client", "Python client", client, "python", client_note),
        PullForm("pip", "Client package, pinned",
                 f"pip install {shlex.quote(f'git+{repo}@{target.sha}')}", "shell",
                 "Installs the environment's own package (client and models) at exactly this commit."),
        PullForm("docker", "Docker image", f"docker pull {IMAGE_REGISTRY}/{subdomain}:latest", "shell",
                 "The image tag follows the Space, not this commit: it is whatever the Space runs now."),
        PullForm("local_run", "Run it locally, pinned",
                 f"git clone {shlex.quote(repo)} {clone_dir}\ncd {clone_dir}\ngit checkout {target.sha}\n"
                 f"pip install -e .\nuvicorn {shlex.quote(target.app)} --port {target.port}", "shell",
                 f"Serves this exact revision on http://127.0.0.1:{target.port} (WebSocket at /ws)."),
    ]


def _git_forms(target: PullTarget) -> list[PullForm]:
    subdirectory = "" if target.path == "." else f"#subdirectory={target.path}"
    clone_dir, folder = shlex.quote(target.name), shlex.quote(target.path)
    return [
        PullForm("pip", "Package, pinned",
                 f"pip install {shlex.quote(f'git+{target.repo_uri}@{target.sha}{subdirectory}')}", "shell",
                 "Installs the environment's own package at exactly this commit."),
        PullForm("local_run", "Run it locally, pinned",
                 f"git clone {shlex.quote(target.repo_uri)} {clone_dir}\ncd {clone_dir}\ngit checkout {target.sha}\n"
                 f"cd {folder}\npip install -e .\nuvicorn {shlex.quote(target.app)} --port {target.port}", "shell",
                 f"Serves this exact revision on http://127.0.0.1:{target.port} (WebSocket at /ws)."),
    ]


def _local_forms(target: PullTarget) -> list[PullForm]:
    folder = shlex.quote(target.local_path) if target.local_path else "<the package folder>"
    note = "" if target.local_path else "This environment comes from a folder on the hub's own machine."
    return [
        PullForm("pip", "Client package", f"pip install {folder}", "shell", note),
        PullForm("local_run", "Run it locally",
                 f"cd {folder}\nuvicorn {shlex.quote(target.app)} --port {target.port}", "shell",
                 f"Serves the folder's current content on http://127.0.0.1:{target.port}; this revision is its "
                 f"content digest {target.sha[:12]}."),
        PullForm("client", "Python client",
                 f'from openenv import AutoEnv\n\nenv = AutoEnv.from_env("{target.name}", '
                 f'base_url="http://127.0.0.1:{target.port}", skip_install=True)', "python",
                 "Connects to the server started above."),
    ]
