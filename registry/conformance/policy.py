"""The hub's severity policy (`policy.json`): the only place a check id gets a level, lane and severity.

Graders emit a status; the policy decides what that status means for the
verdict. Ids and severities follow OpenEnv 0.10.0's severity-v2 policy where
the check exists there; `hub.*` ids are ours.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

POLICY_FILE = Path(__file__).with_name("policy.json")
CHECK_ID = re.compile(r"^[a-z_]+\.[a-z_]+$")
LEVELS = (1, 2, 3, 4)
LANES = ("local", "hub")
SEVERITIES = ("fail", "warn")


class PolicyError(ValueError):
    """The policy file is malformed, or a result names a check id the policy does not know."""


@dataclass(frozen=True)
class PolicyEntry:
    """One check id: its level (1 static, 2 runtime, 3 semantic, 4 statistical), lane and severity."""

    check_id: str
    level: int
    lane: str
    severity: str
    title: str
    description: str


@dataclass(frozen=True)
class Bounds:
    """Ceilings on what a manifest's validation: block may declare (OpenEnv severity-v2 bounds)."""

    max_oracle_tolerance: float
    min_floor_margin: float
    max_variance_tolerance: float
    max_episode_timeout_s: float


@dataclass(frozen=True)
class Policy:
    """A versioned policy; `entries` keeps the file's order, which is also the report's result order."""

    policy_version: str
    entries: dict[str, PolicyEntry]
    bounds: Bounds

    def entry(self, check_id: str) -> PolicyEntry:
        try:
            return self.entries[check_id]
        except KeyError:
            raise PolicyError(f"check id {check_id!r} is unknown to policy {self.policy_version!r}") from None

    def order(self, check_id: str) -> int:
        return list(self.entries).index(check_id) if check_id in self.entries else len(self.entries)


def parse_policy(data: dict) -> Policy:
    """Build a Policy from the JSON document, refusing anything ambiguous."""
    if not isinstance(data, dict) or not isinstance(data.get("policy_version"), str):
        raise PolicyError("policy must be an object with a policy_version")
    entries: dict[str, PolicyEntry] = {}
    for raw in data.get("entries") or []:
        entry = PolicyEntry(
            check_id=raw["check_id"],
            level=raw["level"],
            lane=raw["lane"],
            severity=raw["severity"],
            title=raw.get("title", raw["check_id"]),
            description=raw.get("description", ""),
        )
        if not CHECK_ID.match(entry.check_id):
            raise PolicyError(f"check id {entry.check_id!r} does not match {CHECK_ID.pattern}")
        if entry.level not in LEVELS or entry.lane not in LANES or entry.severity not in SEVERITIES:
            raise PolicyError(f"check id {entry.check_id!r} has an invalid level, lane or severity")
        if entry.check_id in entries:
            raise PolicyError(f"duplicate check id {entry.check_id!r}")
        entries[entry.check_id] = entry
    bounds = Bounds(**{k: float(v) for k, v in data["bounds"].items()})
    return Policy(policy_version=data["policy_version"], entries=entries, bounds=bounds)


POLICY_VERSION = "hub-1"  # policy.json's policy_version; a test keeps the two equal


@cache
def load_policy() -> Policy:
    """The hub policy shipped with this package (`policy_version` "hub-1")."""
    return parse_policy(json.loads(POLICY_FILE.read_text(encoding="utf-8")))
