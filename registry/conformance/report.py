"""Check results, the verdict rule, and the report in OpenEnv's report-v2 schema.

A report is public, and much of it is output of untrusted code: what a server
answered, its log lines, its /metadata. Every evidence line and every
measurement is therefore cleaned and capped here, whatever a check put in it.

`report-v2.schema.json` (copied from openenv 0.10.0) forbids extra keys at the
top level and inside each result, so the report built here carries nothing
else; the probe's own details (action source, latencies, validator version,
transport) live in the `measured` object of the check they belong to.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Iterable

from .policy import CHECK_ID, Policy, load_policy

VALIDATOR_VERSION = "openenv-hub-probe/1"
REPORT_SCHEMA_VERSION = "2"
REPORT_SCHEMA_FILE = Path(__file__).with_name("report-v2.schema.json")
SIGNATURE = "openenv.yaml"  # the package format (SignatureKind), not a cryptographic signature
LANE = "hub"

PASS, FAIL, SKIP, ERROR = "pass", "fail", "skip", "error"
STATUSES = (PASS, FAIL, SKIP, ERROR)

MAX_EVIDENCE_LINES = 20
MAX_EVIDENCE_CHARS = 300
# A check's measurements, serialized; a value that would take more than an eighth of it is cut to a summary.
MAX_MEASURED_BYTES = 8 * 1024


def clip(text: Any, limit: int = MAX_EVIDENCE_CHARS) -> str:
    """One line of evidence: no control characters, at most `limit` characters."""
    text = text if isinstance(text, str) else json.dumps(text, default=str, ensure_ascii=False)
    text = "".join(c if c.isprintable() else " " for c in text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_safe(value: Any, depth: int = 0) -> Any:
    """Plain JSON data (finite numbers, string keys), whatever a server sent us."""
    if depth > 20:
        return "…"
    if isinstance(value, dict):
        return {str(k)[:200]: json_safe(v, depth + 1) for k, v in list(value.items())[:200]}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in list(value)[:200]]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value[:2000]
    return str(value)[:2000]


# PostgreSQL's jsonb keeps an object's keys in its own order, not the server's: a schema stored there would list
# its fields out of their declared order. The order is written beside each `properties` under this key.
PROPERTY_ORDER = "x-openenv-hub-order"


def with_property_order(schema: Any, depth: int = 0) -> Any:
    """`schema` (plain JSON) with every `properties` object's key order recorded under PROPERTY_ORDER."""
    if depth > 20:
        return schema
    if isinstance(schema, list):
        return [with_property_order(v, depth + 1) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: with_property_order(v, depth + 1) for k, v in schema.items()}
    if isinstance(schema.get("properties"), dict) and PROPERTY_ORDER not in schema:
        out[PROPERTY_ORDER] = list(schema["properties"])
    return out


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def capped_measured(measured: dict[str, Any]) -> dict[str, Any]:
    """A check's measurements as plain JSON of at most MAX_MEASURED_BYTES: large values become clipped text.

    Measurements carry what the server said (its /metadata, its rewards, its tool list): public output of
    untrusted code, so they are bounded like evidence is.
    """
    safe = json_safe(measured)
    if not isinstance(safe, dict) or _size(safe) <= MAX_MEASURED_BYTES:
        return safe
    out: dict[str, Any] = {}
    for key, value in safe.items():
        if _size(value) > MAX_MEASURED_BYTES // 8:
            value = clip(value, 200) + f" (cut from {_size(value)} characters)"
        if _size(out) + _size({key: value}) > MAX_MEASURED_BYTES - 100:
            out["…"] = f"{len(safe) - len(out)} more measurement(s) cut"
            break
        out[key] = value
    return out


@dataclass
class CheckResult:
    """The outcome of one check: what was measured, the evidence, and what the author should change."""

    check_id: str
    status: str
    measured: dict[str, Any] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    remediation: str | None = None
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        if not CHECK_ID.match(self.check_id):
            raise ValueError(f"check id {self.check_id!r} does not match {CHECK_ID.pattern}")
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")

    def to_dict(self) -> dict[str, Any]:
        """The report-v2 `CheckResult` object."""
        evidence = [clip(line) for line in self.evidence[:MAX_EVIDENCE_LINES]]
        if len(self.evidence) > MAX_EVIDENCE_LINES:
            evidence.append(f"… and {len(self.evidence) - MAX_EVIDENCE_LINES} more")
        return {
            "check_id": self.check_id,
            "status": self.status,
            "measured": capped_measured(self.measured),
            "evidence": evidence,
            "remediation": clip(self.remediation, 600) if self.remediation else None,
            "duration_s": round(max(0.0, float(self.duration_s)), 4),
        }


def verdict(results: Iterable[CheckResult], policy: Policy | None = None) -> str:
    """PROTOCOL §1.5: any error → fail; a fail on a fail-severity check → fail;
    any skip or a fail on a warn-severity check → warn; else pass.

    A result whose check id the policy does not know is a PolicyError (an
    internal error, as in OpenEnv's apply_policy), never silently ignored.
    """
    policy = policy or load_policy()
    results = list(results)
    severities = [policy.entry(r.check_id).severity for r in results]
    if any(r.status == ERROR for r in results):
        return "fail"
    if any(r.status == FAIL and sev == "fail" for r, sev in zip(results, severities)):
        return "fail"
    if any(r.status == SKIP or (r.status == FAIL and sev != "fail") for r, sev in zip(results, severities)):
        return "warn"
    return "pass"


def levels_run(results: Iterable[CheckResult], policy: Policy | None = None) -> list[int]:
    """Levels at which at least one check really ran (passed or failed)."""
    policy = policy or load_policy()
    return sorted({policy.entry(r.check_id).level for r in results if r.status in (PASS, FAIL)})


def build_report(
    *,
    results: Iterable[CheckResult],
    target: str,
    source_digest: str,
    manifest: dict | None,
    policy: Policy | None = None,
) -> dict[str, Any]:
    """A report valid against OpenEnv's report-v2 schema, results in policy order.

    `manifest` is the normalized manifest (see `static.normalize_manifest`),
    or None when the package declares no validation: block or it is invalid.
    """
    policy = policy or load_policy()
    results = sorted(results, key=lambda r: policy.order(r.check_id))
    seen: set[str] = set()
    for result in results:
        policy.entry(result.check_id)
        if result.check_id in seen:
            raise ValueError(f"check id {result.check_id!r} appears twice")
        seen.add(result.check_id)
    return {
        "report_schema_version": REPORT_SCHEMA_VERSION,
        "target": target,
        "source_digest": source_digest,
        "signature": SIGNATURE,
        "manifest": manifest,
        "policy_version": policy.policy_version,
        "lane": LANE,
        "levels_run": levels_run(results, policy),
        "results": [r.to_dict() for r in results],
        "verdict": verdict(results, policy),
    }


@cache
def report_schema() -> dict[str, Any]:
    """OpenEnv 0.10.0's report-v2 JSON Schema (a copy shipped with this package)."""
    return json.loads(REPORT_SCHEMA_FILE.read_text(encoding="utf-8"))


def report_problems(report: dict) -> list[str]:
    """Why a report is not valid against report-v2 (empty when it is)."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(report_schema())
    return [
        f"{'/'.join(str(p) for p in error.absolute_path) or '/'}: {error.message}"
        for error in validator.iter_errors(report)
    ]
