"""The conformance probe's pure parts: policy, verdict, report schema, static checks, plans, actions, the client's rules.

No database, no OpenEnv install. The few tests that need a socket use a
tiny stdlib HTTP server on loopback to show what the client refuses.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from registry import conformance as cf
from registry import manifest as mf
from registry.conformance import probe, schema, static
from registry.conformance.http import BodyTooLarge, HostNotAllowed, ProbeClient, RequestTimeout, check_url
from registry.conformance.report import CheckResult
from registry.evaluation import baseline

CORPUS = Path(__file__).resolve().parents[1] / "data" / "openenv-envs"
CORPUS_NAMES = sorted(p.name for p in CORPUS.iterdir() if p.is_dir())

VALID_BLOCK = {
    "reward": {"range": [0.0, 1.0], "oracle_tolerance": 0.0, "floor_margin": 1.0},
    "resources": {"cpu": 1.0, "memory_mb": 512, "disk_mb": 256, "episode_timeout_s": 60.0},
    "capabilities": {"verifier": {"kind": "reward_channel"}},
    "types": {"tags": ["demo"]},
}


def result(check_id, status):
    return CheckResult(check_id, status, {}, ["x"])


def valid(schema_, instance) -> bool:
    return not list(Draft202012Validator(schema_).iter_errors(instance))


# --------------------------------------------------------------------------- #
# Policy
# --------------------------------------------------------------------------- #

# What openenv 0.10.0's severity-v2.json says for the ids we reuse (level, lane, severity).
OPENENV_V2 = {
    "static.manifest": (1, "local", "fail"),
    "static.layout": (1, "local", "warn"),
    "runtime.startup": (2, "local", "fail"),
    "runtime.observation_schema": (2, "local", "fail"),
    "runtime.reward_well_formed": (2, "local", "fail"),
    "runtime.state_contract": (2, "local", "fail"),
    "runtime.tool_declaration_accuracy": (2, "local", "fail"),
    "hub.time_to_first_work": (2, "hub", "warn"),
    "hub.immutable_versioning": (1, "hub", "fail"),
}


def test_policy_covers_exactly_the_checks_the_hub_emits():
    policy = cf.load_policy()
    assert policy.policy_version == cf.POLICY_VERSION == "hub-1"
    assert list(policy.entries) == [*static.STATIC_CHECK_IDS, *[c for c in policy.entries if c not in static.STATIC_CHECK_IDS]]
    assert set(policy.entries) == (
        set(static.STATIC_CHECK_IDS) | set(probe.RUNTIME_CHECK_IDS) | set(probe.RUNNER_CHECK_IDS)
        | set(baseline.SEMANTIC_CHECK_IDS))
    for entry in policy.entries.values():
        assert cf.policy.CHECK_ID.match(entry.check_id)
        assert entry.title and entry.description
        if entry.check_id.startswith("hub."):
            assert entry.lane == "hub"


def test_the_semantic_checks_are_hub_lane_warnings_at_level_3():
    policy = cf.load_policy()
    assert [c for c in policy.entries if policy.entry(c).level == 3] == list(baseline.SEMANTIC_CHECK_IDS)
    for check_id in baseline.SEMANTIC_CHECK_IDS:
        entry = policy.entry(check_id)
        assert (entry.level, entry.lane, entry.severity) == (3, "hub", "warn")
    # A failing semantic check warns; it never fails a verdict.
    assert cf.verdict([result("hub.determinism", "fail"), result("runtime.startup", "pass")]) == "warn"
    assert cf.verdict([result(c, "pass") for c in baseline.SEMANTIC_CHECK_IDS]) == "pass"


def test_policy_reuses_openenv_ids_and_severities():
    policy = cf.load_policy()
    for check_id, (level, lane, severity) in OPENENV_V2.items():
        entry = policy.entry(check_id)
        assert (entry.level, entry.lane, entry.severity) == (level, lane, severity), check_id
    assert vars(policy.bounds) == {
        "max_oracle_tolerance": 0.1, "min_floor_margin": 0.1,
        "max_variance_tolerance": 0.2, "max_episode_timeout_s": 3600.0,
    }


def test_policy_rejects_bad_documents():
    good = {"policy_version": "x", "bounds": {"max_oracle_tolerance": 0.1, "min_floor_margin": 0.1,
                                              "max_variance_tolerance": 0.2, "max_episode_timeout_s": 1.0}}
    entry = {"check_id": "hub.a", "level": 2, "lane": "hub", "severity": "fail"}
    assert cf.policy.parse_policy({**good, "entries": [entry]}).entry("hub.a").severity == "fail"
    for bad in ({**entry, "check_id": "Hub.A"}, {**entry, "level": 5}, {**entry, "severity": "advisory"}):
        with pytest.raises(cf.PolicyError):
            cf.policy.parse_policy({**good, "entries": [bad]})
    with pytest.raises(cf.PolicyError):
        cf.policy.parse_policy({**good, "entries": [entry, entry]})


# --------------------------------------------------------------------------- #
# Verdict and report
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "statuses, expected",
    [
        ({}, "pass"),
        ({"static.manifest": "pass", "runtime.startup": "pass"}, "pass"),
        ({"runtime.startup": "error"}, "fail"),
        ({"static.layout": "error"}, "fail"),  # error fails closed whatever the severity
        ({"runtime.state_contract": "fail"}, "fail"),  # fail-severity
        ({"static.layout": "fail"}, "warn"),  # warn-severity
        ({"hub.time_to_first_work": "fail", "static.manifest": "pass"}, "warn"),
        ({"hub.ws_episode": "skip"}, "warn"),  # any skip
        ({"hub.ws_episode": "skip", "runtime.startup": "fail"}, "fail"),
        ({"static.layout": "fail", "hub.ws_episode": "skip", "static.manifest": "pass"}, "warn"),
    ],
)
def test_verdict_rule(statuses, expected):
    assert cf.verdict([result(c, s) for c, s in statuses.items()]) == expected


def test_verdict_refuses_unknown_check_ids():
    with pytest.raises(cf.PolicyError):
        cf.verdict([result("hub.not_in_policy", "pass")])


def test_check_result_validates_its_fields():
    with pytest.raises(ValueError):
        CheckResult("no-dots", "pass")
    with pytest.raises(ValueError):
        CheckResult("hub.ws_episode", "passed")


def test_report_is_valid_report_v2_in_policy_order():
    results = [
        CheckResult("hub.ws_episode", "fail", {"latency": float("inf"), 3: "x"}, ["line\x00two " + "y" * 900] * 30),
        CheckResult("static.manifest", "pass", duration_s=-1.0),
        CheckResult("hub.time_to_first_work", "skip", {}, ["unmet dependency"]),
    ]
    report = cf.build_report(results=results, target="openenv/echo_env@" + "a" * 40, source_digest="a" * 40,
                             manifest=None)
    assert cf.report_problems(report) == []
    assert report["report_schema_version"] == "2" and report["lane"] == "hub" and report["policy_version"] == "hub-1"
    assert report["signature"] == "openenv.yaml"
    assert [r["check_id"] for r in report["results"]] == ["static.manifest", "hub.ws_episode", "hub.time_to_first_work"]
    assert report["levels_run"] == [1, 2]
    assert report["verdict"] == "fail"
    ws = report["results"][1]
    assert ws["measured"] == {"latency": "inf", "3": "x"}  # plain JSON for storage
    assert len(ws["evidence"]) == 21 and all(len(line) <= 300 and "\x00" not in line for line in ws["evidence"])
    assert report["results"][0]["duration_s"] == 0.0
    json.dumps(report, allow_nan=False)


def test_report_refuses_duplicates_and_unknown_ids():
    with pytest.raises(ValueError):
        cf.build_report(results=[result("static.manifest", "pass")] * 2, target="t", source_digest="", manifest=None)
    with pytest.raises(cf.PolicyError):
        cf.build_report(results=[result("hub.unknown_check", "pass")], target="t", source_digest="", manifest=None)


def test_report_schema_is_openenvs_report_v2():
    s = cf.report_schema()
    assert "openenv 0.10.0" in s["$comment"]
    assert s["properties"]["report_schema_version"]["const"] == "2"
    assert s["additionalProperties"] is False
    assert s["$defs"]["CheckResult"]["properties"]["check_id"]["pattern"] == r"^[a-z_]+\.[a-z_]+$"


# --------------------------------------------------------------------------- #
# Static checks
# --------------------------------------------------------------------------- #


def corpus_inputs(name):
    folder = CORPUS / name
    _, manifest, problems = mf.parse_manifest((folder / "openenv.yaml").read_bytes())
    _, requirement, _ = mf.parse_pyproject((folder / "pyproject.toml").read_bytes())
    files = [{"path": p.name, "size": p.stat().st_size} for p in sorted(folder.iterdir())]
    return manifest, [p.message for p in problems], files, requirement


@pytest.mark.parametrize("name", CORPUS_NAMES)
def test_static_checks_on_the_real_manifests(name):
    manifest, problems, files, requirement = corpus_inputs(name)
    results = {r.check_id: r for r in cf.static_checks(
        manifest=manifest, manifest_problems=problems, files=files, openenv_requirement=requirement, runtime_plan=None,
    )}
    assert list(results) == list(static.STATIC_CHECK_IDS)
    assert results["static.manifest"].status == "pass", results["static.manifest"].evidence
    assert results["static.manifest"].measured["validation_declared"] is False
    assert "no validation: block declared" in results["static.manifest"].evidence[0]
    # A root listing cannot show server/app.py; not seeing it is not a failure.
    assert results["static.layout"].status == "pass", results["static.layout"].evidence
    assert results["static.layout"].measured["listing"] == "root only"
    assert results["hub.runtime_plan"].status == "pass"
    expected = "pass" if requirement else "fail"  # openapp_env installs openenv from its Dockerfile only
    assert results["hub.openenv_dependency"].status == expected
    report = cf.build_report(results=results.values(), target=name, source_digest="", manifest=None)
    assert cf.report_problems(report) == []
    assert report["verdict"] == ("pass" if requirement else "warn")  # an undeclared block never warns


def test_the_corpus_has_the_expected_shape():
    assert len(CORPUS_NAMES) == 34
    assert [n for n in CORPUS_NAMES if not corpus_inputs(n)[3]] == ["openapp_env"]


def manifest_with(block):
    return {"name": "demo", "version": "0.1.0", "app": "server.app:app", "validation": block}


def manifest_check(manifest, problems=()):
    return static.check_manifest(manifest, list(problems), cf.load_policy())


def test_a_valid_validation_block_normalizes_like_openenv():
    normalized, problems = cf.normalize_manifest(manifest_with(VALID_BLOCK))
    assert problems == []
    assert normalized["manifest_schema_version"] == "1" and normalized["signature"] == "openenv.yaml"
    assert normalized["network"] == {"mode": "public", "allowed_hosts": []}
    check = manifest_check(manifest_with(VALID_BLOCK))
    assert check.status == "pass" and check.measured["manifest_schema_version"] == "1"
    report = cf.build_report(results=[check], target="t", source_digest="", manifest=normalized)
    assert cf.report_problems(report) == []

    v2 = {**VALID_BLOCK, "execution": {"kind": "openenv_ws", "dockerfile": "server/Dockerfile"}}
    normalized, problems = cf.normalize_manifest(manifest_with(v2))
    assert problems == [] and normalized["manifest_schema_version"] == "2"
    assert normalized["execution"]["probe_path"] == "validation/runtime.json"
    assert cf.report_problems(cf.build_report(results=[], target="t", source_digest="", manifest=normalized)) == []


@pytest.mark.parametrize(
    "change, evidence",
    [
        ({"reward": {**VALID_BLOCK["reward"], "oracle_tolerance": 0.5}}, "oracle_tolerance 0.5 exceeds the policy maximum 0.1"),
        ({"reward": {**VALID_BLOCK["reward"], "floor_margin": 0.05}}, "floor_margin 0.05 is below the policy minimum 0.1"),
        ({"reward": {**VALID_BLOCK["reward"], "variance_tolerance": 0.5}}, "variance_tolerance 0.5 exceeds"),
        ({"resources": {**VALID_BLOCK["resources"], "episode_timeout_s": 7200}}, "episode_timeout_s 7200 exceeds the policy maximum 3600"),
        ({"reward": {**VALID_BLOCK["reward"], "range": [1.0, 0.0]}}, "strictly increasing"),
        ({"reward": {**VALID_BLOCK["reward"], "range": [0.0, "one"]}}, "two numbers"),
        ({"reward": {**VALID_BLOCK["reward"], "range": [0.0, 1.0, 2.0]}}, "two numbers"),
        ({"reward": {"range": [0, 1]}}, "floor_margin"),  # required by the manifest schema
        ({"types": None}, "'types' is a required property"),
        ({"capabilities": {"verifier": {"kind": "script"}}}, "verifier.entry is required"),
        ({"network": {"mode": "allowlist"}}, "requires at least one allowed host"),
        ({"surprise": 1}, None),  # unknown keys of the block are ignored, as openenv's parser does
        ({"execution": {"probe_path": "../escape.json"}}, "portable package-relative path"),
        ({"capabilities": {"verifier": {"kind": "reward_channel"}, "llm_judged": True}}, "judge is required"),
    ],
)
def test_validation_block_bounds_and_schema(change, evidence):
    block = {**VALID_BLOCK, **change}
    block = {k: v for k, v in block.items() if v is not None}
    check = manifest_check(manifest_with(block))
    if evidence is None:
        assert check.status == "pass", check.evidence
        return
    assert check.status == "fail"
    assert any(evidence in line for line in check.evidence), check.evidence
    assert check.remediation


def test_manifest_failures():
    assert manifest_check(None, ["openenv.yaml is not valid YAML: ..."]).evidence == ["openenv.yaml is not valid YAML: ..."]
    assert manifest_check(None).status == "fail"
    no_name = manifest_check({"spec_version": 1})
    assert no_name.status == "fail" and "no `name`" in no_name.evidence[0]
    assert manifest_check({"name": "x", "validation": "yes"}).evidence == ["validation: must be a mapping"]


def test_reward_range():
    assert cf.reward_range(None) == (0.0, 1.0)
    assert cf.reward_range(manifest_with({"reward": {"range": [-1, 10]}})) == (-1.0, 10.0)
    assert cf.reward_range(manifest_with({"reward": {"range": [10, -1]}})) == (0.0, 1.0)


def listing(*paths):
    return [{"path": p, "size": 1} for p in paths]


def test_layout_with_a_full_listing():
    manifest = {"name": "x", "app": "server.app:app"}
    full = listing("openenv.yaml", "README.md", "pyproject.toml", "server/app.py", "server/Dockerfile")
    assert static.check_layout(manifest, full).status == "pass"
    missing = static.check_layout(manifest, listing("openenv.yaml", "README.md", "server/x.py"))
    assert missing.status == "fail"
    assert missing.evidence == ["missing pyproject.toml", "missing server/app.py or server/app/__init__.py",
                                "missing Dockerfile or server/Dockerfile"]
    custom = static.check_layout({"name": "x", "app": "envs.demo.app:api"},
                                 listing("openenv.yaml", "README.md", "pyproject.toml", "Dockerfile", "envs/demo/app.py"))
    assert custom.status == "pass"
    bad_app = static.check_layout({"name": "x", "app": "server/app.py"}, full)
    assert bad_app.status == "fail" and "not a module:attribute" in bad_app.evidence[0]
    assert static.check_layout(manifest, []).status == "skip"


def test_layout_with_a_root_listing():
    root = static.check_layout({"name": "x"}, listing("openenv.yaml", "README.md", "pyproject.toml", "Dockerfile", "server"))
    assert root.status == "pass"
    assert root.measured["unverified"] == ["server/app.py or server/app/__init__.py"]


def test_openenv_dependency():
    assert static.check_openenv_dependency("openenv[core]>=0.2.2", []).status == "pass"
    missing = static.check_openenv_dependency("", listing("openenv.yaml"))
    assert missing.status == "fail" and missing.evidence == ["there is no pyproject.toml"]


# --------------------------------------------------------------------------- #
# validation/runtime.json
# --------------------------------------------------------------------------- #

PLAN = {"plan_schema_version": "1", "reset": {"episode_id": "ep-1", "seed": 7}, "actions": [{"guess": 50}]}


def plan_bytes(**changes):
    return json.dumps({**PLAN, **changes}).encode()


def test_runtime_plan_parses():
    plan, problem = cf.parse_runtime_plan(plan_bytes())
    assert problem is None
    assert plan == {"plan_schema_version": "1", "reset": {"episode_id": "ep-1", "seed": 7, "options": {}},
                    "actions": [{"guess": 50}]}
    assert cf.parse_runtime_plan(b"\xef\xbb\xbf" + plan_bytes())[1] is None  # a BOM is tolerated
    for path in (Path(__file__).parents[2] / "examples" / "envs").glob("*/validation/runtime.json"):
        assert cf.parse_runtime_plan(path.read_bytes())[1] is None, path


@pytest.mark.parametrize(
    "raw, problem",
    [
        (b"x" * 65_537, "at most 65,536 bytes"),
        (b"\xff\xfe", "not valid UTF-8"),
        (b"{not json", "not valid JSON"),
        (b'{"plan_schema_version": "1", "plan_schema_version": "1"}', "duplicate key"),
        (plan_bytes(actions=[{"x": float("nan")}]), "not a JSON number"),
        (b"[]", "must be a JSON object"),
        (plan_bytes(plan_schema_version=1), 'plan_schema_version must be the string "1"'),
        (plan_bytes(extra=True), "unknown keys ['extra']"),
        (plan_bytes(reset={"episode_id": "e", "seed": True}), "reset.seed must be an integer"),
        (plan_bytes(reset={"episode_id": "e", "seed": -1}), "reset.seed must be an integer"),
        (plan_bytes(reset={"episode_id": "e", "seed": 2**32}), "reset.seed must be an integer"),
        (plan_bytes(reset={"episode_id": "", "seed": 1}), "reset.episode_id must be a string"),
        (plan_bytes(reset={"episode_id": "e" * 129, "seed": 1}), "reset.episode_id must be a string"),
        (plan_bytes(reset={"seed": 1}), "reset.episode_id must be a string"),
        (plan_bytes(reset={"episode_id": "e", "seed": 1, "options": {"seed": 2}}), "cannot override"),
        (plan_bytes(reset={"episode_id": "e", "seed": 1, "extra": 1}), "reset has unknown keys"),
        (plan_bytes(actions=[]), "1 to 100 objects"),
        (plan_bytes(actions=[{}] * 101), "1 to 100 objects"),
        (plan_bytes(actions=[{"a": 1}, "step"]), "actions[1] must be an object"),
        (plan_bytes(actions=[{"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]), "deeper than 32"),
    ],
)
def test_runtime_plan_problems(raw, problem):
    plan, found = cf.parse_runtime_plan(raw)
    assert plan is None
    assert problem in found


def test_runtime_plan_check():
    check = static.check_runtime_plan
    assert check({"name": "x"}, None).status == "pass"
    declared = manifest_with({**VALID_BLOCK, "execution": {"probe_path": "probe/plan.json"}})
    missing = check(declared, None)
    assert missing.status == "fail" and "probe/plan.json is missing" in missing.evidence[0]
    assert cf.runtime_plan_path(declared) == "probe/plan.json"
    assert cf.runtime_plan_path({"name": "x"}) == "validation/runtime.json"
    assert check({"name": "x"}, b"{}").status == "fail"
    ok = check({"name": "x"}, plan_bytes())
    assert ok.status == "pass" and ok.measured["actions"] == 1


# --------------------------------------------------------------------------- #
# Actions from JSON Schemas
# --------------------------------------------------------------------------- #

# What the example servers really return from /schema (openenv 0.10.0, pydantic 2).
ECHO_ACTION = {
    "additionalProperties": False, "description": "The message the agent wants echoed back.",
    "properties": {
        "metadata": {"additionalProperties": True, "description": "Additional metadata for the action",
                     "title": "Metadata", "type": "object"},
        "message": {"description": "Message to echo back", "title": "Message", "type": "string"},
    },
    "required": ["message"], "title": "EchoAction", "type": "object",
}
GUESS_ACTION = {
    "additionalProperties": False, "description": "One guess at the secret number.",
    "properties": {
        "metadata": {"additionalProperties": True, "title": "Metadata", "type": "object"},
        "guess": {"description": "Guess between 1 and 100", "maximum": 100, "minimum": 1, "title": "Guess",
                  "type": "integer"},
    },
    "required": ["guess"], "title": "GuessNumberAction", "type": "object",
}
MCP_ACTION = {
    "additionalProperties": False, "description": "Call a specific tool via MCP.",
    "properties": {
        "metadata": {"additionalProperties": True, "title": "Metadata", "type": "object"},
        "type": {"const": "call_tool", "default": "call_tool", "title": "Type", "type": "string"},
        "tool_name": {"description": "Name of the tool to call", "title": "Tool Name", "type": "string"},
        "arguments": {"additionalProperties": True, "title": "Arguments", "type": "object"},
    },
    "required": ["tool_name"], "title": "CallToolAction", "type": "object",
}
MCP_TOOL_INPUT = {"additionalProperties": False, "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                  "required": ["a", "b"], "type": "object"}
NESTED = {
    "$defs": {
        "Move": {"additionalProperties": False, "type": "object", "required": ["piece", "to"],
                 "properties": {"piece": {"enum": ["pawn", "rook"], "type": "string"}, "to": {"$ref": "#/$defs/Square"}}},
        "Square": {"type": "object", "required": ["file", "rank"], "properties": {
            "file": {"maxLength": 1, "minLength": 1, "pattern": "^[a-h]$", "type": "string"},
            "rank": {"maximum": 8, "minimum": 1, "type": "integer"}}},
    },
    "type": "object", "additionalProperties": False,
    "required": ["move", "moves", "confidence", "count", "tag", "when", "ids", "note"],
    "properties": {
        "move": {"$ref": "#/$defs/Move"},
        "comment": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "moves": {"items": {"$ref": "#/$defs/Move"}, "minItems": 2, "type": "array"},
        "confidence": {"exclusiveMinimum": 0, "maximum": 1, "type": "number"},
        "count": {"multipleOf": 5, "minimum": 3, "type": "integer"},
        "tag": {"anyOf": [{"$ref": "#/$defs/Square"}, {"type": "null"}]},
        "when": {"format": "date-time", "type": "string"},
        "ids": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "minLength": 8}], "minItems": 2},
        "note": {"type": ["null", "string"], "maxLength": 3},
    },
}
TAGGED_UNION = {
    "$defs": {
        "Click": {"type": "object", "required": ["kind", "x", "y"], "properties": {
            "kind": {"const": "click", "type": "string"}, "x": {"type": "integer"}, "y": {"type": "integer", "exclusiveMinimum": 0}}},
        "Type": {"type": "object", "required": ["kind", "text"], "properties": {
            "kind": {"const": "type", "type": "string"}, "text": {"type": "string", "minLength": 12}}},
    },
    "type": "object", "required": ["op"],
    "properties": {"op": {"oneOf": [{"$ref": "#/$defs/Click"}, {"$ref": "#/$defs/Type"}],
                          "discriminator": {"propertyName": "kind", "mapping": {"click": "#/$defs/Click", "type": "#/$defs/Type"}}}},
}
OPTIONAL_DISCRIMINATOR = {  # a member whose tag is optional in the member but needed by the union
    "oneOf": [
        {"type": "object", "required": ["tool"], "additionalProperties": False,
         "properties": {"type": {"const": "call", "default": "call"}, "tool": {"type": "string", "examples": ["add"]}}},
        {"type": "object", "additionalProperties": False, "properties": {"type": {"const": "list", "default": "list"}}},
    ],
}
ALLOF_WRAPPED = {  # pydantic 1 style: a field's $ref wrapped in allOf, with siblings
    "definitions": {"Point": {"type": "object", "required": ["x"], "properties": {"x": {"type": "number", "minimum": 2.5}}}},
    "type": "object", "required": ["where", "level", "name"],
    "properties": {
        "where": {"allOf": [{"$ref": "#/definitions/Point"}], "description": "a point"},
        "level": {"enum": [None, "low", "high"]},
        "name": {"type": "string", "examples": ["alice"], "pattern": "^[a-z]+$"},
    },
}
SCHEMAS = {
    "echo_env": ECHO_ACTION, "guess_number": GUESS_ACTION, "mcp_calculator": MCP_ACTION, "mcp_tool": MCP_TOOL_INPUT,
    "nested": NESTED, "tagged_union": TAGGED_UNION, "optional_discriminator": OPTIONAL_DISCRIMINATOR,
    "allof_wrapped": ALLOF_WRAPPED, "empty_object": {"type": "object"}, "no_type": {"properties": {"a": {}}, "required": ["a"]},
}


@pytest.mark.parametrize("name", SCHEMAS)
def test_synthesized_actions_validate(name):
    action, notes = cf.synthesize_action(SCHEMAS[name])
    assert isinstance(action, dict), notes
    assert valid(SCHEMAS[name], action), (action, notes)
    assert notes == []


def test_synthesized_actions_are_minimal_and_plausible():
    assert cf.synthesize_action(ECHO_ACTION)[0] == {"message": "probe"}
    assert cf.synthesize_action(GUESS_ACTION)[0] == {"guess": 1}
    assert cf.synthesize_action(MCP_ACTION)[0] == {"type": "call_tool", "tool_name": "probe"}
    assert cf.synthesize_action(MCP_TOOL_INPUT)[0] == {"a": 0, "b": 0}
    nested = cf.synthesize_action(NESTED)[0]
    assert nested["move"] == {"piece": "pawn", "to": {"file": "a", "rank": 1}}
    assert nested["count"] == 5 and nested["when"] == "2024-01-01T00:00:00Z" and nested["note"] == "pro"
    assert cf.synthesize_action(ALLOF_WRAPPED)[0] == {"where": {"x": 2.5}, "level": "low", "name": "alice"}


def test_synthesis_notes_what_it_cannot_honour():
    action, notes = cf.synthesize_action({"type": "object", "required": ["code"],
                                          "properties": {"code": {"type": "string", "pattern": "^[0-9]{6}$"}}})
    assert action == {"code": "probe"} and "no generated string matches pattern" in notes[0]
    assert cf.synthesize_action({"type": "array"}) == (None, ["the action schema does not describe an object"])
    action, notes = cf.synthesize_action({"type": "object", "required": ["x"], "properties": {"x": {"$ref": "https://evil/x"}}})
    assert "remote $ref" in notes[0]
    recursive = {"$defs": {"N": {"type": "object", "required": ["n"], "properties": {"n": {"$ref": "#/$defs/N"}}}},
                 "$ref": "#/$defs/N"}
    action, notes = cf.synthesize_action(recursive)
    assert any("deeper than" in n for n in notes)


@pytest.mark.parametrize("name", SCHEMAS)
def test_invalid_actions_are_invalid(name):
    payload, why = cf.invalid_action(SCHEMAS[name])
    assert why
    assert not isinstance(payload, dict) or not valid(SCHEMAS[name], payload), payload


def test_invalid_action_without_a_schema_is_not_an_object():
    assert cf.invalid_action(None) == ("not-an-action", "a step payload that is not an object")


# --------------------------------------------------------------------------- #
# The sandboxed schema worker
# --------------------------------------------------------------------------- #


def test_schemas_are_checked_in_process():
    assert schema.schema_errors(ECHO_ACTION) == []
    assert "'objekt' is not valid" in schema.schema_errors({"type": "objekt"})[0]
    assert "is not a 'regex'" in schema.schema_errors({"type": "string", "pattern": "(unclosed"})[0]
    assert schema.schema_errors({"type": "string", "pattern": "^(a+)+$"}) == []  # compiled, never matched here


def test_schema_worker_validates():
    outcome = schema.evaluate([
        {"id": "obs", "op": "validate", "schema": GUESS_ACTION, "instances": [{"guess": 5}, {"guess": "5"}]},
        {"id": "remote", "op": "validate", "schema": {"$ref": "https://example.com/s.json"}, "instances": [1]},
    ], timeout_s=30)
    assert outcome["obs"]["results"][0] == [] and "guess: '5' is not of type 'integer'" in outcome["obs"]["results"][1][0]
    assert "Unresolvable" in outcome["remote"]["failed"]  # reported, never fetched
    assert schema.remote_refs({"a": {"$ref": "#/x"}, "b": [{"$ref": "http://x"}]}) == ["http://x"]


def test_a_pathological_pattern_cannot_hang_the_probe():
    evil = {"type": "string", "pattern": "^(a+)+$"}
    started = time.monotonic()
    with pytest.raises((schema.ProbeOverloaded, schema.SchemaWorkerError)):
        schema.evaluate([{"id": "x", "op": "validate", "schema": evil, "instances": ["a" * 40 + "!"]}], timeout_s=1.0)
    assert time.monotonic() - started < 5


# --------------------------------------------------------------------------- #
# The client's rules
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "host, patterns, allowed",
    [
        ("openenv-echo-env.hf.space", ("*.hf.space",), True),
        ("OPENENV-ECHO-ENV.HF.SPACE.", ("*.hf.space",), True),
        ("hf.space", ("*.hf.space",), False),
        ("evil.com", ("*.hf.space",), False),
        ("hf.space.evil.com", ("*.hf.space",), False),
        ("127.0.0.1", ("127.0.0.1", "localhost"), True),
        ("localhost", ("127.0.0.1",), False),
        ("", ("*",), False),
    ],
)
def test_host_allowed(host, patterns, allowed):
    assert cf.host_allowed(host, patterns) is allowed


@pytest.mark.parametrize(
    "url, why",
    [
        ("https://evil.com", "is not allowed"),
        ("https://user:pw@x.hf.space", "credentials"),
        ("ftp://x.hf.space", "only http and https"),
        ("https://x.hf.space/?a=1", "no query"),
        ("https://x.hf.space:99999", "not a valid URL"),
        ("https://x.hf.space@evil.com", "credentials"),
    ],
)
def test_urls_refused(url, why):
    with pytest.raises(HostNotAllowed, match=why):
        check_url(url, ("*.hf.space",))


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/redirect":
            self.send_response(307)
            self.send_header("Location", "http://evil.example/health")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/big":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"x" * 5000)
        elif self.path == "/gzip":
            body = gzip.compress(b"{}")
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/trickle":
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(100):  # one byte every 0.1 s: each read is quick, the whole is not
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.1)
        else:
            body = b'{"status": "healthy"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


@pytest.fixture
def little_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.mark.integration
def test_client_rules(little_server):
    with ProbeClient(little_server, allowed_hosts=("127.0.0.1",), max_body_bytes=1000) as client:
        assert client.request("GET", "/health", timeout_s=5).json() == {"status": "healthy"}
        redirect = client.request("GET", "/redirect", timeout_s=5)
        assert redirect.status == 307
        assert redirect.describe() == "GET /redirect -> 307 redirect to http://evil.example/health (not followed)"
        with pytest.raises(BodyTooLarge, match="larger than 1,000 bytes"):
            client.request("GET", "/big", timeout_s=5)
        with pytest.raises(cf.ProbeHTTPError, match="compressed body"):
            client.request("GET", "/gzip", timeout_s=5)
        started = time.monotonic()
        with pytest.raises(RequestTimeout, match="within 1.0 s"):
            client.request("GET", "/trickle", timeout_s=1.0)
        assert time.monotonic() - started < 3


@pytest.mark.integration
def test_probe_of_a_server_that_is_not_openenv(little_server):
    """Whatever answers, the run ends with a schema-valid failing report, within its deadline."""
    started = time.monotonic()
    report = cf.run_validation(
        cf.ProbeTarget(little_server, allowed_hosts=("127.0.0.1",)),
        manifest={"name": "x"}, files=[], openenv_requirement="", runtime_plan=None, source={},
        config=cf.ProbeConfig(check_timeout_s=2, deadline_s=20, startup_timeout_s=5),
    )
    assert time.monotonic() - started < 25
    assert cf.report_problems(report) == []
    statuses = {r["check_id"]: r["status"] for r in report["results"]}
    assert statuses["runtime.startup"] == "pass"  # it does say healthy
    assert statuses["hub.schema_endpoint"] == "fail" and statuses["hub.ws_episode"] == "fail"
    assert report["verdict"] == "fail"
    assert report["target"] == little_server


@pytest.mark.integration
def test_nothing_listening_means_startup_fails_and_the_rest_is_skipped():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        progress = []
        report = cf.run_validation(
            cf.ProbeTarget(f"http://127.0.0.1:{port}", allowed_hosts=("127.0.0.1",)),
            manifest={"name": "x"}, files=[], openenv_requirement="", runtime_plan=None,
            source={"sha": "b" * 40, "repo_id": "o/n"},
            config=cf.ProbeConfig(startup_timeout_s=1.0, poll_interval_s=0.2), on_progress=progress.append,
        )
    results = {r["check_id"]: r for r in report["results"]}
    assert results["runtime.startup"]["status"] == "fail"
    assert "no HTTP answer" in results["runtime.startup"]["evidence"][1]
    assert results["static.layout"]["status"] == "skip"  # no listing given
    skipped = [c for c, r in results.items() if r["status"] == "skip" and c in probe.RUNTIME_CHECK_IDS]
    assert "hub.ws_episode" in skipped and "hub.mcp_tools" not in results
    assert all("runtime.startup" in results[c]["evidence"][0] for c in skipped)
    assert report["target"] == "o/n@" + "b" * 40 and report["source_digest"] == "b" * 40
    assert progress[0] == "static.manifest" and "hub.time_to_first_work" in progress
    assert cf.report_problems(report) == []


# --------------------------------------------------------------------------- #
# A lying /ws, without OpenEnv: websockets' own server, answering HTTP too
# --------------------------------------------------------------------------- #

FAKE_SCHEMA = {"action": ECHO_ACTION, "observation": {"type": "object"}, "state": {"type": "object"}}


def fake_env(ws_behaviour: str):
    """A server that gets /health and /schema right and misbehaves on /ws as told."""
    from websockets.datastructures import Headers
    from websockets.http11 import Response
    from websockets.sync.server import serve

    def process_request(connection, request):
        if request.path == "/health":
            return connection.respond(200, '{"status": "healthy"}')
        if request.path == "/schema":
            return connection.respond(200, json.dumps(FAKE_SCHEMA))
        if request.path == "/ws" and ws_behaviour == "redirect":
            return Response(302, "Found", Headers([("Location", "ws://evil.example/ws"), ("Content-Length", "0")]), b"")
        if request.path != "/ws":
            return connection.respond(404, '{"detail": "Not Found"}')
        return None

    def handler(connection):
        try:
            connection.recv()
            if ws_behaviour == "oversized":
                connection.send("x" * (2 * 1024 * 1024))
            elif ws_behaviour == "binary":
                connection.send(b"\x00\x01")
            elif ws_behaviour == "garbage":
                connection.send("<html>nope</html>")
            elif ws_behaviour == "bigint":  # valid JSON that Python refuses to convert
                connection.send('{"type": "observation", "data": {"n": 1' + "0" * 5000 + "}}")
            connection.recv()
        except Exception:  # noqa: BLE001 - the client hangs up in every scenario
            pass

    server = serve(handler, "127.0.0.1", 0, process_request=process_request, compression=None, max_size=None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.parametrize(
    "behaviour, evidence",
    [
        ("oversized", "larger than the probe's cap"),
        ("binary", "binary frame (2 bytes) instead of JSON text"),
        ("garbage", "reply is not usable JSON: '<html>nope</html>'"),
        ("bigint", "reply is not usable JSON: '{\"type\": \"observation\", \"data\": {\"n\": 10000"),
        ("redirect", "upgrade answered 302 redirect to ws://evil.example/ws (not followed)"),
    ],
)
@pytest.mark.integration
def test_a_lying_websocket_fails_the_episode_with_evidence(behaviour, evidence):
    server, thread = fake_env(behaviour)
    try:
        port = server.socket.getsockname()[1]
        started = time.monotonic()
        report = cf.run_validation(
            cf.ProbeTarget(f"http://127.0.0.1:{port}", allowed_hosts=("127.0.0.1",)),
            manifest={"name": "fake"}, files=[], openenv_requirement="", runtime_plan=None, source={},
            config=cf.ProbeConfig(check_timeout_s=3, deadline_s=30),
        )
        assert time.monotonic() - started < 30
    finally:
        server.shutdown()
        thread.join(5)
    results = {r["check_id"]: r for r in report["results"]}
    assert results["hub.ws_episode"]["status"] == "fail"
    assert evidence in " | ".join(results["hub.ws_episode"]["evidence"])
    assert results["hub.schema_endpoint"]["status"] == "pass"
    assert cf.report_problems(report) == []


@pytest.mark.integration
def test_a_task_time_limit_ends_the_probe_instead_of_failing_one_check():
    """Celery's soft time limit arrives as an exception from a signal handler, in the middle of some check."""
    import signal

    from celery.exceptions import SoftTimeLimitExceeded

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # accepts connections (the kernel does) and never answers
        port = listener.getsockname()[1]

        def time_limit(signum, frame):
            raise SoftTimeLimitExceeded()

        previous = signal.signal(signal.SIGALRM, time_limit)
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        started = time.monotonic()
        try:
            with pytest.raises(SoftTimeLimitExceeded):
                cf.run_validation(
                    cf.ProbeTarget(f"http://127.0.0.1:{port}", allowed_hosts=("127.0.0.1",)),
                    manifest={"name": "x"}, files=[], openenv_requirement="", runtime_plan=None, source={},
                    config=cf.ProbeConfig(startup_timeout_s=30, deadline_s=60,
                                          passthrough=(SoftTimeLimitExceeded,)),
                )
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert time.monotonic() - started < 10


def test_measurements_from_a_server_are_capped_like_evidence():
    """A server decides what its /metadata and replies hold; the public report stays bounded anyway."""
    from registry.conformance.report import MAX_MEASURED_BYTES

    huge = {f"k{i}": "x" * 5000 for i in range(500)}
    measured = CheckResult("hub.metadata", "pass", {"name": "ok", "description": "d" * 100_000, **huge}).to_dict()
    size = len(json.dumps(measured["measured"], ensure_ascii=False, separators=(",", ":")))
    assert size <= MAX_MEASURED_BYTES
    assert measured["measured"]["name"] == "ok" and "(cut from" in measured["measured"]["description"]
    assert "more measurement(s) cut" in measured["measured"]["…"]
    small = CheckResult("hub.metadata", "pass", {"name": "ok", "rewards": [0.5] * 100}).to_dict()
    assert small["measured"] == {"name": "ok", "rewards": [0.5] * 100}  # ordinary measurements pass untouched


@pytest.mark.integration
def test_an_answer_sent_before_a_close_is_read_even_when_our_frame_finds_the_socket_closed():
    """The stock server answers a second client CAPACITY_REACHED at once and closes: that frame is the reply,
    not "the server closed the connection", so the probe waits for the session instead of failing."""
    from websockets.sync.server import serve

    def handler(connection):
        connection.send(json.dumps({"type": "error", "data": {"code": "CAPACITY_REACHED", "message": "full"}}))
        connection.close()

    server = serve(handler, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.socket.getsockname()[1]
        with ProbeClient(f"http://127.0.0.1:{port}", allowed_hosts=("127.0.0.1",)) as client:
            session = client.websocket("/ws", open_timeout_s=5)
            time.sleep(0.3)  # the server's close has arrived before we speak
            reply = session.exchange({"type": "reset", "data": {}}, timeout_s=5)
            assert reply.error_code == "CAPACITY_REACHED" and reply.problem is None, reply.describe()
            assert reply.fatal and session.closed
    finally:
        server.shutdown()
