"""`openenv-hub push`: publish a package folder as a Docker Space, then have the hub index and validate it.

Publishing goes through `openenv push` when it is on PATH (what OpenEnv's own docs tell publishers to run),
else through `huggingface_hub` the way `openenv push` 0.10.0 does it: the same staging (ignore patterns, the
Dockerfile moved to the root with `ENABLE_WEB_INTERFACE=true`, Space front-matter added to a README that has
none), `create_repo(repo_type="space", space_sdk="docker", exist_ok=True)`, `upload_folder`, then the
manifest's `variables:` as Space variables. Both read `HF_ENDPOINT` and the Hugging Face token
(`HF_TOKEN` or `hf auth login`) from the environment, as `openenv push` does.

Then the hub is asked to refresh the Space (`POST /api/v1/environments/<owner>/<name>/refresh/`) and polled
until its head is the pushed commit and the verdict is for that commit.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from cli.api import HubAPI
from cli.errors import CliError, HubRefused, TimedOut, UsageError

# openenv 0.10.0's DEFAULT_PUSH_IGNORE_PATTERNS.
IGNORE_PATTERNS = [".*", "__pycache__", "*.pyc", "build/", "*.egg-info"]
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
REPO_ID_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"


def hf_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_HF_ENDPOINT).rstrip("/")


def hub_call(what: str, fn: Callable):
    """`fn()`, with the Hugging Face Hub's refusals and network failures turned into one sentence."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return fn()
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        detail = (exc.server_message or str(exc).splitlines()[0]).strip()
        hint = " (is HF_TOKEN, or `hf auth login`, a token with write access?)" if status in (401, 403) else ""
        raise CliError(f"The Hugging Face Hub refused to {what}: HTTP {status}: {detail}{hint}") from None
    except ConnectionError as exc:
        raise CliError(f"Could not reach the Hugging Face Hub at {hf_endpoint()} to {what}: {exc}.") from None
    except OSError as exc:  # a file of the package that cannot be read, a full disk
        raise CliError(f"Could not {what}: {exc}.") from None
    except Exception as exc:  # noqa: BLE001 - httpx2's transport errors, whose module we do not import
        if type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2"):
            raise CliError(f"Could not reach the Hugging Face Hub at {hf_endpoint()} to {what}: "
                           f"{exc or type(exc).__name__}.") from None
        raise


def hf_api():
    from huggingface_hub import HfApi
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # our own progress line says what is happening
    return HfApi(endpoint=hf_endpoint())


def check_repo_id(repo_id: str) -> str:
    import re

    if not re.fullmatch(f"{REPO_ID_PART}/{REPO_ID_PART}", repo_id):
        raise UsageError(f"{repo_id!r} is not an environment id: give it as owner/name.")
    return repo_id


def default_repo_id(manifest_name: str) -> str:
    """`<Hugging Face user>/<manifest name>`, as `openenv push` picks it."""
    who = hub_call("say who the token belongs to", lambda: hf_api().whoami())
    user = who.get("name") if isinstance(who, dict) else None
    if not user:
        raise CliError("The Hugging Face Hub did not say who the token belongs to; give --repo-id owner/name.")
    return check_repo_id(f"{user}/{manifest_name}")


# ---- staging, as openenv push 0.10.0 prepares a Space ------------------------------------------------------


def _ignored(relative: PurePosixPath) -> bool:
    for pattern in IGNORE_PATTERNS:
        if pattern.endswith("/"):
            base = pattern.rstrip("/")
            if fnmatch.fnmatch(relative.as_posix(), base) or fnmatch.fnmatch(relative.as_posix(), f"{base}/*"):
                return True
        elif fnmatch.fnmatch(relative.as_posix(), pattern) or fnmatch.fnmatch(relative.name, pattern):
            return True
    return False


def _front_matter(name: str) -> str:
    return (f"---\ntitle: {name.replace('_', ' ').title()} Environment Server\nemoji: 🔊\ncolorFrom: blue\n"
            "colorTo: indigo\nsdk: docker\npinned: false\napp_port: 8000\nbase_path: /web\ntags:\n  - openenv\n---\n\n")


def stage(folder: Path, staging: Path, name: str) -> None:
    """Copy `folder` into `staging` the way `openenv push` stages a Space (web interface enabled)."""
    for path in sorted(folder.rglob("*")):
        relative = PurePosixPath(path.relative_to(folder).as_posix())
        if any(_ignored(PurePosixPath(*relative.parts[: i + 1])) for i in range(len(relative.parts))):
            continue
        if path.is_symlink() or not path.is_file():
            continue
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    dockerfile = staging / "Dockerfile"
    if not dockerfile.exists() and (staging / "server" / "Dockerfile").exists():
        (staging / "server" / "Dockerfile").rename(dockerfile)
    if dockerfile.exists():
        text = dockerfile.read_text(encoding="utf-8")
        if "ENABLE_WEB_INTERFACE" not in text:
            lines, done, previous = [], False, ""
            for line in text.split("\n"):
                word = line.strip().split(maxsplit=1)[0].upper() if line.strip() else ""
                if word == "CMD" and not done and previous != "HEALTHCHECK":
                    lines.append("ENV ENABLE_WEB_INTERFACE=true")
                    done = True
                lines.append(line)
                previous = word or previous
            if not done:
                lines.append("ENV ENABLE_WEB_INTERFACE=true")
            dockerfile.write_text("\n".join(lines), encoding="utf-8")
    readme = staging / "README.md"
    if readme.exists():
        text = readme.read_text(encoding="utf-8")
        if "base_path: /web" not in text:
            if text.startswith("---"):
                lines = text.split("\n")
                for i, line in enumerate(lines[1:], start=1):
                    if line.strip() == "---":
                        lines.insert(i, "base_path: /web")
                        break
                readme.write_text("\n".join(lines), encoding="utf-8")
            else:
                readme.write_text(_front_matter(name) + text, encoding="utf-8")


# ---- publishing ----------------------------------------------------------------------------------------------


def openenv_command() -> str | None:
    return shutil.which("openenv")


def publish_with_openenv(command: str, folder: Path, repo_id: str) -> str:
    """Run `openenv push` (its output to our stderr), then read the commit it made from the Hub."""
    done = subprocess.run([command, "push", str(folder), "--repo-id", repo_id],
                          stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=sys.stderr, check=False)
    if done.returncode != 0:
        raise CliError(f"`openenv push` failed with exit status {done.returncode}; its output is above.")
    # openenv push does not print the commit: the Space's head right after it is the commit it made.
    sha = hub_call(f"read the head of {repo_id}", lambda: hf_api().space_info(repo_id).sha)
    if not sha:
        raise CliError(f"The Hugging Face Hub gave no commit for {repo_id} after `openenv push`.")
    return sha


def publish_with_huggingface_hub(folder: Path, repo_id: str, manifest: dict, staging: Path) -> str:
    """Stage, create the Space, upload, set the manifest's variables; the commit sha made (or the head, when
    nothing changed)."""
    name = str(manifest.get("name") or folder.name)
    stage(folder, staging, name)
    api = hf_api()
    hub_call(f"create the Space {repo_id}", lambda: api.create_repo(
        repo_id, repo_type="space", space_sdk="docker", exist_ok=True))
    info = hub_call(f"upload to {repo_id}", lambda: api.upload_folder(
        folder_path=str(staging), repo_id=repo_id, repo_type="space", ignore_patterns=IGNORE_PATTERNS,
        commit_message=f"Publish {name} with openenv-hub"))
    variables = manifest.get("variables")
    for key, value in (variables.items() if isinstance(variables, dict) else ()):
        hub_call(f"set the Space variable {key}", lambda: api.add_space_variable(repo_id, str(key), str(value)))
    return info.oid


# ---- waiting for the hub -------------------------------------------------------------------------------------


def wait_for_verdict(api: HubAPI, repo_id: str, sha: str, *, timeout_s: float, poll_s: float,
                     progress: Callable[[str, bool], None]) -> dict:
    """Poll the environment until its head is `sha` and its verdict is for `sha`; the environment's detail.

    A 404 (not indexed yet), a 429, a 5xx or a network failure is waited out; any other refusal ends it.
    """
    deadline = time.monotonic() + timeout_s
    short = sha[:12]
    while True:
        try:
            detail = api.environment(repo_id)
        except HubRefused as exc:
            if exc.status == 404:
                progress(f"waiting for the hub to index {repo_id}", True)
            elif exc.status == 429 or exc.status >= 500:
                progress(f"the hub is busy ({exc.status}); still waiting", False)
            else:
                raise
            detail = None
        except CliError as exc:
            progress(f"the hub did not answer ({exc}); still waiting", False)
            detail = None
        if detail is not None:
            verdict = detail.get("verdict") or {}
            if detail.get("head_sha") != sha:
                progress(f"waiting for the hub to see {short}", True)
            elif verdict.get("revision") != sha:
                progress(f"indexed {short}; waiting for its validation", True)
            else:
                return detail
        if time.monotonic() + poll_s > deadline:
            raise TimedOut(
                f"The hub did not index and validate {repo_id}@{short} within {timeout_s:g} s; it may still: "
                f"`openenv-hub info {repo_id}` shows where it is, or run push again with a longer --timeout.")
        time.sleep(poll_s)
