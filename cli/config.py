"""Where the hub is, and the personal token for it.

- the hub: `--hub`, else `OPENENV_HUB_URL`, else http://127.0.0.1:8000 (what `make run` serves);
- the token: `OPENENV_HUB_TOKEN`, else the one `openenv-hub login` stored for that hub in
  `$XDG_CONFIG_HOME/openenv-hub/credentials.json` (`~/.config/openenv-hub/` without XDG_CONFIG_HOME).

Tokens are kept per hub (by its origin), so a token given for one hub is never sent to another. The file is
written atomically with mode 0600 in a 0700 folder; a file others can read is still used, with a warning.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from cli.errors import UsageError

DEFAULT_HUB_URL = "http://127.0.0.1:8000"
CREDENTIALS_FILE = "credentials.json"
MAX_TOKEN_LENGTH = 512


def hub_url(explicit: str | None = None) -> str:
    """The hub's base URL (no trailing slash); a UsageError when it is not a plain http(s) URL."""
    raw = (explicit or os.environ.get("OPENENV_HUB_URL") or DEFAULT_HUB_URL).strip()
    where = "--hub" if explicit else "OPENENV_HUB_URL"
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise UsageError(f"{where} must be an http(s) URL such as {DEFAULT_HUB_URL}, not {raw!r}.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise UsageError(f"{where} must be an http(s) URL such as {DEFAULT_HUB_URL}, not {raw!r}.")
    if parts.username or parts.password:
        raise UsageError(f"{where} must not carry credentials; use `openenv-hub login` or OPENENV_HUB_TOKEN.")
    return raw.rstrip("/")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.lower()}"


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "openenv-hub"


def cache_dir() -> Path:
    """Where `check` keeps its venvs: OPENENV_HUB_CACHE_DIR, else $XDG_CACHE_HOME/openenv-hub (~/.cache/…)."""
    explicit = os.environ.get("OPENENV_HUB_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "openenv-hub"


def credentials_path() -> Path:
    return config_dir() / CREDENTIALS_FILE


def _read_credentials() -> dict:
    path = credentials_path()
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise UsageError(f"Could not read {path}: {exc.strerror or exc}.") from None
    if mode & 0o077:
        print(f"warning: {path} can be read by other users; `chmod 600 {path}` (or log in again) fixes it.",
              file=sys.stderr)
    try:
        data = json.loads(text)
    except ValueError:
        raise UsageError(f"{path} is not valid JSON; delete it and run `openenv-hub login` again.") from None
    return data if isinstance(data, dict) else {}


def _write_credentials(data: dict) -> Path:
    path = credentials_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{CREDENTIALS_FILE}.{os.getpid()}.tmp")
    # Created 0600 from the start (never briefly readable), then renamed over the old file.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)  # whatever the umask did
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def check_token(token: str) -> str:
    """The token stripped of surrounding blanks; a UsageError for something that cannot be a token."""
    token = token.strip()
    if not token:
        raise UsageError("No token given: paste the personal token the hub gave you (it starts with oeh_).")
    if len(token) > MAX_TOKEN_LENGTH or not token.isascii() or not token.isprintable() or " " in token:
        raise UsageError("That is not a token: a token is one word of printable ASCII characters.")
    return token


def store_token(hub: str, token: str) -> Path:
    data = _read_credentials()
    hubs = data.setdefault("hubs", {})
    hubs[_origin(hub)] = {"token": check_token(token)}
    return _write_credentials(data)


def forget_token(hub: str) -> bool:
    """Remove the token stored for `hub`; False when there was none. The file goes when it holds no token."""
    data = _read_credentials()
    hubs = data.get("hubs") if isinstance(data.get("hubs"), dict) else {}
    if hubs.pop(_origin(hub), None) is None:
        return False
    if hubs:
        _write_credentials(data)
    else:
        credentials_path().unlink(missing_ok=True)
    return True


def stored_token(hub: str) -> str | None:
    hubs = _read_credentials().get("hubs")
    entry = hubs.get(_origin(hub)) if isinstance(hubs, dict) else None
    token = entry.get("token") if isinstance(entry, dict) else None
    return token if isinstance(token, str) and token else None


def hub_token(hub: str) -> tuple[str | None, str]:
    """(token, where it came from) for `hub`: OPENENV_HUB_TOKEN, else the stored one; (None, "") without one."""
    env = os.environ.get("OPENENV_HUB_TOKEN", "").strip()
    if env:
        return env, "OPENENV_HUB_TOKEN"
    stored = stored_token(hub)
    if stored:
        return stored, str(credentials_path())
    return None, ""
