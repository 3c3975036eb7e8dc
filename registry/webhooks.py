"""What a Hugging Face Hub webhook delivery asks of the hub: parsed from its body, judged, fingerprinted.

Pure: bytes in, a `Delivery` out (or a `PayloadError` saying which 4xx and why); no database, no I/O. The
payload is the Hub's (webhook version 3): `{event: {action, scope}, repo: {type, name, id, private, headSha},
updatedRefs: [{ref, oldSha, newSha}], movedTo: {name, owner}, webhook: {id, version}}`. Everything in it is
untrusted: every field is type-checked, every text made storable and cut to its column.

A delivery is only ever a hint of which Space to look at: the task that acts on it asks the Hub what is true
now, so a late, replayed or reordered delivery can never make the index say something the Hub does not.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from registry.models import ID_PART

ACTIONS = ("create", "update", "delete", "move")
# What the hub does about a delivery: index (ask the Hub about the Space and follow it: index its head,
# withdraw it when it is gone or private, bring it back when it is public again) or move (rename, then index).
INDEX, MOVE = "index", "move"

_REPO_ID = re.compile(f"{ID_PART}/{ID_PART}")
_NAME = re.compile(ID_PART)
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# At most this many refs count towards the fingerprint (a push updates one; a hostile body may list thousands).
MAX_REFS = 20


class PayloadError(ValueError):
    """The body cannot be acted upon: `status` 400 (not JSON) or 422 (JSON, but not a delivery the hub knows);
    `fields` holds what could be read of it, for the record."""

    def __init__(self, status: int, code: str, message: str, fields: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.fields = status, code, message, fields or {}


@dataclass(frozen=True)
class Delivery:
    """One delivery as the hub reads it. `job` is INDEX or MOVE, or empty when it is ignored (`ignored` says why).

    `fingerprint` covers what the delivery asks for and nothing else (not the webhook that sent it), so a replay
    or a duplicate has the same one.
    """

    action: str
    scope: str
    repo_type: str
    repo_name: str
    head_sha: str = ""
    moved_to: str = ""
    webhook_id: str = ""
    job: str = ""
    ignored: str = ""
    fingerprint: str = ""
    refs: tuple[tuple[str, str, str], ...] = field(default=(), repr=False)

    @property
    def previous_sha(self) -> str:
        """The sha `main` pointed at before this push ("" when the delivery does not say)."""
        for ref, old, _new in self.refs:
            if ref == "refs/heads/main":
                return old
        return ""

    def record_fields(self) -> dict:
        """The columns of its WebhookDelivery row."""
        return {"action": self.action, "scope": self.scope, "repo_type": self.repo_type, "repo_name": self.repo_name,
                "head_sha": self.head_sha, "previous_sha": self.previous_sha, "moved_to": self.moved_to,
                "webhook_id": self.webhook_id, "fingerprint": self.fingerprint}


def text(value: Any, cap: int) -> str:
    """A string from the body made storable: NUL removed (PostgreSQL text cannot hold it), cut to `cap`."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return ""
    return str(value).replace("\x00", "")[:cap]


def _object(value: Any, what: str, fields: dict) -> dict:
    if not isinstance(value, dict):
        raise PayloadError(422, "invalid", f"{what} must be a JSON object.", fields)
    return value


def _string(container: dict, key: str, what: str, fields: dict, *, cap: int) -> str:
    value = container.get(key)
    if not isinstance(value, str) or not value.strip():
        raise PayloadError(422, "invalid", f"{what} must be a non-empty string.", fields)
    if len(value) > cap:
        raise PayloadError(422, "invalid", f"{what} is longer than {cap} characters.", fields)
    return value  # as sent: an id with a NUL in it is no id (text() makes it storable for the record)


def _sha(value: Any, what: str, fields: dict) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not _SHA.fullmatch(value.lower()):
        raise PayloadError(422, "invalid", f"{what} must be a commit sha (40 or 64 hex digits).", fields)
    return value.lower()


def _refs(value: Any, fields: dict) -> tuple[tuple[str, str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PayloadError(422, "invalid", "updatedRefs must be a list of {ref, oldSha, newSha} objects.", fields)
    refs = []
    for item in value[:MAX_REFS]:
        if not isinstance(item, dict) or not isinstance(item.get("ref"), str):
            raise PayloadError(422, "invalid", "updatedRefs must be a list of {ref, oldSha, newSha} objects.", fields)
        refs.append((text(item["ref"], 200), _sha(item.get("oldSha"), "updatedRefs[].oldSha", fields),
                     _sha(item.get("newSha"), "updatedRefs[].newSha", fields)))
    return tuple(refs)


def _moved_to(payload: dict, repo_name: str, fields: dict) -> str:
    """The id the Space moved to. `movedTo.name` is the new full id; a bare name keeps the old owner."""
    moved = _object(payload.get("movedTo"), "movedTo (required for a move)", fields)
    name = _string(moved, "name", "movedTo.name", fields, cap=200)
    if "/" not in name and _NAME.fullmatch(name):
        name = f"{repo_name.split('/', 1)[0]}/{name}"
    if not _REPO_ID.fullmatch(name):
        raise PayloadError(422, "invalid", f"movedTo.name {name[:200]!r} is not a Space id (owner/name).", fields)
    return name


def _scope_job(action: str, scope: str) -> tuple[str, str]:
    """(job, why it is ignored): what a Space's event of this action and scope asks of the hub."""
    if action not in ACTIONS:
        return "", f"Action {action[:16]!r} is not one the hub acts on ({', '.join(ACTIONS)})."
    if action == "move":
        return MOVE, ""
    # repo: created, deleted; repo.content: a push (a new head); repo.config: settings, visibility among them.
    if scope == "repo" or scope.split(".")[:2] in (["repo", "content"], ["repo", "config"]):
        return INDEX, ""
    return "", f"Scope {scope[:64]!r} does not change what the hub indexes."


def _fingerprint(payload_repo: dict, delivery: dict) -> str:
    asks = {
        "action": delivery["action"], "scope": delivery["scope"], "type": delivery["repo_type"],
        "name": delivery["repo_name"].lower(), "id": text(payload_repo.get("id"), 64),
        "private": payload_repo.get("private") if isinstance(payload_repo.get("private"), bool) else None,
        "sha": delivery["head_sha"], "moved_to": delivery["moved_to"].lower(), "refs": sorted(delivery["refs"]),
    }
    return hashlib.sha256(json.dumps(asks, sort_keys=True).encode()).hexdigest()


def parse_delivery(body: bytes) -> Delivery:
    """Read a delivery's body. Raises PayloadError: 400 for what is not JSON, 422 for JSON the hub cannot read
    as a delivery (missing or mistyped fields, a Space id or sha that cannot be one). A well-formed delivery the
    hub has no use for (another repo type, another scope) is not an error: it comes back with `ignored` set."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise PayloadError(400, "parse_error", "The body is not UTF-8 text.") from None
    except RecursionError:
        raise PayloadError(400, "parse_error", "The body is JSON nested too deeply to read.") from None
    except ValueError as exc:
        reason = str(exc).split(":")[0] if isinstance(exc, json.JSONDecodeError) else "not readable"
        raise PayloadError(400, "parse_error", f"The body is not JSON ({reason}).") from None
    fields: dict = {}
    payload = _object(payload, "The body", fields)
    event = _object(payload.get("event"), "event", fields)
    fields["action"] = text(event.get("action"), 16)
    fields["scope"] = text(event.get("scope"), 64)
    webhook = payload.get("webhook")
    fields["webhook_id"] = text(webhook.get("id"), 64) if isinstance(webhook, dict) else ""
    action = _string(event, "action", "event.action", fields, cap=64)
    scope = _string(event, "scope", "event.scope", fields, cap=200)
    repo = _object(payload.get("repo"), "repo", fields)
    fields["repo_type"] = text(repo.get("type"), 16)
    fields["repo_name"] = text(repo.get("name"), 200)
    repo_type = _string(repo, "type", "repo.type", fields, cap=64)
    repo_name = _string(repo, "name", "repo.name", fields, cap=400)
    base = {"action": text(action, 16), "scope": text(scope, 64), "repo_type": text(repo_type, 16),
            "repo_name": text(repo_name, 200), "webhook_id": fields["webhook_id"]}
    if repo_type != "space":
        return Delivery(**base, ignored=f"Only Spaces are indexed; this is a {repo_type[:16]!r} repository.")
    job, ignored = _scope_job(action, scope)
    if not job:
        return Delivery(**base, ignored=ignored)
    if not _REPO_ID.fullmatch(repo_name):
        raise PayloadError(422, "invalid", f"repo.name {repo_name[:200]!r} is not a Space id (owner/name).", fields)
    head_sha = _sha(repo.get("headSha"), "repo.headSha", fields)
    fields["head_sha"] = head_sha
    refs = _refs(payload.get("updatedRefs"), fields)
    moved_to = _moved_to(payload, repo_name, fields) if job == MOVE else ""
    asked = {**base, "head_sha": head_sha, "moved_to": moved_to}
    return Delivery(**asked, job=job, refs=refs, fingerprint=_fingerprint(repo, {**asked, "refs": refs}))
