"""The index as an OpenEnv discovery catalog snapshot, and the checks a snapshot must pass to be imported.

Pure: plain data in, a snapshot (a JSON-ready dict) out; bytes in, a checked snapshot or one clear refusal out.

The format is openenv 0.10.0's discovery catalog (`openenv/discovery/`, profile `0.1-draft`): a snapshot
`{schema_version, publisher, source, generator, inventory, entries, issues, complete, digest}` whose entries are
Agentic Resource Discovery entries (`@context, identifier, displayName, type, description, tags, capabilities,
representativeQueries, metadata`) carrying an environment card in `data` (`schema_version, name, description,
owner, source, artifact_availability, artifacts, license, license_url?, interfaces, manifest_spec_version?,
framework_requirement?`). `discovery_schemas/catalog.schema.json` is openenv 0.10.0's
`openenv/discovery/schemas/0.1-draft/catalog.schema.json`, copied byte for byte (a test compares it with the
installed package's); OpenEnv is BSD-3-Clause, (c) Meta Platforms, Inc. and affiliates (tests/data/NOTICE).

- **digest**: exactly openenv's `serialization.catalog_digest`: `"sha256:"` + the SHA-256 of the snapshot without
  `digest`, as pydantic would dump it (defaults filled in, unset optional card fields left out, the licence in its
  canonical SPDX spelling), serialized with sorted keys, no spaces, UTF-8 and no NaN.
- **identifiers**: openenv's producer's, `urn:air:<publisher>:openenv:<sha256 of "uri\\npath">:<revision>`: one
  identifier per revision card; an entry republished from an imported snapshot keeps everything but the publisher.
- **complete**: true exactly when no issue is an error, and every inventory path is either an entry or an error.

Two profiles, named by `generator.name`:

- **stock** (`openenv-git-catalog`): one GitHub repository at one commit, environments in direct children of
  `inventory.root`. Emitted unchanged when every active environment of the index was imported from such a
  snapshot of one repository at one commit; openenv's own `load_catalog` then reads the export.
- **openenv-hub** (ours): a whole index, many sources. It is the stock schema with three values widened (see
  `hub_profile_schema`) and nothing else: the snapshot's `source` is the index itself (`provider: "openenv-hub"`,
  `id`: the publisher, `uri`: where the snapshot is served, `revision`: SHA-256 over its inventory and
  identifiers); `inventory` lists every active environment by its hub id `owner/name` under root `.`; each entry
  says which in `metadata["openenv-hub"].environment`, beside its page and its verdict. Cards keep the stock
  shape; only `source.provider` may also be:

  - `huggingface`, a Space: `id` is the Space id, `uri` `https://huggingface.co/spaces/<id>` (its git
    repository), `path` `.`, `revision` the commit sha; `artifact_availability` is `resolvable` with that git
    artifact; `owner` `{authority: huggingface.co, id: <owner>}`. `metadata.huggingface` holds what a consumer
    needs to pull it: `{repo_type: "space", repo_id, revision, space_url, pip}`, where `space_url` is the Hub's
    host for the Space and `pip` the pinned install line, both from `registry.pulls.pull_forms`.
  - `local`, a folder of the hub's own local sources: `uri` is the hub's page (the folder's path is for staff
    only), `revision` the content digest, `artifact_availability` `external` (nothing a consumer can fetch).

  Environments imported with a `github` card are emitted with that card unchanged.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from registry.conformance.static import _reject_constant, _unique_object  # the strict JSON reader the probe uses
from registry.pulls import HUB_WEB, PullTarget, pull_forms

PROFILE_VERSION = "0.1-draft"
MEDIA_TYPE = "application/vnd.openenv.environment-card+json"
ARD_CONTEXT = "https://agenticresourcediscovery.org/context/v1"
NAMESPACE = "openenv"
STOCK_GENERATOR = {"name": "openenv-git-catalog", "version": "1"}
HUB_GENERATOR = {"name": "openenv-hub", "version": "1"}
HUB_KEY = "openenv-hub"  # the snapshot source provider of our profile, and our key in an entry's metadata
PROVIDERS = ("github", "huggingface", "local")
SCHEMA_FILE = Path(__file__).with_name("discovery_schemas") / "catalog.schema.json"
MAX_SNAPSHOT_BYTES = 4 * 1024 * 1024
MAX_TEXT = 8192  # openenv's NonEmpty
SIMULATION_CONTROLS = frozenset({"reset", "step", "state", "get_state"})
_GITHUB_ID = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
# openenv's `Publisher`: an explicit DNS authority.
_PUBLISHER = re.compile(r"(?=.{3,253}$)(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\.)+[a-zA-Z]{2,63}")
DEFAULT_PUBLISHER = "openenv-hub.localhost"


class SnapshotError(ValueError):
    """A snapshot that cannot be taken as it is; the message is one sentence for a person."""


@dataclass(frozen=True)
class CatalogEnvironment:
    """One active environment of the index, as plain data: everything its catalog entry is made from."""

    owner: str
    name: str
    source: str  # huggingface | local | catalog
    revision: str = ""  # the head's sha or content digest; empty before anything was read
    display_name: str = ""  # the manifest's name
    description: str = ""
    tags: tuple[str, ...] = ()
    license: object = None  # `license` of the README's front matter, as written
    spec_version: object = None  # the manifest's `spec_version`
    openenv_requirement: str = ""
    host: str = ""  # the Hub's facts about a Space
    subdomain: str = ""
    page_url: str = ""  # the hub's page for the environment
    verdict: dict | None = None  # {outcome, revision, finished_at} of the run behind the verdict
    mcp_tools: tuple[str, ...] = ()
    imported: dict | None = None  # source "catalog": the entry as it was imported

    @property
    def id(self) -> str:
        return f"{self.owner}/{self.name}"


# --- the digest, exactly as openenv computes it ----------------------------------------------------------------

_CARD_OPTIONAL = ("license_url", "manifest_spec_version", "framework_requirement")


def normalized(snapshot: dict) -> dict:
    """The snapshot as openenv's `CatalogSnapshot.model_dump(by_alias=True, exclude_none=True)` gives it back:
    defaults filled in, unset optional card fields left out, the licence canonical. Expects a schema-valid one."""
    doc = copy.deepcopy(snapshot)
    doc.setdefault("schema_version", PROFILE_VERSION)
    doc["generator"] = {**STOCK_GENERATOR, **doc.get("generator", {})}
    doc.setdefault("issues", [])
    for entry in doc.get("entries", []):
        entry.setdefault("@context", ARD_CONTEXT)
        entry.setdefault("type", MEDIA_TYPE)
        for key, default in (("tags", []), ("capabilities", []), ("representativeQueries", []), ("metadata", {})):
            entry.setdefault(key, default)
        card = entry["data"]
        card.setdefault("artifacts", [])
        for key in _CARD_OPTIONAL:
            if card.get(key, 0) is None:
                del card[key]
        try:
            card["license"] = _canonical_license(card["license"])
        except (KeyError, InvalidLicenseExpression):
            pass  # not a card openenv would take: the schema or the profile rules refuse the snapshot for it
    return doc


def snapshot_digest(snapshot: dict) -> str:
    """openenv's `serialization.catalog_digest`: SHA-256 over the normalized snapshot without its digest."""
    payload = {k: v for k, v in normalized(snapshot).items() if k != "digest"}
    encoded = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                         allow_nan=False).encode("utf-8")
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


def snapshot_bytes(snapshot: dict) -> bytes:
    """The snapshot as openenv's `write_catalog` writes it (two-space indent, sorted keys, a final newline)."""
    return (json.dumps(snapshot, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n").encode()


def _canonical_license(value: str) -> str:
    return value if value in ("other", "unknown") else str(canonicalize_license_expression(value))


# --- building a snapshot -------------------------------------------------------------------------------------


def publisher_for(*, configured: str, site_url: str) -> str:
    """Who publishes the snapshot: the configured DNS name, else the site's host when it is one (an address or a
    bare `localhost` is not), else DEFAULT_PUBLISHER. A configured name that is not a DNS name is refused."""
    if configured:
        if not _PUBLISHER.fullmatch(configured):
            raise ValueError(f"HUB_CATALOG_PUBLISHER={configured!r} is not a DNS name such as hub.example.org")
        return configured
    host = urlsplit(site_url).hostname or ""
    return host if _PUBLISHER.fullmatch(host) else DEFAULT_PUBLISHER


def identifier(publisher: str, uri: str, path: str, revision: str) -> str:
    """openenv's revision-card identifier (`producer._entry`): the locator is the SHA-256 of `uri\\npath`."""
    locator = hashlib.sha256(f"{uri}\n{path}".encode()).hexdigest()
    return f"urn:air:{publisher}:{NAMESPACE}:{locator}:{revision}"


def republished(entry_identifier: str, publisher: str) -> str:
    """An imported entry's identifier under this publisher: namespace, locator and revision kept."""
    return f"urn:air:{publisher}:{entry_identifier.split(':', 3)[3]}"


def _text(value: str, fallback: str) -> str:
    value = (value or "").strip()
    return (value or fallback)[:MAX_TEXT]


def _license(value: object, evidence_url: str) -> tuple[str, str | None]:
    """The card's licence from a README's front matter, as openenv's `metadata.license_declaration` reads it: an
    SPDX expression, "other" (with where it is declared, which must be an https URL) or "unknown"."""
    if not isinstance(value, str) or not value.strip():
        return "unknown", None
    url = evidence_url if evidence_url.startswith("https://") else None
    value = value.strip()
    if value in ("unknown", "other"):
        return (value, url) if value == "unknown" or url else ("unknown", None)
    try:
        return str(canonicalize_license_expression(value)), url
    except InvalidLicenseExpression:
        return ("other", url) if url else ("unknown", None)


def _framework_requirement(requirement: str) -> str | None:
    """The `openenv` requirement, when that is what the package requires (the card names no other package)."""
    try:
        return requirement if canonicalize_name(Requirement(requirement).name) == "openenv" else None
    except InvalidRequirement:
        return None


def _hub_metadata(env: CatalogEnvironment) -> dict:
    return {"environment": env.id, "page": env.page_url, "verdict": env.verdict, "mcp_tools": list(env.mcp_tools)}


def _card(env: CatalogEnvironment, source: dict, *, owner: object, availability: str,
          license_url_base: str) -> dict:
    license_name, license_url = _license(env.license, license_url_base)
    card = {
        "schema_version": PROFILE_VERSION,
        "name": _text(env.display_name, env.name),
        "description": _text(env.description, f"OpenEnv environment {env.id} (its package declares no description)."),
        "owner": owner,
        "source": source,
        "artifact_availability": availability,
        "artifacts": ([{"kind": "git", "uri": source["uri"], "path": source["path"], "revision": source["revision"]}]
                      if availability == "resolvable" else []),
        "license": license_name,
        "interfaces": [{"role": "orchestration", "protocol": "openenv"}],
    }
    optional = {"license_url": license_url,
                "manifest_spec_version": env.spec_version if type(env.spec_version) in (int, str) else None,
                "framework_requirement": _framework_requirement(env.openenv_requirement)}
    return card | {k: v for k, v in optional.items() if v is not None}


def _entry(env: CatalogEnvironment, publisher: str, hub: str) -> dict:
    if env.imported is not None:
        entry = copy.deepcopy(env.imported)
        entry["identifier"] = republished(entry["identifier"], publisher)
        entry["metadata"] = {**entry.get("metadata", {}), HUB_KEY: _hub_metadata(env)}
        return entry
    metadata = {HUB_KEY: _hub_metadata(env)}
    if env.source == "huggingface":
        uri = f"{hub.rstrip('/')}/spaces/{env.id}"
        source = {"provider": "huggingface", "id": env.id, "uri": uri, "path": ".", "revision": env.revision}
        card = _card(env, source, owner={"authority": urlsplit(hub).hostname or "huggingface.co", "id": env.owner},
                     availability="resolvable", license_url_base=f"{uri}/blob/{env.revision}/README.md")
        forms = {f.kind: f.text for f in pull_forms(PullTarget(
            owner=env.owner, name=env.name, sha=env.revision, host=env.host, subdomain=env.subdomain, hub=hub))}
        metadata["huggingface"] = {"repo_type": "space", "repo_id": env.id, "revision": env.revision,
                                   "space_url": forms["running_url"], "pip": forms["pip"]}
    else:
        source = {"provider": "local", "id": env.id, "uri": env.page_url, "path": ".", "revision": env.revision}
        card = _card(env, source, owner="unknown", availability="external", license_url_base="")
    return {
        "@context": ARD_CONTEXT,
        "identifier": identifier(publisher, source["uri"], source["path"], env.revision),
        "displayName": card["name"],
        "type": MEDIA_TYPE,
        "description": card["description"],
        "data": card,
        "tags": sorted({t[:MAX_TEXT] for t in env.tags if isinstance(t, str) and t.strip()}),
        "capabilities": [],
        "representativeQueries": [],
        "metadata": metadata,
    }


def _stock_scope(entries: list[dict], issues: list[dict]) -> tuple[dict, str] | None:
    """(repository, root) when the entries are all stock cards of one GitHub repository at one commit, in direct
    children of one folder: the snapshot can then be the stock profile itself."""
    sources = [e["data"]["source"] for e in entries]
    if issues or not sources or any(s["provider"] != "github" for s in sources):
        return None
    repositories = {(s["id"], s["uri"], s["revision"]) for s in sources}
    roots = {s["path"].rpartition("/")[0] for s in sources}
    if len(repositories) != 1 or len(roots) != 1 or "." in {s["path"] for s in sources}:
        return None
    (repo_id, uri, revision), root = repositories.pop(), roots.pop()
    return {"provider": "github", "id": repo_id, "uri": uri, "revision": revision}, root or "."


def build_snapshot(*, publisher: str, catalog_url: str, environments: list[CatalogEnvironment],
                   hub: str = HUB_WEB) -> dict:
    """The snapshot of these environments (every active one of the index), with its digest.

    Invariants: one entry per environment that has a revision, an error issue for each that has none, so
    `complete` is true exactly when every environment is listed; the same environments give the same bytes.
    """
    environments = sorted(environments, key=lambda e: e.id.lower())
    entries = [_entry(env, publisher, hub) for env in environments if env.revision]
    issues = [{"path": env.id, "code": "no_revision", "severity": "error",
               "message": "No revision of this environment has been read yet."}
              for env in environments if not env.revision]
    stock = _stock_scope(entries, issues)
    if stock:
        source, root = stock
        entries.sort(key=lambda e: e["data"]["source"]["path"])
        inventory = {"root": root, "paths": [e["data"]["source"]["path"] for e in entries]}
        generator = STOCK_GENERATOR
    else:
        paths = [env.id for env in environments]
        inventory = {"root": ".", "paths": paths}
        index = json.dumps([paths, [e["identifier"] for e in entries]], separators=(",", ":"))
        source = {"provider": HUB_KEY, "id": publisher, "uri": catalog_url,
                  "revision": hashlib.sha256(index.encode()).hexdigest()}
        generator = HUB_GENERATOR
    snapshot = {
        "schema_version": PROFILE_VERSION, "publisher": publisher, "source": source, "generator": dict(generator),
        "inventory": inventory, "entries": entries, "issues": issues, "complete": not issues,
    }
    return snapshot | {"digest": snapshot_digest(snapshot)}


# --- reading and checking a snapshot ---------------------------------------------------------------------------


@cache
def stock_schema() -> dict:
    """openenv 0.10.0's catalog schema (the vendored copy)."""
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def hub_profile_schema(stock: dict) -> dict:
    """Our profile's schema: the stock one with exactly these values widened: a card's source provider may also be
    huggingface or local, the snapshot's source provider openenv-hub, and the generator is openenv-hub's."""
    schema = copy.deepcopy(stock)
    defs = schema["$defs"]
    defs["EnvironmentSource"]["properties"]["provider"] = {"enum": list(PROVIDERS), "title": "Provider",
                                                           "type": "string"}
    defs["RepositorySource"]["properties"]["provider"] = {"enum": ["github", HUB_KEY], "title": "Provider",
                                                          "type": "string"}
    defs["Generator"]["properties"]["name"] = {"const": HUB_GENERATOR["name"], "title": "Name", "type": "string"}
    defs["Generator"]["required"] = ["name", "version"]
    schema["required"] = [*schema["required"], "generator"]
    return schema


def is_hub_profile(snapshot: dict) -> bool:
    generator = snapshot.get("generator")
    return isinstance(generator, dict) and generator.get("name") == HUB_GENERATOR["name"]


def schema_problem(snapshot: object, schema: dict) -> str | None:
    """The most telling schema violation, in words, or None."""
    error = best_match(Draft202012Validator(schema).iter_errors(snapshot))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the top level"
    return f"at {where}: {error.message[:300]}"


def parse_snapshot(data: bytes) -> dict:
    """A snapshot read from bytes and checked through: schema, profile rules, digest, completeness. Returns it
    normalized (as its digest was computed); raises SnapshotError with one sentence saying what is wrong."""
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"The snapshot is larger than {MAX_SNAPSHOT_BYTES // (1024 * 1024)} MiB.")
    try:
        snapshot = json.loads(data.decode("utf-8"), object_pairs_hook=_unique_object, parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise SnapshotError(f"The snapshot is not valid JSON in UTF-8 ({str(exc)[:200]}).") from None
    except ValueError as exc:  # a key twice in one object, NaN or Infinity: JSON openenv's reader refuses too
        raise SnapshotError(f"The snapshot is not valid JSON: {str(exc)[:200]}.") from None
    check_snapshot(snapshot)
    return normalized(snapshot)


def check_snapshot(snapshot: object) -> None:
    """Raise SnapshotError unless the snapshot follows its profile's schema and rules, its digest is its content's
    and it is complete: the checks openenv's `load_catalog` makes, in the same order, for either profile."""
    hub = isinstance(snapshot, dict) and is_hub_profile(snapshot)
    profile = "openenv-hub" if hub else f"OpenEnv {PROFILE_VERSION}"
    problem = schema_problem(snapshot, hub_profile_schema(stock_schema()) if hub else stock_schema())
    if problem:
        raise SnapshotError(f"The snapshot does not follow the {profile} catalog schema {problem}.")
    try:
        problem = _rule_problem(snapshot, hub)
    except InvalidLicenseExpression as exc:
        problem = f"a licence is not an SPDX expression, 'other' or 'unknown' ({str(exc)[:120]})"
    if problem:
        raise SnapshotError(f"The snapshot breaks a rule of the {profile} catalog profile: {problem}.")
    if not snapshot["complete"]:
        errors = sum(1 for issue in snapshot.get("issues", []) if issue["severity"] == "error")
        raise SnapshotError(f"The snapshot is partial (complete is false): {errors} of the "
                            f"{len(snapshot['inventory']['paths'])} environments it inventories are not in it.")
    digest = snapshot_digest(snapshot)
    if digest != snapshot["digest"]:
        raise SnapshotError(f"The snapshot's digest {snapshot['digest']} does not match its content ({digest}): "
                            "it was changed after it was made.")


def _github_problem(source: dict) -> str | None:
    """openenv's `models.github_repository`: a credential-free https://github.com/<id>.git naming `id`."""
    parts = urlsplit(source["uri"])
    repo = parts.path.removeprefix("/").removesuffix(".git")
    if (parts.scheme != "https" or parts.netloc.lower() != "github.com" or parts.query or parts.fragment
            or "%" in parts.path or not parts.path.endswith(".git") or not _GITHUB_ID.fullmatch(repo)
            or any(p in (".", "..") for p in repo.split("/"))):
        return f"{source['uri'][:200]!r} is not a credential-free GitHub HTTPS Git URI"
    return None if repo == source["id"] else f"source id {source['id'][:200]!r} does not match {source['uri'][:200]!r}"


def entry_environment(entry: dict) -> str:
    """Which environment of the index an entry of our profile lists (`metadata["openenv-hub"].environment`)."""
    ours = entry.get("metadata", {}).get(HUB_KEY)
    value = ours.get("environment") if isinstance(ours, dict) else None
    return value if isinstance(value, str) else ""


def entry_environment_id(entry: dict, *, hub: bool) -> str:
    """The hub id (`owner/name`) an imported entry becomes: the one our profile names; for a stock card, the
    repository's owner and the environment's folder (the repository's name for an environment at its root)."""
    if hub:
        return entry_environment(entry)
    source = entry["data"]["source"]
    owner, repo = source["id"].split("/", 1)
    return f"{owner}/{repo if source['path'] == '.' else source['path'].rsplit('/', 1)[-1]}"


def _card_problem(entry: dict) -> str | None:
    """openenv's `EnvironmentCard` and `DiscoveryEntry` validators beyond the schema."""
    card = entry["data"]
    source = card["source"]
    _canonical_license(card["license"])
    if card.get("license_url") is not None and not card["license_url"].startswith("https://"):
        return "license_url is not an https URL"
    if source["provider"] == "github" and (problem := _github_problem(source)):
        return problem
    if any((a["uri"], a["path"], a["revision"]) != (source["uri"], source["path"], source["revision"])
           for a in card.get("artifacts", [])):
        return "an artifact does not identify the card's source"
    if card.get("framework_requirement") is not None and not _framework_requirement(card["framework_requirement"]):
        return "framework_requirement does not declare the openenv package"
    tools = [i for i in card["interfaces"] if i["role"] == "agent-tools"]
    if any(t["source_revision"] != source["revision"] for t in tools):
        return "a tool declaration is not bound to the source revision"
    if len({t["protocol"] for t in tools}) != len(tools):
        return "an agent-tools protocol is declared twice"
    capabilities = entry.get("capabilities", [])
    if any(c.casefold() in SIMULATION_CONTROLS for c in capabilities):
        return "capabilities advertise simulation controls"
    if capabilities and not tools:
        return "capabilities need an agent-tools declaration"
    return None


def _rule_problem(snapshot: dict, hub: bool) -> str | None:
    """The first rule of the profile that the (schema-valid) snapshot breaks, in words, or None."""
    publisher, top = snapshot["publisher"], snapshot["source"]
    if not hub and (problem := _github_problem(top)):
        return problem
    identifiers, found = set(), []
    for i, entry in enumerate(snapshot["entries"]):
        source = entry["data"]["source"]
        where = f"entry {i} ({entry['identifier'][:120]})"
        if not entry["identifier"].startswith(f"urn:air:{publisher}:"):
            return f"{where} is not under the snapshot's publisher {publisher}"
        if not entry["identifier"].endswith(":" + source["revision"]):
            return f"{where} does not name its source revision {source['revision']}"
        if entry["identifier"] in identifiers:
            return f"{where} appears twice"
        identifiers.add(entry["identifier"])
        if problem := _card_problem(entry):
            return f"{where}: {problem}"
        if hub:
            found.append(entry_environment(entry))
            if not found[-1]:
                return f"{where} does not say which environment it lists (metadata {HUB_KEY}.environment)"
            ours = entry.get("metadata", {}).get("huggingface")
            if source["provider"] == "huggingface" and not (
                    source["path"] == "." and isinstance(ours, dict) and ours.get("repo_type") == "space"
                    and ours.get("repo_id") == source["id"] and ours.get("revision") == source["revision"]):
                return (f"{where}: a Space's card has path '.' and metadata.huggingface names the same Space and "
                        "revision")
        else:
            if (source["id"], source["uri"], source["revision"]) != (top["id"], top["uri"], top["revision"]):
                return f"{where}: its source differs from the snapshot's repository"
            found.append(source["path"])
    paths = snapshot["inventory"]["paths"]
    if len(paths) != len(set(paths)):
        return "the inventory lists an environment twice"
    root = snapshot["inventory"]["root"]
    if not hub and any(p == "." or p.rpartition("/")[0] != ("" if root == "." else root) for p in paths):
        return "inventory paths must be direct children of its root"
    if len(found) != len(set(found)):
        return "two entries list one environment"
    errors = {issue["path"] for issue in snapshot.get("issues", []) if issue["severity"] == "error"}
    if set(found) & errors or set(found) | errors != set(paths):
        return "the inventory does not account for every environment (each is an entry or an error, not both)"
    if snapshot["complete"] != (not errors):
        return f"complete is {str(snapshot['complete']).lower()} but {len(errors)} issues are errors"
    return None

