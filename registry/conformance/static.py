"""Level 1: checks over what the index already read (manifest, file listing, pyproject requirement, runtime plan). No I/O.

An absent `validation:` block is "not declared": `static.manifest` then passes
on the manifest alone, with `measured.validation_declared = false`. It is not
reported as `skip`, because the verdict rule turns any skip into `warn`, and
the block is optional (none of OpenEnv's own 34 environments declares one).
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import PurePosixPath
from typing import Any

from registry.manifest import DEFAULT_APP, MANIFEST_FILE, PYPROJECT_FILE, README_FILE

from .policy import Bounds, Policy, load_policy
from .report import FAIL, PASS, SKIP, CheckResult, report_schema

RUNTIME_PLAN_FILE = "validation/runtime.json"
DEFAULT_REWARD_RANGE = (0.0, 1.0)

# The runtime plan contract (openenv 0.10.0 validation/runtime/contracts.py).
MAX_PLAN_BYTES = 65_536
MAX_PLAN_ACTIONS = 100
MAX_PLAN_JSON_DEPTH = 32
MAX_PLAN_JSON_NODES = 10_000
MAX_EPISODE_ID = 128
MAX_SEED = 2**32 - 1

STATIC_CHECK_IDS = ("static.manifest", "static.layout", "hub.openenv_dependency", "hub.runtime_plan")

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


# --------------------------------------------------------------------------- #
# The validation: block
# --------------------------------------------------------------------------- #


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validation_block(manifest: dict | None) -> Any:
    """The manifest's `validation:` value (None when not declared)."""
    return manifest.get("validation") if isinstance(manifest, dict) else None


def declared_reward_range(manifest: dict | None) -> tuple[float, float] | None:
    """validation.reward.range when it is declared and a valid [lo, hi]."""
    block = validation_block(manifest)
    reward = block.get("reward") if isinstance(block, dict) else None
    declared = reward.get("range") if isinstance(reward, dict) else None
    if declared is not None and _range_problem(declared) is None:
        return float(declared[0]), float(declared[1])
    return None


def reward_range(manifest: dict | None) -> tuple[float, float]:
    """The range rewards must stay in: the declared one when valid, else the default [0, 1]."""
    return declared_reward_range(manifest) or DEFAULT_REWARD_RANGE


def _range_problem(value: Any) -> str | None:
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(is_number(v) for v in value)):
        return f"validation.reward.range must be two numbers [lo, hi], got {json.dumps(value)[:80]}"
    lo, hi = value
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"validation.reward.range must be finite, got {value}"
    if not lo < hi:
        return f"validation.reward.range must be strictly increasing, got {value}"
    return None


def _portable_path_problem(name: str, value: Any, *, must_be_file: bool) -> str | None:
    if not isinstance(value, str):
        return None  # the schema reports the type
    path = PurePosixPath(value)
    if not value or "\\" in value or ":" in value or "\x00" in value or path.is_absolute() or ".." in path.parts:
        return f"validation.execution.{name}: must be a portable package-relative path without '..', got {value!r}"
    if must_be_file and path == PurePosixPath("."):
        return f"validation.execution.{name}: must name a file"
    return None


def normalize_manifest(manifest: dict | None) -> tuple[dict | None, list[str]]:
    """The manifest as OpenEnv's openenv.yaml parser normalizes it, and why it does not normalize.

    Returns (None, []) when no validation: block is declared. With a block,
    returns (normalized, []) when it is what `openenv validate` accepts
    (manifest schema 1, or 2 when `execution` is declared), else (None,
    problems). Policy bounds are not checked here (see `bounds_problems`).
    """
    block = validation_block(manifest)
    if block is None:
        return None, []
    if not isinstance(block, dict):
        return None, ["validation: must be a mapping"]
    has_execution = "execution" in block
    data: dict[str, Any] = {
        "manifest_schema_version": "2" if has_execution else "1",
        "signature": "openenv.yaml",
        "version": None if manifest.get("version") is None else str(manifest.get("version")),
    }
    if manifest.get("name") is not None:
        data["name"] = manifest.get("name")
    for key in ("reward", "resources", "capabilities", "types", "network", "judge", "task_distribution"):
        if block.get(key) is not None:
            data[key] = block[key]
    if has_execution:
        data["execution"] = block["execution"]
    # Fill the defaults OpenEnv's models apply, so the report shows what was assumed.
    if isinstance(data.get("reward"), dict):
        data["reward"] = {"range": list(DEFAULT_REWARD_RANGE), "oracle_tolerance": 0.0, **data["reward"]}
    data.setdefault("network", {"mode": "public", "allowed_hosts": []})
    if isinstance(data.get("execution"), dict):
        data["execution"] = {
            "kind": "openenv_ws", "probe_path": RUNTIME_PLAN_FILE, "dockerfile": "Dockerfile",
            "context": ".", "agent_boundary": "api", "requires_credentials": False, **data["execution"],
        }

    from jsonschema import Draft202012Validator

    definition = "NormalizedManifestV2" if has_execution else "NormalizedManifest"
    schema = {"$defs": report_schema()["$defs"], "$ref": f"#/$defs/{definition}"}
    problems = []
    for error in sorted(Draft202012Validator(schema).iter_errors(data), key=lambda e: list(e.absolute_path)):
        path = [str(p) for p in error.absolute_path]
        where = "name" if path[:1] == ["name"] else ".".join(["validation", *path]) if path else "validation"
        problems.append(f"{where}: {error.message[:200]}")
    problems += _cross_field_problems(data, has_execution)
    return (None, problems) if problems else (data, [])


def _cross_field_problems(data: dict, has_execution: bool) -> list[str]:
    """The model validators of openenv.validation.manifest that a JSON Schema cannot express."""
    problems = []
    reward = data.get("reward") if isinstance(data.get("reward"), dict) else {}
    problem = _range_problem(reward.get("range"))
    if problem:
        problems.append(problem)
    capabilities = data.get("capabilities") if isinstance(data.get("capabilities"), dict) else {}
    verifier = capabilities.get("verifier") if isinstance(capabilities.get("verifier"), dict) else {}
    if verifier.get("kind") == "script" and verifier.get("entry") is None:
        problems.append("validation.capabilities.verifier.entry is required when kind is 'script'")
    if verifier.get("kind") == "reward_channel" and verifier.get("entry") is not None:
        problems.append("validation.capabilities.verifier.entry is only valid when kind is 'script'")
    oracle = capabilities.get("oracle") if isinstance(capabilities.get("oracle"), dict) else {}
    if oracle.get("form") == "injected_state" and not capabilities.get("set_state"):
        problems.append("validation.capabilities.oracle.form 'injected_state' requires set_state: true")
    if capabilities.get("llm_judged"):
        if data.get("judge") is None:
            problems.append("validation.judge is required when capabilities.llm_judged is true")
        if reward.get("variance_tolerance") is None:
            problems.append("validation.reward.variance_tolerance is required when capabilities.llm_judged is true")
    elif data.get("judge") is not None:
        problems.append("validation.judge is declared but capabilities.llm_judged is false")
    resources = data.get("resources") if isinstance(data.get("resources"), dict) else {}
    if resources.get("gpu_types") and not resources.get("gpus"):
        problems.append("validation.resources.gpu_types is declared but gpus is 0")
    network = data.get("network") if isinstance(data.get("network"), dict) else {}
    if network.get("mode") != "allowlist" and network.get("allowed_hosts"):
        problems.append("validation.network.allowed_hosts is only valid when mode is 'allowlist'")
    if network.get("mode") == "allowlist" and not network.get("allowed_hosts"):
        problems.append("validation.network mode 'allowlist' requires at least one allowed host")
    execution = data.get("execution") if isinstance(data.get("execution"), dict) else {}
    for name, must_be_file in (("probe_path", True), ("dockerfile", True), ("context", False)):
        problem = _portable_path_problem(name, execution.get(name), must_be_file=must_be_file)
        if problem:
            problems.append(problem)
    if has_execution and _has_non_finite(data):
        problems.append("validation: schema 2 numeric declarations must be finite")
    return problems


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def bounds_problems(block: Any, bounds: Bounds) -> tuple[list[str], dict[str, Any]]:
    """Declared tolerances and timeouts outside the policy bounds, and the values read."""
    block = block if isinstance(block, dict) else {}
    reward = block.get("reward") if isinstance(block.get("reward"), dict) else {}
    resources = block.get("resources") if isinstance(block.get("resources"), dict) else {}
    declared = {
        "reward_range": reward.get("range"),
        "oracle_tolerance": reward.get("oracle_tolerance", 0.0),
        "floor_margin": reward.get("floor_margin"),
        "variance_tolerance": reward.get("variance_tolerance"),
        "episode_timeout_s": resources.get("episode_timeout_s"),
    }
    problems = []
    problem = _range_problem(declared["reward_range"])
    if problem:
        problems.append(problem)
    checks = (
        ("oracle_tolerance", "reward.oracle_tolerance", lambda v: v <= bounds.max_oracle_tolerance,
         f"exceeds the policy maximum {bounds.max_oracle_tolerance}"),
        ("floor_margin", "reward.floor_margin", lambda v: v >= bounds.min_floor_margin,
         f"is below the policy minimum {bounds.min_floor_margin}"),
        ("variance_tolerance", "reward.variance_tolerance", lambda v: v <= bounds.max_variance_tolerance,
         f"exceeds the policy maximum {bounds.max_variance_tolerance}"),
        ("episode_timeout_s", "resources.episode_timeout_s", lambda v: v <= bounds.max_episode_timeout_s,
         f"exceeds the policy maximum {bounds.max_episode_timeout_s}"),
    )
    for key, where, ok, why in checks:
        value = declared[key]
        if value is None:
            continue
        if not is_number(value) or not math.isfinite(value):
            problems.append(f"validation.{where} must be a finite number, got {json.dumps(value, default=str)[:60]}")
        elif not ok(value):
            problems.append(f"validation.{where} {value} {why}")
    return problems, declared


# --------------------------------------------------------------------------- #
# validation/runtime.json
# --------------------------------------------------------------------------- #


def runtime_plan_path(manifest: dict | None) -> str:
    """Where the package's runtime plan lives: validation.execution.probe_path, else validation/runtime.json."""
    block = validation_block(manifest)
    execution = block.get("execution") if isinstance(block, dict) else None
    path = execution.get("probe_path") if isinstance(execution, dict) else None
    if isinstance(path, str) and _portable_path_problem("probe_path", path, must_be_file=True) is None:
        return str(PurePosixPath(path))
    return RUNTIME_PLAN_FILE


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_json(value: Any, depth: int, budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_PLAN_JSON_DEPTH:
        raise ValueError(f"more than {MAX_PLAN_JSON_NODES} values or deeper than {MAX_PLAN_JSON_DEPTH} levels")
    if isinstance(value, dict):
        for child in value.values():
            _check_json(child, depth + 1, budget)
    elif isinstance(value, list):
        for child in value:
            _check_json(child, depth + 1, budget)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError("numbers must be finite")


def parse_runtime_plan(raw: bytes) -> tuple[dict | None, str | None]:
    """Read validation/runtime.json as OpenEnv's RuntimePlan does: (plan, None) or (None, problem).

    The plan returned is {"plan_schema_version": "1", "reset": {"episode_id",
    "seed", "options"}, "actions": [...]}, with `options` defaulted to {}.
    """
    if not isinstance(raw, (bytes, bytearray)):
        return None, "the runtime plan must be bytes"
    if len(raw) > MAX_PLAN_BYTES:
        return None, f"validation/runtime.json is {len(raw):,} bytes; a runtime plan is at most {MAX_PLAN_BYTES:,} bytes"
    try:
        text = bytes(raw).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, f"validation/runtime.json is not valid UTF-8 (byte {exc.start})"
    try:
        data = json.loads(text, object_pairs_hook=_unique_object, parse_constant=_reject_constant)
        _check_json(data, 0, [MAX_PLAN_JSON_NODES])
    except json.JSONDecodeError as exc:
        return None, f"validation/runtime.json is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    except (ValueError, RecursionError) as exc:
        return None, f"validation/runtime.json is not usable JSON data: {exc}"
    if not isinstance(data, dict):
        return None, "validation/runtime.json must be a JSON object"
    unknown = sorted(set(data) - {"plan_schema_version", "reset", "actions"})
    if unknown:
        return None, f"validation/runtime.json has unknown keys {unknown}"
    if data.get("plan_schema_version") != "1":
        return None, f"plan_schema_version must be the string \"1\", got {json.dumps(data.get('plan_schema_version'))[:40]}"
    reset = data.get("reset")
    if not isinstance(reset, dict):
        return None, "reset must be an object with episode_id and seed"
    unknown = sorted(set(reset) - {"episode_id", "seed", "options"})
    if unknown:
        return None, f"reset has unknown keys {unknown}"
    episode_id, seed, options = reset.get("episode_id"), reset.get("seed"), reset.get("options", {})
    if not isinstance(episode_id, str) or not 1 <= len(episode_id) <= MAX_EPISODE_ID:
        return None, f"reset.episode_id must be a string of 1 to {MAX_EPISODE_ID} characters"
    if type(seed) is not int or not 0 <= seed <= MAX_SEED:
        return None, f"reset.seed must be an integer between 0 and {MAX_SEED}"
    if not isinstance(options, dict):
        return None, "reset.options must be an object"
    if {"episode_id", "seed"} & set(options):
        return None, "reset.options cannot override episode_id or seed"
    actions = data.get("actions")
    if not isinstance(actions, list) or not 1 <= len(actions) <= MAX_PLAN_ACTIONS:
        return None, f"actions must be a list of 1 to {MAX_PLAN_ACTIONS} objects"
    for index, action in enumerate(actions):
        if not isinstance(action, dict):
            return None, f"actions[{index}] must be an object"
    plan = {
        "plan_schema_version": "1",
        "reset": {"episode_id": episode_id, "seed": seed, "options": options},
        "actions": actions,
    }
    return plan, None


# --------------------------------------------------------------------------- #
# The checks
# --------------------------------------------------------------------------- #


def _timed(fn) -> CheckResult:
    started = time.monotonic()
    result = fn()
    result.duration_s = time.monotonic() - started
    return result


def check_manifest(manifest: dict | None, manifest_problems: list[str], policy: Policy) -> CheckResult:
    """static.manifest: parses, has a name, and a declared validation: block normalizes within bounds."""
    cid = "static.manifest"
    if not isinstance(manifest, dict):
        return CheckResult(
            cid, FAIL, {"manifest": False},
            list(manifest_problems) or ["openenv.yaml is missing or is not a YAML mapping"],
            "Add an openenv.yaml mapping with at least a `name` (what `openenv init` scaffolds).",
        )
    problems = list(manifest_problems)
    name = manifest.get("name")
    if not isinstance(name, str) or not name.strip():
        if not any("name" in p for p in problems):
            problems.append("openenv.yaml has no `name`; every OpenEnv tool requires one")
    block = validation_block(manifest)
    measured: dict[str, Any] = {"name": name if isinstance(name, str) else None, "validation_declared": block is not None}
    if block is None:
        evidence = problems or [f"openenv.yaml parses; name {name!r}; no validation: block declared (nothing to bound)"]
        return CheckResult(
            cid, FAIL if problems else PASS, measured, evidence,
            "Fix openenv.yaml as described." if problems else None,
        )
    normalized, schema_problems = normalize_manifest(manifest)
    out_of_bounds, declared = bounds_problems(block, policy.bounds)
    measured.update(
        manifest_schema_version=(normalized or {}).get("manifest_schema_version"),
        declared=declared,
        bounds=vars(policy.bounds),
    )
    problems += schema_problems + [p for p in out_of_bounds if p not in schema_problems]
    if problems:
        return CheckResult(
            cid, FAIL, measured, problems,
            "Fix the validation: block of openenv.yaml so that `openenv validate` accepts it: reward (range, "
            "oracle_tolerance ≤ 0.1, floor_margin ≥ 0.1), resources (cpu, memory_mb, disk_mb, episode_timeout_s ≤ 3600), "
            "capabilities.verifier and types.tags.",
        )
    return CheckResult(
        cid, PASS, measured,
        [f"openenv.yaml parses; name {name!r}; validation: block (manifest schema "
         f"{normalized['manifest_schema_version']}) is within the policy bounds"],
    )


def check_layout(manifest: dict | None, files: list[dict]) -> CheckResult:
    """static.layout: the files an OpenEnv package needs, as far as the listing shows them."""
    cid = "static.layout"
    paths = {str(f.get("path")).strip("/") for f in files or [] if isinstance(f, dict) and isinstance(f.get("path"), str)}
    if not paths:
        return CheckResult(cid, SKIP, {"listed_files": 0}, ["no file listing was given; the layout was not checked"])
    nested = any("/" in p for p in paths)
    app = manifest.get("app") if isinstance(manifest, dict) and manifest.get("app") is not None else DEFAULT_APP
    problems: list[str] = []
    module = str(app).split(":", 1)[0].strip()
    if not isinstance(app, str) or not _MODULE.match(module):
        problems.append(f"openenv.yaml app: {app!r} is not a module:attribute reference like {DEFAULT_APP!r}")
        module = DEFAULT_APP.split(":")[0]
    module_path = module.replace(".", "/")
    required = (
        (MANIFEST_FILE,),
        (README_FILE,),
        (PYPROJECT_FILE,),
        (f"{module_path}.py", f"{module_path}/__init__.py"),
        ("Dockerfile", "server/Dockerfile"),
    )
    unverified = []
    for alternatives in required:
        if any(a in paths for a in alternatives):
            continue
        if not nested and any("/" in a for a in alternatives):
            unverified.append(" or ".join(alternatives))
        else:
            problems.append(f"missing {' or '.join(alternatives)}")
    measured = {"listed_files": len(paths), "listing": "full" if nested else "root only", "app": app}
    evidence = problems[:] or ["openenv.yaml, README.md, pyproject.toml, the app module and a Dockerfile are present"]
    if unverified:
        measured["unverified"] = unverified
        evidence.append(f"not verifiable from a root-only listing: {', '.join(unverified)}")
    return CheckResult(
        cid, FAIL if problems else PASS, measured, evidence,
        "Keep the layout `openenv init` scaffolds: openenv.yaml, README.md and pyproject.toml at the root, the app "
        "module openenv.yaml's app: names (server/app.py), and a Dockerfile at the root or in server/."
        if problems else None,
    )


def check_openenv_dependency(openenv_requirement: str, files: list[dict]) -> CheckResult:
    """hub.openenv_dependency: pyproject.toml requires openenv or openenv-core."""
    cid = "hub.openenv_dependency"
    requirement = (openenv_requirement or "").strip()
    if requirement:
        return CheckResult(cid, PASS, {"requirement": requirement}, [f"pyproject.toml requires {requirement!r}"])
    listed = {str(f.get("path")) for f in files or [] if isinstance(f, dict)}
    why = (
        "there is no pyproject.toml" if listed and PYPROJECT_FILE not in listed
        else "pyproject.toml [project].dependencies names neither openenv nor openenv-core"
    )
    return CheckResult(
        cid, FAIL, {"requirement": None}, [why],
        'Add "openenv>=0.10" (or "openenv-core") to [project].dependencies in pyproject.toml.',
    )


def check_runtime_plan(manifest: dict | None, runtime_plan: bytes | None) -> CheckResult:
    """hub.runtime_plan: validation/runtime.json is a valid plan when present (required with validation.execution)."""
    cid = "hub.runtime_plan"
    block = validation_block(manifest)
    declared = isinstance(block, dict) and isinstance(block.get("execution"), dict)
    path = runtime_plan_path(manifest)
    if runtime_plan is None:
        if declared:
            return CheckResult(
                cid, FAIL, {"present": False, "path": path},
                [f"validation.execution is declared but {path} is missing"],
                f"Add {path} (plan_schema_version \"1\", reset {{episode_id, seed}}, 1–100 actions) or drop "
                "validation.execution from openenv.yaml.",
            )
        return CheckResult(
            cid, PASS, {"present": False, "path": path},
            [f"no {path}: the probe synthesizes actions from /schema"],
        )
    plan, problem = parse_runtime_plan(runtime_plan)
    if problem:
        return CheckResult(
            cid, FAIL, {"present": True, "path": path, "bytes": len(runtime_plan)}, [problem],
            f"Fix {path}: {{\"plan_schema_version\": \"1\", \"reset\": {{\"episode_id\": str, \"seed\": int, "
            "\"options\": {}}, \"actions\": [1–100 action objects]}, at most 64 KiB.",
        )
    return CheckResult(
        cid, PASS,
        {"present": True, "path": path, "bytes": len(runtime_plan), "actions": len(plan["actions"]),
         "episode_id": plan["reset"]["episode_id"], "seed": plan["reset"]["seed"]},
        [f"{path}: {len(plan['actions'])} action(s), reset episode_id {plan['reset']['episode_id']!r} "
         f"seed {plan['reset']['seed']}"],
    )


def static_checks(
    *,
    manifest: dict | None,
    manifest_problems: list[str],
    files: list[dict],
    openenv_requirement: str,
    runtime_plan: bytes | None,
    policy: Policy | None = None,
) -> list[CheckResult]:
    """The level-1 checks, in policy order, from data the index already holds."""
    policy = policy or load_policy()
    return [
        _timed(lambda: check_manifest(manifest, list(manifest_problems or []), policy)),
        _timed(lambda: check_layout(manifest, files)),
        _timed(lambda: check_openenv_dependency(openenv_requirement, files)),
        _timed(lambda: check_runtime_plan(manifest, runtime_plan)),
    ]
