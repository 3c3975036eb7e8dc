"""Imports of OpenEnv discovery catalog snapshots (registry.discovery): another index's environments in this one.

A snapshot is imported whole or not at all: it is read (a file, or an http(s) URL with a timeout, a size cap and
no redirect to another host), checked through (schema, profile rules, completeness, digest) before anything is
written, and its entries are written in one transaction. Importing the same snapshot again changes nothing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
from django.db import transaction
from django.utils import timezone

from registry import discovery
from registry.models import ID_PART, SHA_PATTERN, Environment, Revision, environment_key
from registry.services.catalog import environment_catalog_refresh
from registry.services.index import environment_withdraw

logger = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 20.0
MAX_REDIRECTS = 5


class CatalogRefused(Exception):
    """A snapshot that is not imported; the message is one sentence saying why. Nothing was written."""


@dataclass
class CatalogImport:
    """What one import did, by environment id."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # why an entry was left out, one sentence each
    unpinned: list[str] = field(default_factory=list)  # entries whose revision cannot be an immutable Revision

    def line(self) -> str:
        return (f"created {len(self.created)}, updated {len(self.updated)}, unchanged {len(self.unchanged)}, "
                f"withdrawn {len(self.withdrawn)}, skipped {len(self.skipped)}, unpinned {len(self.unpinned)}")


def catalog_read(*, location: str, max_bytes: int = discovery.MAX_SNAPSHOT_BYTES) -> bytes:
    """The bytes of a snapshot from a file or an http(s) URL, at most `max_bytes` (CatalogRefused otherwise).
    A redirect is followed only to the same scheme, host and port, at most MAX_REDIRECTS times."""
    if not location.startswith(("http://", "https://")):
        try:
            with Path(location).open("rb") as file:
                data = file.read(max_bytes + 1)
        except OSError as exc:
            raise CatalogRefused(f"Cannot read {location}: {exc.strerror or exc}.") from None
        return _capped(data, location, max_bytes)
    origin = urlsplit(location)[:2] + (urlsplit(location).port,)
    url = location
    try:
        with httpx.Client(timeout=FETCH_TIMEOUT_S, follow_redirects=False,
                          headers={"Accept": "application/json"}) as client:
            for _ in range(MAX_REDIRECTS + 1):
                with client.stream("GET", url) as response:
                    if response.is_redirect:
                        url = urljoin(url, response.headers.get("Location", ""))
                        target = urlsplit(url)
                        if target[:2] + (target.port,) != origin:
                            raise CatalogRefused(f"{location} redirects to another host ({target.netloc}); "
                                                 "not followed.")
                        continue
                    if response.status_code != 200:
                        raise CatalogRefused(f"{location} answered HTTP {response.status_code}.")
                    data = b""
                    for chunk in response.iter_bytes():
                        data += chunk
                        if len(data) > max_bytes:
                            break
                    return _capped(data, location, max_bytes)
    except httpx.HTTPError as exc:
        raise CatalogRefused(f"Cannot fetch {location}: {exc or type(exc).__name__}.") from None
    raise CatalogRefused(f"{location} redirects more than {MAX_REDIRECTS} times.")


def _capped(data: bytes, location: str, max_bytes: int) -> bytes:
    if len(data) > max_bytes:
        raise CatalogRefused(f"{location} is larger than the {max_bytes // (1024 * 1024)} MiB a snapshot may be.")
    return data


def _planned(snapshot: dict) -> list[tuple[str, str, dict]]:
    """(owner, name, entry) for every entry, or CatalogRefused when an entry cannot be an environment here."""
    hub = discovery.is_hub_profile(snapshot)
    planned, keys = [], set()
    for entry in snapshot["entries"]:
        owner, _, name = discovery.entry_environment_id(entry, hub=hub).partition("/")
        if not (re.fullmatch(ID_PART, owner) and re.fullmatch(ID_PART, name)):
            raise CatalogRefused(f"The entry {entry['identifier'][:120]} would be the environment {owner}/{name}, "
                                 "which is not an id of this index (owner/name of letters, digits, '_', '.', '-').")
        if environment_key(owner, name) in keys:
            raise CatalogRefused(f"Two entries of the snapshot would both be the environment {owner}/{name}.")
        keys.add(environment_key(owner, name))
        planned.append((owner, name, entry))
    return planned


def catalog_import(*, data: bytes) -> CatalogImport:
    """Import a snapshot: create or update an environment (source `catalog`) for each entry, keeping its source,
    path and revision, and withdraw the environments an earlier snapshot of the same scope (publisher and source
    URI) listed that this one, complete, does not.

    Invariants: a snapshot that fails a check writes nothing (CatalogRefused); the writes are one transaction;
    an environment indexed from another source, or imported from another source, is never overwritten (the entry
    is skipped and said why); importing the same snapshot twice writes nothing the second time.
    """
    try:
        snapshot = discovery.parse_snapshot(data)
    except discovery.SnapshotError as exc:
        raise CatalogRefused(str(exc)) from None
    planned = _planned(snapshot)
    scope = f"{snapshot['publisher']} {snapshot['source']['uri']}"
    result = CatalogImport()
    with transaction.atomic():
        for owner, name, entry in planned:
            _entry_import(owner=owner, name=name, entry=entry, scope=scope, result=result)
        listed = {environment_key(owner, name) for owner, name, _ in planned}
        gone = (Environment.objects.filter(source=Environment.Source.CATALOG, catalog_scope=scope,
                                           status=Environment.Status.ACTIVE).exclude(key__in=listed))
        for env in gone:
            if environment_withdraw(environment=env, reason=f"No longer in the catalog of {snapshot['publisher']}."):
                result.withdrawn.append(env.repo_id)
    logger.info("catalog import from %s: %s", scope, result.line())
    return result


def _entry_import(*, owner: str, name: str, entry: dict, scope: str, result: CatalogImport) -> None:
    source = entry["data"]["source"]
    env = Environment.objects.select_for_update().filter(key=environment_key(owner, name)).first()
    where = (source["provider"], source["uri"], source["path"])
    if env and (env.source != Environment.Source.CATALOG
                or (env.source_provider, env.source_uri, env.source_path) != where):
        origin = env.source_uri if env.source == Environment.Source.CATALOG else env.get_source_display()
        result.skipped.append(f"{env.repo_id}: already indexed from {origin}; the entry was not imported.")
        return
    now = timezone.now()
    fields = {"source_provider": source["provider"], "source_uri": source["uri"], "source_path": source["path"],
              "source_revision": source["revision"], "catalog_scope": scope, "catalog_entry": entry}
    created = env is None
    if created:
        env = Environment.objects.create(source=Environment.Source.CATALOG, owner=owner, name=name, updated_at=now,
                                         changed_at=now, last_seen_at=now, **fields)
    revision = _revision(env, entry) if re.fullmatch(SHA_PATTERN, source["revision"]) else None
    if revision is None:
        result.unpinned.append(f"{env.repo_id}: revision {source['revision'][:80]!r} is neither a commit nor a "
                               "digest; kept on the environment, no revision recorded.")
    if not created and (env.status == Environment.Status.ACTIVE and env.head_id == getattr(revision, "pk", None)
                        and all(getattr(env, k) == v for k, v in fields.items())):
        result.unchanged.append(env.repo_id)
        return
    head_moved = env.head_id != getattr(revision, "pk", None)
    for key, value in fields.items():
        setattr(env, key, value)
    if env.status != Environment.Status.ACTIVE:
        env.status, env.status_reason, env.status_changed_at = Environment.Status.ACTIVE, "", now
    env.head, env.updated_at, env.changed_at, env.last_seen_at = revision, now, now, now
    env.save()
    if created or head_moved:
        environment_catalog_refresh(environment_id=env.pk)
    (result.created if created else result.updated).append(env.repo_id)


def _revision(env: Environment, entry: dict) -> Revision:
    """The entry's revision as an immutable Revision of the environment (written once, as the first card said)."""
    card = entry["data"]
    revision, _ = Revision.objects.get_or_create(environment=env, sha=card["source"]["revision"], defaults={
        "manifest_name": card["name"][:200], "description": card["description"],
        "tags": list(entry.get("tags", [])), "openenv_requirement": (card.get("framework_requirement") or "")[:200],
        "space_id": card["source"]["id"][:200] if card["source"]["provider"] == "huggingface" else "",
    })
    return revision
