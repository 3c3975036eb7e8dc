"""A package folder on disk, read as the index reads it: its content digest, its file listing, its metadata files.

No Django: the local sources' indexer (registry/services/index.py) and `openenv-hub check DIR` (cli/) read a
folder through these functions, so a folder's revision sha, file listing and facts are the same in both.
The walk never follows a link, skips caches and virtualenvs, and is capped in files and bytes so that a
hostile folder cannot stall the reader.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from registry import manifest as mf

# How many file paths a revision keeps (enough for any real package; a hostile repo can have millions).
MAX_LISTED_FILES = 2_000

LOCAL_SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
LOCAL_MAX_FILES = 5_000
LOCAL_MAX_BYTES = 64 * 1024 * 1024


def local_package_digest(root: Path) -> tuple[str, list[dict]]:
    """sha256 over every file of a package folder (paths and bytes), and the list of its files.

    Symlinks are not followed, caches and virtualenvs are skipped, and the walk
    is capped in files and bytes so a hostile folder cannot stall the indexer.
    Raises OSError or ValueError (too large).
    """
    h = hashlib.sha256()
    listing: list[dict] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in LOCAL_SKIP_DIRS and not d.endswith(".egg-info"))
        for filename in sorted(filenames):
            path = Path(dirpath, filename)
            if path.is_symlink() or not path.is_file() or filename.endswith((".pyc", ".pyo")):
                continue
            size = path.stat().st_size
            total += size
            if len(listing) >= LOCAL_MAX_FILES or total > LOCAL_MAX_BYTES:
                raise ValueError(f"the package folder is larger than {LOCAL_MAX_FILES:,} files or {LOCAL_MAX_BYTES:,} bytes")
            rel = path.relative_to(root).as_posix()
            listing.append({"path": rel, "size": size})
            h.update(rel.encode() + b"\0" + str(size).encode() + b"\0")
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 16), b""):
                    h.update(chunk)
    return h.hexdigest(), sorted(listing, key=lambda item: item["path"])[:MAX_LISTED_FILES]


def read_capped(path: Path, cap: int) -> bytes | None:
    """A regular file's bytes (None when absent or a link), one byte past `cap` at most: enough for
    `manifest.decode_text` to report that it is too large."""
    if not path.is_file() or path.is_symlink():
        return None
    with open(path, "rb") as fh:
        return fh.read(cap + 1)


def package_facts(folder: Path) -> mf.PackageFacts:
    """What the index keeps from the folder's metadata files (openenv.yaml, README.md, pyproject.toml)."""
    return mf.read_package({path: read_capped(folder / path, mf.FILE_CAPS[path]) for path in mf.PACKAGE_FILES})
