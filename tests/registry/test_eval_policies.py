"""The reference policies: every action they draw validates against the schema it was drawn from.

Validity is asked of the sandboxed schema worker (`registry.conformance.schema.evaluate`, the probe's own
validator), never of the sampler. The schemas: hand-written ones covering each construct the sampler
claims, the action models the corpus environments document in their READMEs (turned into JSON Schema by
pydantic in openenv's own interpreter), openenv's MCP actions, and the examples' live /schema.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
from pathlib import Path

import pytest

from registry.conformance.episode import Episode
from registry.conformance.http import ProbeClient
from registry.conformance.schema import evaluate
from registry.evaluation import policies
from registry.evaluation.policies import (
    UnsupportedSchema, first_valid_action, first_valid_policy, random_policy, random_value,
)
from tests.support.envserver import EnvServer

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "openenv-envs"
EXAMPLES = ROOT / "examples" / "envs"
DRAWS = 60

METADATA = {"additionalProperties": True, "description": "Additional metadata for the action", "type": "object"}

# Each construct the sampler claims, in the shape pydantic emits it where pydantic emits it.
SCHEMAS: dict[str, dict] = {
    "echo": {"additionalProperties": False, "type": "object", "required": ["message"],
             "properties": {"metadata": METADATA, "message": {"type": "string"}}},
    "strings": {"type": "object", "additionalProperties": False,
                "required": ["short", "long", "choice", "fixed", "email", "code"],
                "properties": {
                    "short": {"type": "string", "maxLength": 3},
                    "long": {"type": "string", "minLength": 40, "maxLength": 41},
                    "choice": {"enum": ["up", "down", "left", "right"], "type": "string"},
                    "fixed": {"const": "v1"},
                    "email": {"type": "string", "format": "email"},
                    "code": {"type": "string", "pattern": "^[a-z]+$"},
                    "hinted": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$", "examples": ["AB-123"]},
                }},
    "numbers": {"type": "object", "additionalProperties": False,
                "required": ["die", "open_low", "negative", "probability", "step", "draft4", "float_step", "free"],
                "properties": {
                    "die": {"type": "integer", "minimum": 1, "maximum": 6},
                    "open_low": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3},
                    "negative": {"type": "integer", "maximum": -5},
                    "probability": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                    "step": {"type": "integer", "minimum": 3, "maximum": 40, "multipleOf": 7},
                    "draft4": {"type": "number", "minimum": 2, "exclusiveMinimum": True, "maximum": 2.5},
                    "float_step": {"type": "number", "minimum": 0.1, "maximum": 1, "multipleOf": 0.25},
                    "free": {"type": "number"},
                }},
    "booleans_and_nulls": {"type": "object", "required": ["flag", "nothing", "maybe", "optional_int"],
                           "properties": {
                               "flag": {"type": "boolean"},
                               "nothing": {"type": "null"},
                               "maybe": {"type": ["string", "null"], "minLength": 2},
                               "optional_int": {"anyOf": [{"type": "integer", "minimum": 10}, {"type": "null"}], "default": None},
                           }},
    "arrays": {"type": "object", "additionalProperties": False, "required": ["joints", "pair", "tags", "grid"],
               "properties": {
                   "joints": {"type": "array", "items": {"type": "number", "minimum": -1, "maximum": 1},
                              "minItems": 6, "maxItems": 6},
                   "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                            "minItems": 2, "maxItems": 2},
                   "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True, "minItems": 2},
                   "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
               }},
    "tagged_union": {
        "$defs": {
            "Move": {"type": "object", "additionalProperties": False, "required": ["kind", "to"],
                     "properties": {"kind": {"const": "move", "type": "string"},
                                    "to": {"$ref": "#/$defs/Square"}}},
            "Resign": {"type": "object", "additionalProperties": False, "required": ["kind"],
                       "properties": {"kind": {"const": "resign", "type": "string"}}},
            "Square": {"type": "string", "minLength": 2, "maxLength": 2},
        },
        "type": "object", "additionalProperties": False, "required": ["command"],
        "properties": {"command": {"oneOf": [{"$ref": "#/$defs/Move"}, {"$ref": "#/$defs/Resign"}],
                                   "discriminator": {"propertyName": "kind"}}},
    },
    "mcp_union": {  # two actions without a required field: only the const discriminator tells them apart
        "oneOf": [
            {"type": "object", "additionalProperties": False,
             "properties": {"type": {"const": "list_tools", "default": "list_tools", "type": "string"}, "metadata": METADATA}},
            {"type": "object", "additionalProperties": False, "required": ["tool_name"],
             "properties": {"type": {"const": "call_tool", "default": "call_tool", "type": "string"},
                            "tool_name": {"type": "string"}, "arguments": {"type": "object", "additionalProperties": True},
                            "metadata": METADATA}},
        ],
    },
    "draft4_definitions": {
        "definitions": {"Point": {"type": "object", "required": ["x", "y"],
                                  "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}},
        "type": "object", "required": ["at"], "properties": {"at": {"$ref": "#/definitions/Point"}},
    },
    "all_of_and_ref_siblings": {
        "$defs": {"Base": {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer", "minimum": 5}}}},
        "allOf": [{"$ref": "#/$defs/Base"},
                  {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 1}}}],
        "properties": {"id": {"maximum": 9}},
    },
    "recursive_tree": {
        "$defs": {"Node": {"type": "object", "required": ["value"],
                           "properties": {"value": {"type": "integer"},
                                          "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                                          "parent": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}}}},
        "type": "object", "required": ["root"], "properties": {"root": {"$ref": "#/$defs/Node"}},
    },
    "extra_properties": {
        "type": "object", "required": ["x-trace", "count"], "additionalProperties": {"type": "integer", "minimum": 0},
        "patternProperties": {"^x-": {"type": "string", "maxLength": 4}},
        "minProperties": 3, "properties": {"note": {"type": "string"}},
    },
    "untyped_values": {"type": "object", "required": ["anything", "bounded"],
                       "properties": {"anything": {}, "bounded": {"minimum": 3}}},
}


def validation_errors(schema: dict, instances: list) -> list[list[str]]:
    """Per instance, why it does not validate (empty: it does), from the sandboxed schema worker."""
    outcome = evaluate([{"id": "t", "op": "validate", "schema": schema, "instances": instances}], timeout_s=60)["t"]
    assert "failed" not in outcome, outcome
    return outcome["results"]


def draws(schema: dict, count: int = DRAWS) -> list:
    """The first-valid action and `count` random ones (seeded: the same every run)."""
    rng = random.Random(f"test/{json.dumps(schema, sort_keys=True)[:40]}")
    return [first_valid_action(schema), *(random_value(schema, rng) for _ in range(count))]


def assert_all_valid(schemas: dict[str, dict], count: int = DRAWS) -> None:
    tasks = [{"id": name, "op": "validate", "schema": schema, "instances": draws(schema, count)}
             for name, schema in schemas.items()]
    results = evaluate(tasks, timeout_s=120)
    bad = {}
    for task in tasks:
        outcome = results[task["id"]]
        assert "failed" not in outcome, (task["id"], outcome)
        wrong = [(value, errors) for value, errors in zip(task["instances"], outcome["results"]) if errors]
        if wrong:
            bad[task["id"]] = wrong[:3]
    assert not bad, bad


# --------------------------------------------------------------------------- #
# Hand-written schemas
# --------------------------------------------------------------------------- #


def test_every_drawn_action_validates_for_every_construct():
    assert_all_valid(SCHEMAS, count=200)


def test_random_draws_vary_and_cover_the_choices():
    rng = random.Random(1)
    values = [random_value(SCHEMAS["strings"], rng) for _ in range(200)]
    assert {v["choice"] for v in values} == {"up", "down", "left", "right"}
    assert {v["fixed"] for v in values} == {"v1"}
    assert len({v["long"] for v in values}) == 200 and {len(v["long"]) for v in values} <= {40, 41}
    assert "hinted" in {k for v in values for k in v}  # optional properties are sometimes sent
    numbers = [random_value(SCHEMAS["numbers"], rng) for _ in range(200)]
    assert {n["die"] for n in numbers} == {1, 2, 3, 4, 5, 6}
    assert {n["open_low"] for n in numbers} == {1, 2}
    assert {n["step"] for n in numbers} == {7, 14, 21, 28, 35}
    unions = [random_value(SCHEMAS["tagged_union"], rng)["command"]["kind"] for _ in range(50)]
    assert set(unions) == {"move", "resign"}
    nullable = [random_value(SCHEMAS["booleans_and_nulls"], rng) for _ in range(100)]
    assert {type(v["maybe"]) for v in nullable} == {str, type(None)}
    assert {v["flag"] for v in nullable} == {True, False}


def test_random_draws_depend_on_the_generator_only():
    schema = SCHEMAS["tagged_union"]
    first = [random_value(schema, random.Random(7)) for _ in range(5)]
    assert first == [random_value(schema, random.Random(7)) for _ in range(5)]
    one, two = random.Random(7), random.Random(8)
    assert [random_value(schema, one) for _ in range(20)] != [random_value(schema, two) for _ in range(20)]


def test_first_valid_is_the_simplest_action():
    assert first_valid_action(SCHEMAS["echo"]) == {"message": ""}  # required fields only, shortest string
    numbers = first_valid_action(SCHEMAS["numbers"])
    assert numbers == {"die": 1, "open_low": 1, "negative": -5, "probability": 0.5, "step": 7, "draft4": 2.25,
                       "float_step": 0.25, "free": 0}
    strings = first_valid_action(SCHEMAS["strings"])
    assert strings["choice"] == "up" and strings["short"] == "" and strings["long"] == "x" * 40
    assert strings["code"] == "probe" and "hinted" not in strings  # the first candidate the pattern accepts
    assert first_valid_action(SCHEMAS["booleans_and_nulls"]) == {
        "flag": False, "nothing": None, "maybe": "xx", "optional_int": 10}  # the first listed type/branch
    assert first_valid_action(SCHEMAS["tagged_union"]) == {"command": {"kind": "move", "to": "xx"}}
    # Discriminators fixed by const are sent, so a union of actions without required fields picks one member.
    assert first_valid_action(SCHEMAS["mcp_union"]) == {"type": "list_tools"}
    assert first_valid_action(SCHEMAS["recursive_tree"]) == {"root": {"value": 0}}
    assert first_valid_action(SCHEMAS["extra_properties"]) == {"x-trace": "", "count": 0, "note": ""}


def test_draft_4_spellings_are_understood():
    # The schema worker validates with Draft 2020-12, where `items` as a list is no tuple: checked by shape here.
    schema = {"type": "object", "required": ["t", "n"], "properties": {
        "t": {"type": "array", "items": [{"type": "boolean"}, {"type": "null"}], "additionalItems": False, "minItems": 1},
        "n": {"type": "number", "minimum": 1, "exclusiveMinimum": True, "maximum": 3, "exclusiveMaximum": True}}}
    assert first_valid_action(schema) == {"t": [False], "n": 2}
    rng = random.Random(2)
    for _ in range(100):
        value = random_value(schema, rng)
        assert value["t"] in ([False], [True], [False, None], [True, None]) and 1 < value["n"] < 3


def test_a_recursive_union_gets_a_shallow_first_valid_value():
    schema = {"$defs": {"List": {"anyOf": [{"type": "object", "required": ["next"],
                                            "properties": {"next": {"$ref": "#/$defs/List"}}}, {"type": "null"}]}},
              "type": "object", "required": ["head"], "properties": {"head": {"$ref": "#/$defs/List"}}}
    assert first_valid_action(schema) == {"head": None}
    assert validation_errors(schema, draws(schema, 100)) == [[]] * 101


@pytest.mark.parametrize("schema, why", [
    ({"type": "string"}, "describes string values, not objects"),
    (False, "the schema is `false`"),
    ({"type": "object", "required": ["a"], "properties": {"a": False}}, "/a: the schema is `false`"),
    ({"type": "object", "required": ["a"], "additionalProperties": False}, "'a' is required but additionalProperties is false"),
    ({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 4}}},
     "/n: no integer satisfies the bounds"),
    ({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 6, "multipleOf": 7}}},
     "/n: no integer satisfies the bounds"),
    ({"type": "object", "required": ["s"], "properties": {"s": {"type": "string", "minLength": 3, "maxLength": 2}}},
     "maxLength 2 < minLength 3"),
    ({"type": "object", "required": ["sha"], "properties": {"sha": {"type": "string", "pattern": "^[0-9a-f]{40}$"}}},
     "no candidate string matches pattern"),
    ({"type": "object", "required": ["a"], "properties": {"a": {"not": {"type": "null"}}}}, "'not' is not supported"),
    ({"type": "object", "required": ["a"], "properties": {"a": {"$ref": "https://example.com/s.json"}}},
     "remote $ref 'https://example.com/s.json' is not followed"),
    ({"type": "object", "required": ["a"], "properties": {"a": {"$ref": "#/$defs/Missing"}}}, "points at nothing"),
    ({"$defs": {"N": {"type": "object", "required": ["c"], "properties": {"c": {"$ref": "#/$defs/N"}}}}, "$ref": "#/$defs/N"},
     "nested deeper than 24 levels"),
    ({"type": "object", "required": ["a"], "properties": {"a": {"anyOf": [{"type": "integer", "minimum": 2, "maximum": 1}, False]}}},
     "/a: no branch of anyOf can be satisfied"),
    ({"type": "object", "required": ["t"], "properties": {"t": {"type": "array", "minItems": 3, "items": {"type": "boolean"},
                                                               "uniqueItems": True}}},
     "could not draw distinct items"),
    ({"type": "object", "required": ["a", "b"], "maxProperties": 1, "properties": {"a": {}, "b": {}}},
     "2 required properties > maxProperties 1"),
])
def test_an_unsatisfiable_schema_raises_unsupported_schema_saying_where_and_why(schema, why):
    with pytest.raises(UnsupportedSchema, match=re.escape(why)):
        first_valid_action(schema)
    with pytest.raises(UnsupportedSchema, match=re.escape(why)):  # when the policy is built, never mid-episode
        random_policy(schema, random.Random(0))
    with pytest.raises(UnsupportedSchema):
        first_valid_policy(schema)


def test_actions_are_bounded_in_size_and_depth():
    with pytest.raises(UnsupportedSchema, match="more than 5000 values"):
        first_valid_action({"type": "object", "required": ["a"],
                            "properties": {"a": {"type": "array", "items": {"type": "integer"}, "minItems": 100_000}}})
    rng = random.Random(3)
    open_ended = {"type": "object", "required": ["s", "a"], "properties": {
        "s": {"type": "string", "minLength": 10}, "a": {"type": "array", "minItems": 2, "items": {"type": "integer"}}}}
    for _ in range(200):
        value = random_value(open_ended, rng)
        assert 10 <= len(value["s"]) <= 10 + policies.RANDOM_EXTRA_CHARS
        assert 2 <= len(value["a"]) <= 2 + policies.RANDOM_EXTRA_ITEMS
        assert all(0 <= n <= policies.RANDOM_SPAN for n in value["a"])

    def depth(value) -> int:
        if isinstance(value, dict):
            return 1 + max((depth(v) for v in value.values()), default=0)
        if isinstance(value, list):
            return 1 + max((depth(v) for v in value), default=0)
        return 0

    trees = [random_value(SCHEMAS["recursive_tree"], rng) for _ in range(300)]
    assert max(depth(t) for t in trees) <= 2 * policies.OPTIONAL_DEPTH + 2  # optional content stops early


def test_policies_stop_after_max_steps_and_hand_out_copies():
    schema = SCHEMAS["echo"]
    for policy in (random_policy(schema, random.Random(0), max_steps=3), first_valid_policy(schema, max_steps=3)):
        actions = [policy(Episode(reset_data={}, steps_ok=n)) for n in range(5)]
        assert all(isinstance(a, dict) for a in actions[:3]) and actions[3:] == [None, None]
    policy = first_valid_policy(schema)
    first = policy(Episode(reset_data={}))
    first["message"] = "changed by the caller"
    assert policy(Episode(reset_data={}, steps_ok=1)) == {"message": ""}
    assert first_valid_policy(schema, max_steps=0)(Episode(reset_data={})) is None
    with pytest.raises(ValueError):
        random_policy(schema, random.Random(0), max_steps=-1)


def test_the_random_policy_is_reproducible_from_its_generator():
    schema = SCHEMAS["numbers"]
    one, two = random_policy(schema, random.Random(5)), random_policy(schema, random.Random(5))
    assert [one(Episode(reset_data={}, steps_ok=n)) for n in range(10)] == [two(Episode(reset_data={}, steps_ok=n)) for n in range(10)]


# --------------------------------------------------------------------------- #
# Real schemas: the corpus's documented actions, openenv's MCP actions, the examples' /schema
# --------------------------------------------------------------------------- #

ACTION_CLASS = re.compile(r"^class (\w+Action)\(Action\):\n((?:[ \t]+.*\n?)+)", re.MULTILINE)
FIELD = re.compile(r"^\s+(\w+)\s*:\s*([^=#]+?)\s*(?:=\s*([^#]+?))?\s*(?:#.*)?$")

# Run in openenv's interpreter: the documented fields as pydantic models derived from openenv's Action.
BUILD_SCHEMAS = r"""
import json, sys
from typing import Any, Dict, List, Optional
from openenv.core.env_server.types import Action
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

out = {"openenv/CallToolAction": CallToolAction.model_json_schema(),
       "openenv/ListToolsAction": ListToolsAction.model_json_schema()}
skipped = {}
for env, (name, fields) in json.load(sys.stdin).items():
    source = f"class {name}(Action):\n" + "".join(f"    {line}\n" for line in fields)
    try:
        namespace = {"Action": Action, "Any": Any, "Dict": Dict, "List": List, "Optional": Optional}
        exec(source, namespace)
        out[env] = namespace[name].model_json_schema()
    except Exception as exc:
        skipped[env] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"schemas": out, "skipped": skipped}))
"""


def documented_actions() -> dict[str, tuple[str, list[str]]]:
    """Per corpus environment, the Action class its README documents: (name, field lines)."""
    found = {}
    for readme in sorted(CORPUS.glob("*/README.md")):
        match = ACTION_CLASS.search(readme.read_text(encoding="utf-8"))
        if match:
            fields = []
            for line in match.group(2).splitlines():
                field = FIELD.match(line)
                if field:
                    name, kind, default = field.groups()
                    fields.append(f"{name}: {kind}" + (f" = {default}" if default else ""))
            found[readme.parent.name] = (match.group(1), fields)
    return found


@pytest.fixture(scope="module")
def corpus_schemas(openenv_python):
    documented = documented_actions()
    ran = subprocess.run([openenv_python, "-c", BUILD_SCHEMAS], input=json.dumps(documented), capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(ran.stdout)


def test_the_corpus_documents_action_models(corpus_schemas):
    assert set(documented_actions()) == {"atari_env", "chat_env", "dm_control_env", "git_env", "sumo_rl_env", "wildfire_env"}
    # chat_env's action holds a torch.Tensor: no JSON Schema without torch, and none is made up.
    assert set(corpus_schemas["skipped"]) == {"chat_env"}
    schemas = corpus_schemas["schemas"]
    assert schemas["dm_control_env"]["properties"]["values"]["type"] == "array"
    assert schemas["wildfire_env"]["properties"]["x"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]


def test_actions_drawn_for_the_corpus_and_openenv_schemas_validate(corpus_schemas):
    schemas = corpus_schemas["schemas"]
    assert len(schemas) == 7
    assert_all_valid(schemas, count=100)
    atari = first_valid_action(schemas["atari_env"])
    assert atari == {"action_id": 0}  # required fields only: the defaults are left to the environment
    assert first_valid_action(schemas["openenv/CallToolAction"]) == {"type": "call_tool", "tool_name": ""}


@pytest.mark.integration
def test_actions_drawn_for_the_examples_live_schema_validate(openenv_python):
    servers = [EnvServer(EXAMPLES / name, python=openenv_python).start()
               for name in ("echo_env", "guess_number", "mcp_calculator")]
    try:
        schemas = {}
        for server in servers:
            server.wait_ready()
            with ProbeClient(server.base_url, allowed_hosts=("127.0.0.1",)) as client:
                schemas[server.name] = client.request("GET", "/schema", timeout_s=30).json()["action"]
    finally:
        for server in servers:
            server.request_stop()
        for server in servers:
            server.stop()
    assert_all_valid(schemas, count=200)
    assert first_valid_action(schemas["guess_number"]) == {"guess": 1}
    guesses = {random_value(schemas["guess_number"], random.Random(n))["guess"] for n in range(500)}
    assert guesses == set(range(1, 101))
