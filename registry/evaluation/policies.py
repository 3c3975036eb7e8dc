"""Reference policies for the episode player: actions sampled from an environment's action JSON Schema.

Two policies play every baseline (`registry.evaluation.baseline`):

- `random_policy(schema, rng)`: a fresh random valid action every step, drawn
  from `rng` only, so the same `random.Random(seed)` gives the same actions;
- `first_valid_policy(schema)`: the same action every step, the simplest one
  the schema allows (required properties only, plus `const` discriminators;
  the lowest bound, the shortest string, the first enum member, the first
  branch of a union that can be satisfied, the first listed type).

Both are `Policy` callables of `registry.conformance.episode` and stop (return
None) once `max_steps` steps were played. `random_value(schema, rng)` and
`first_valid_action(schema)` are the single draws behind them.

Invariants:

- a policy is built only for a schema it can satisfy: the factories sample
  once up front and raise `UnsupportedSchema`, saying where and why, for a
  schema they cannot satisfy (`false`, `not`, `if`, a required property that
  is forbidden, bounds that exclude every value, a string pattern no
  candidate matches, recursion through required properties…), so a policy
  never raises in the middle of an episode (a random draw that fails there,
  short of depth or values on a rare branch, plays the first-valid action);
- every action is bounded: at most MAX_DEPTH levels and MAX_NODES values
  (failed attempts count too, so a schema that keeps failing costs bounded
  work); random optional content (optional properties, extra array items,
  longer strings) is only added down to OPTIONAL_DEPTH levels;
- the schema is the environment's (untrusted): it is only read, never
  compiled as a validator here. A `pattern` is matched against a few short
  candidate strings only, where even a pathological expression stays cheap;
  whether actions validate is asked of the sandboxed schema worker
  (`registry.conformance.schema.evaluate`), which the tests do.

The schema is read the way pydantic emits it (JSON Schema 2020-12: `$defs`,
`$ref`, `anyOf` for Optional and unions, `oneOf` + `const` discriminators for
tagged unions, `prefixItems` for tuples), with draft-4 spellings understood
too (`definitions`, boolean `exclusiveMinimum`, `items` as a list). The
branches of a `oneOf` are assumed to be exclusive, as pydantic's are.
"""

from __future__ import annotations

import json
import math
import random
import re
import string
from typing import Any, Callable

from registry.conformance.episode import Episode, Policy
from registry.conformance.schema import FORMAT_VALUES, STRING_CANDIDATES, json_pointer

DEFAULT_MAX_STEPS = 50
MAX_DEPTH = 24  # nesting an action may need (required properties, minimum items)
MAX_NODES = 5_000  # values in one action
FIRST_VALID_DEPTHS = (2, 4, 8, 16, MAX_DEPTH)  # the depth limits a first-valid draw tries in turn
OPTIONAL_DEPTH = 3  # below this depth the random policy adds nothing optional
RANDOM_EXTRA_ITEMS = 4  # a random array has at most minItems + this many items
RANDOM_EXTRA_CHARS = 24  # a random string has at most minLength + this many characters
RANDOM_SPAN = 100  # the width of the range a random number is drawn from when a side is unbounded
UNIQUE_ATTEMPTS = 20  # draws to find a distinct item for uniqueItems
CHARACTERS = string.ascii_letters + string.digits + " "
UNSUPPORTED_KEYWORDS = ("not", "if", "dependentSchemas", "contains", "unevaluatedProperties", "unevaluatedItems")
TYPE_KEYWORDS = (
    ("object", ("properties", "required", "additionalProperties", "minProperties", "maxProperties")),
    ("array", ("items", "prefixItems", "minItems", "maxItems", "uniqueItems")),
    ("string", ("minLength", "maxLength", "pattern", "format")),
    ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")),
)


class UnsupportedSchema(ValueError):
    """No action can be drawn from the schema; str(exc) says where (a JSON pointer) and why."""


def _where(path: str) -> str:
    """A JSON pointer for a message: "/" for the root, the last 80 characters of a long one."""
    if not path:
        return "/"
    return path if len(path) <= 80 else "…" + path[-79:]


def _canonical(value: Any) -> str:
    # JSON equality, as uniqueItems means it (true is not 1, 1.0 is 1).
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "unknown"


def _type_allows(types: list[str] | None, value: Any) -> bool:
    if types is None:
        return True
    kind = _json_type(value)
    return kind in types or (kind == "integer" and "number" in types)


def _types(schema: dict) -> list[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    return None




def _merge(parts: list[dict]) -> dict:
    """The conjunction of resolved schemas (allOf) as one schema, as far as the sampler needs it."""
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if key in ("anyOf", "oneOf"):
                _merge_union(merged, key, value)
            elif key not in merged:
                merged[key] = value
            elif key == "properties" and isinstance(value, dict) and isinstance(merged[key], dict):
                properties = dict(merged[key])
                for name, sub in value.items():
                    properties[name] = {"allOf": [properties[name], sub]} if name in properties else sub
                merged[key] = properties
            elif key == "required" and isinstance(value, list) and isinstance(merged[key], list):
                merged[key] = list(dict.fromkeys([*merged[key], *value]))
            elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties") and _is_number(value):
                merged[key] = max(merged[key], value) if _is_number(merged[key]) else value
            elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties") and _is_number(value):
                merged[key] = min(merged[key], value) if _is_number(merged[key]) else value
            elif key == "type":
                merged[key] = _common_types(_types(merged) or [], _types(part) or [])
            elif key == "enum" and isinstance(value, list) and isinstance(merged[key], list):
                theirs = {_canonical(v) for v in value}
                merged[key] = [v for v in merged[key] if _canonical(v) in theirs]
            elif key == "const" and _canonical(value) != _canonical(merged[key]):
                merged["enum"] = []  # two different constants: nothing satisfies both
            elif key == "additionalProperties" and value is False:
                merged[key] = False
    return merged


def _merge_union(merged: dict, key: str, options: Any) -> None:
    """(A1 | A2) & (B1 | B2) = (A1 & (B1 | B2)) | (A2 & (B1 | B2)): one union, its branches carrying the other."""
    present = next((k for k in ("anyOf", "oneOf") if k in merged), None)
    if present is None:
        merged[key] = options
    elif isinstance(merged[present], list):
        merged[present] = [{"allOf": [branch, {key: options}]} for branch in merged[present]]


def _common_types(mine: list[str], theirs: list[str]) -> list[str]:
    both = [k for k in mine if k in theirs or (k == "integer" and "number" in theirs)]
    return both + [k for k in theirs if k == "integer" and "number" in mine and k not in both]


class _Draw:
    """One draw of one value. `rng` None: the first-valid draw (first branch, lowest bound, nothing optional).

    Where a choice cannot be satisfied (a union branch, a type, an optional
    property, an extra item), the next option is tried; every attempt counts
    against MAX_NODES, so even a schema that keeps failing costs a bounded
    amount of work.
    """

    def __init__(self, root: Any, rng: random.Random | None, max_depth: int = MAX_DEPTH):
        self.root = root
        self.rng = rng
        self.max_depth = max_depth
        self.nodes = 0

    # -- schema resolution ------------------------------------------------------------------------------------

    def resolve(self, schema: Any, path: str, depth: int) -> dict:
        """`schema` with $ref followed and allOf merged: a plain dict of keywords."""
        if depth > MAX_DEPTH:
            raise UnsupportedSchema(f"{_where(path)}: $ref/allOf nested deeper than {MAX_DEPTH} levels")
        for _ in range(MAX_DEPTH):
            if schema is True:
                return {}
            if schema is False:
                raise UnsupportedSchema(f"{_where(path)}: the schema is `false` (no value is allowed)")
            if not isinstance(schema, dict):
                raise UnsupportedSchema(f"{_where(path)}: a schema must be an object, got {_json_type(schema)}")
            for keyword in UNSUPPORTED_KEYWORDS:
                if keyword in schema:
                    raise UnsupportedSchema(f"{_where(path)}: the keyword {keyword!r} is not supported")
            ref = schema.get("$ref")
            if isinstance(ref, str):
                target = self.target(ref, path)
                siblings = {k: v for k, v in schema.items() if k not in ("$ref", "$defs", "definitions")}
                schema = {"allOf": [target, siblings]} if siblings else target
                continue
            parts = schema.get("allOf")
            if isinstance(parts, list) and parts:
                rest = {k: v for k, v in schema.items() if k != "allOf"}
                schema = _merge([rest, *(self.resolve(p, path, depth + 1) for p in parts)])
                continue
            return schema
        raise UnsupportedSchema(f"{_where(path)}: $ref/allOf chain longer than {MAX_DEPTH} links")

    def target(self, ref: str, path: str) -> Any:
        if not ref.startswith("#"):
            raise UnsupportedSchema(f"{_where(path)}: remote $ref {ref[:80]!r} is not followed")
        try:
            return json_pointer(self.root, ref)
        except KeyError:
            raise UnsupportedSchema(f"{_where(path)}: $ref {ref[:80]!r} points at nothing") from None

    # -- choices ----------------------------------------------------------------------------------------------

    def order(self, options: list) -> list:
        """The options in the order to try them: as given (first-valid), or shuffled."""
        if self.rng is None:
            return list(options)
        options = list(options)
        self.rng.shuffle(options)
        return options

    def optional(self, depth: int) -> bool:
        """Whether to add optional content here (never for the first-valid draw, nor deep down)."""
        return self.rng is not None and depth < OPTIONAL_DEPTH and self.rng.random() < 0.5

    def attempt(self, schema: Any, path: str, depth: int) -> tuple[bool, Any, str]:
        """(True, value, "") or (False, None, why): a draw that may fail without failing the whole value."""
        try:
            return True, self.value(schema, path, depth), ""
        except UnsupportedSchema as exc:
            return False, None, str(exc)

    def first_of(self, options: list, path: str, depth: int, what: str) -> Any:
        """The value of the first option (in `order`) that can be drawn."""
        reasons = []
        for option in self.order(options):
            ok, value, why = self.attempt(option, path, depth)
            if ok:
                return value
            reasons.append(why)
        raise UnsupportedSchema(f"{_where(path)}: no {what} can be satisfied ({reasons[0] if reasons else 'none given'})")

    # -- values -----------------------------------------------------------------------------------------------

    def value(self, schema: Any, path: str, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise UnsupportedSchema(f"{_where(path)}: an action would need more than {MAX_NODES} values")
        if depth > self.max_depth:
            raise UnsupportedSchema(f"{_where(path)}: an action would be nested deeper than {self.max_depth} levels "
                                    "(a recursive schema through required properties?)")
        schema = self.resolve(schema, path, depth)
        types = _types(schema)
        if "const" in schema:
            if not _type_allows(types, schema["const"]) or schema.get("enum") == []:
                raise UnsupportedSchema(f"{_where(path)}: const {_canonical(schema['const'])[:60]} does not satisfy the schema")
            return schema["const"]
        if isinstance(schema.get("enum"), list):
            members = [v for v in schema["enum"] if _type_allows(types, v)]
            if not members:
                raise UnsupportedSchema(f"{_where(path)}: no enum member satisfies the schema")
            return members[0] if self.rng is None else self.rng.choice(members)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                rest = {k: v for k, v in schema.items() if k not in (key, "discriminator")}
                options = [{"allOf": [option, rest]} if rest else option for option in schema[key]]
                return self.first_of(options, path, depth + 1, f"branch of {key}")
        kinds = types if types is not None else self.implied_types(schema)
        if not kinds:
            raise UnsupportedSchema(f"{_where(path)}: no type satisfies the schema (type {schema.get('type')!r})")
        if len(kinds) == 1:
            return self.typed(kinds[0], schema, path, depth)
        return self.first_of([{**schema, "type": kind} for kind in kinds], path, depth, "listed type")

    def implied_types(self, schema: dict) -> list[str]:
        """The type a schema without `type` describes, from its keywords; any value when it names none."""
        for kind, keywords in TYPE_KEYWORDS:
            if any(k in schema for k in keywords):
                return [kind]
        return ["null", "boolean", "integer", "string"]

    def typed(self, kind: str, schema: dict, path: str, depth: int) -> Any:
        if kind == "null":
            return None
        if kind == "boolean":
            return False if self.rng is None else self.rng.random() < 0.5
        if kind == "integer":
            return self.integer(schema, path)
        if kind == "number":
            return self.number(schema, path)
        if kind == "string":
            return self.string(schema, path)
        if kind == "array":
            return self.array(schema, path, depth)
        if kind == "object":
            return self.object(schema, path, depth)
        raise UnsupportedSchema(f"{_where(path)}: unknown type {kind!r}")

    def bounds(self, schema: dict) -> tuple[float | None, bool, float | None, bool]:
        """(low, low is exclusive, high, high is exclusive), draft 2020 and draft 4 spellings alike."""
        low = schema["minimum"] if _is_number(schema.get("minimum")) else None
        high = schema["maximum"] if _is_number(schema.get("maximum")) else None
        low_x = high_x = False
        exclusive_min, exclusive_max = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if exclusive_min is True and low is not None:
            low_x = True
        elif _is_number(exclusive_min) and (low is None or exclusive_min >= low):
            low, low_x = exclusive_min, True
        if exclusive_max is True and high is not None:
            high_x = True
        elif _is_number(exclusive_max) and (high is None or exclusive_max <= high):
            high, high_x = exclusive_max, True
        return low, low_x, high, high_x

    def span(self, lo: Any, hi: Any) -> tuple[Any, Any]:
        """The range a random number is drawn from: the bounds, with an open side RANDOM_SPAN wide."""
        if lo is None and hi is None:
            return 0, RANDOM_SPAN
        if lo is None:
            return (0 if hi >= 0 else hi - RANDOM_SPAN), hi
        if hi is None:
            return lo, lo + RANDOM_SPAN
        return lo, hi

    def integer(self, schema: dict, path: str) -> int:
        low, low_x, high, high_x = self.bounds(schema)
        lo = None if low is None else (math.floor(low) + 1 if low_x else math.ceil(low))
        hi = None if high is None else (math.ceil(high) - 1 if high_x else math.floor(high))
        step = schema.get("multipleOf")
        step = int(step) if _is_number(step) and float(step).is_integer() and step > 0 else 1
        if self.rng is None:
            first = lo if lo is not None else (0 if hi is None or hi >= 0 else hi)
            first = -(-first // step) * step
            if hi is not None and first > hi:
                raise UnsupportedSchema(f"{_where(path)}: no integer satisfies the bounds")
            return int(first)
        lo, hi = self.span(lo, hi)
        first, last = -(-lo // step), hi // step
        if first > last:
            raise UnsupportedSchema(f"{_where(path)}: no integer satisfies the bounds")
        return int(self.rng.randint(int(first), int(last)) * step)

    def number(self, schema: dict, path: str) -> float | int:
        low, low_x, high, high_x = self.bounds(schema)
        step = schema.get("multipleOf")
        if _is_number(step) and step > 0:
            return self.multiple(float(step), low, low_x, high, high_x, path)
        if low is not None and high is not None and (low > high or (low == high and (low_x or high_x))):
            raise UnsupportedSchema(f"{_where(path)}: no number satisfies the bounds")
        if self.rng is None:
            if low is None:
                return 0 if high is None or high > 0 or (high == 0 and not high_x) else high - 1
            if not low_x:
                return low
            return low + 1 if high is None or low + 1 < high else (low + high) / 2
        lo, hi = self.span(low, high)
        value = self.rng.uniform(lo, hi)
        if low_x and value <= low:
            value = math.nextafter(low, math.inf)
        if high_x and value >= high:
            value = math.nextafter(high, -math.inf)
        return value

    def multiple(self, step: float, low: Any, low_x: bool, high: Any, high_x: bool, path: str) -> float | int:
        """A multiple of `step` within the bounds (k * step, kept only if it divides back exactly)."""
        first = math.ceil(low / step) if low is not None else (0 if high is None or high >= 0 else math.floor(high / step))
        last = math.floor(high / step) if high is not None else first + RANDOM_SPAN
        candidates = [first, first + 1]
        if self.rng is not None and last >= first:
            candidates.insert(0, self.rng.randint(first, last))
        for k in candidates:
            value = k * step
            value = int(value) if value.is_integer() else value
            in_low = low is None or (value > low if low_x else value >= low)
            in_high = high is None or (value < high if high_x else value <= high)
            if in_low and in_high and (value / step).is_integer():
                return value
        raise UnsupportedSchema(f"{_where(path)}: no multiple of {step} satisfies the bounds")

    def string(self, schema: dict, path: str) -> str:
        low = schema["minLength"] if isinstance(schema.get("minLength"), int) and schema["minLength"] > 0 else 0
        high = schema["maxLength"] if isinstance(schema.get("maxLength"), int) else None
        if high is not None and high < low:
            raise UnsupportedSchema(f"{_where(path)}: maxLength {high} < minLength {low}")
        preferred: list[str] = []
        if schema.get("format") in FORMAT_VALUES:
            preferred.append(FORMAT_VALUES[schema["format"]])
        if self.rng is not None:
            top = low + RANDOM_EXTRA_CHARS if high is None else min(high, low + RANDOM_EXTRA_CHARS)
            preferred.append("".join(self.rng.choice(CHARACTERS) for _ in range(self.rng.randint(low, top))))
        preferred.append("x" * low)
        examples = schema.get("examples") if isinstance(schema.get("examples"), list) else []
        preferred += [v for v in [schema.get("default"), *examples] if isinstance(v, str)]
        preferred += [(c + "x" * low)[: max(low, len(c))] for c in STRING_CANDIDATES]
        fitted = [c for c in preferred if low <= len(c) and (high is None or len(c) <= high)]
        pattern = schema.get("pattern")
        if not isinstance(pattern, str):
            return fitted[0]
        try:
            regex = re.compile(pattern)
            for candidate in fitted:
                # Short candidates only: even a pathological pattern stays cheap on them.
                if len(candidate) <= 64 and regex.search(candidate):
                    return candidate
        except (re.error, RecursionError, OverflowError):
            raise UnsupportedSchema(f"{_where(path)}: pattern {pattern[:60]!r} is not a regular expression Python reads") from None
        raise UnsupportedSchema(f"{_where(path)}: no candidate string matches pattern {pattern[:60]!r} "
                                "(give the property a default or examples that match)")

    def array(self, schema: dict, path: str, depth: int) -> list:
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # draft 4 tuples
            prefix, items = items, schema.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        low = schema["minItems"] if isinstance(schema.get("minItems"), int) and schema["minItems"] > 0 else 0
        high = schema["maxItems"] if isinstance(schema.get("maxItems"), int) else None
        if high is not None and high < low:
            raise UnsupportedSchema(f"{_where(path)}: maxItems {high} < minItems {low}")
        count = low
        if self.optional(depth):
            count = self.rng.randint(low, low + RANDOM_EXTRA_ITEMS if high is None else min(high, low + RANDOM_EXTRA_ITEMS))
        unique = schema.get("uniqueItems") is True
        values: list = []
        seen: set[str] = set()
        for index in range(count):
            sub = prefix[index] if index < len(prefix) else items
            ok, value, why = self.item(sub, f"{path}/{index}", depth, seen if unique else None)
            if not ok:
                if index < low:
                    raise UnsupportedSchema(why)
                break  # an optional extra item that cannot be drawn: the array is long enough without it
            values.append(value)
            seen.add(_canonical(value))
        return values

    def item(self, sub: Any, path: str, depth: int, seen: set[str] | None) -> tuple[bool, Any, str]:
        ok, value, why = self.attempt(sub, path, depth + 1)
        if not ok or seen is None or _canonical(value) not in seen:
            return ok, value, why
        # uniqueItems: draw again, from a generator of our own when the first-valid draw has none.
        rng = self.rng or random.Random(len(seen))
        other = _Draw(self.root, rng, self.max_depth)
        for _ in range(UNIQUE_ATTEMPTS):
            ok, value, why = other.attempt(sub, path, depth + 1)
            self.nodes += other.nodes
            other.nodes = 0
            if ok and _canonical(value) not in seen:
                return True, value, ""
        return False, None, f"{_where(path)}: could not draw distinct items for uniqueItems"

    def object(self, schema: dict, path: str, depth: int) -> dict:
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        required = list(dict.fromkeys(r for r in required if isinstance(r, str)))
        high = schema["maxProperties"] if isinstance(schema.get("maxProperties"), int) else None
        low = schema["minProperties"] if isinstance(schema.get("minProperties"), int) else 0
        if high is not None and len(required) > high:
            raise UnsupportedSchema(f"{_where(path)}: {len(required)} required properties > maxProperties {high}")
        result: dict[str, Any] = {}
        for name in required:
            sub = self.property_schema(schema, properties, name, path)
            result[name] = self.value(sub, f"{path}/{name}", depth + 1)
        # Properties fixed by `const` (tagged-union discriminators) are always sent: they let a union pick its member.
        for name, sub in properties.items():
            if name in result or (high is not None and len(result) >= high):
                continue
            if (isinstance(sub, dict) and "const" in sub) or len(result) < low or self.optional(depth):
                ok, value, _ = self.attempt(sub, f"{path}/{name}", depth + 1)
                if ok:
                    result[name] = value
        if len(result) < low:
            raise UnsupportedSchema(f"{_where(path)}: only {len(result)} properties can be sent, minProperties is {low}")
        return result

    def property_schema(self, schema: dict, properties: dict, name: str, path: str) -> Any:
        """The schema a property's value must satisfy: declared, matched by patternProperties, or additional."""
        if name in properties:
            return properties[name]
        patterns = schema.get("patternProperties") if isinstance(schema.get("patternProperties"), dict) else {}
        matching = []
        for pattern, sub in patterns.items():
            try:
                if re.search(pattern, name):  # a property name: short
                    matching.append(sub)
            except (re.error, RecursionError, OverflowError):
                raise UnsupportedSchema(f"{_where(path)}: patternProperties key {pattern[:60]!r} is not readable") from None
        if matching:
            return {"allOf": matching}
        extra = schema.get("additionalProperties", True)
        if extra is False:
            raise UnsupportedSchema(f"{_where(path)}: property {name!r} is required but additionalProperties is false")
        return extra if isinstance(extra, (dict, bool)) else True


def _draw(schema: Any, rng: random.Random | None) -> Any:
    """A value of `schema`; the first-valid draw deepens its depth limit step by step, so that of the
    values a recursive schema allows it finds a shallow one (`{"next": null}`, not twelve levels of it)."""
    limits = (MAX_DEPTH,) if rng is not None else FIRST_VALID_DEPTHS
    for limit in limits:
        try:
            return _Draw(schema, rng, limit).value(schema, "", 0)
        except UnsupportedSchema:
            if limit == limits[-1]:
                raise
        except RecursionError:
            raise UnsupportedSchema("the action schema is nested too deeply to sample") from None


def random_value(schema: Any, rng: random.Random) -> Any:
    """One random value of `schema`, drawn from `rng` only; UnsupportedSchema when none can be drawn."""
    return _draw(schema, rng)


def first_valid_action(action_schema: Any) -> dict:
    """The simplest action the schema allows (required properties, lowest bounds, first members).

    UnsupportedSchema when the schema cannot be satisfied or does not describe an object.
    """
    action = _draw(action_schema, None)
    if not isinstance(action, dict):
        raise UnsupportedSchema(f"the action schema describes {_json_type(action)} values, not objects")
    return action


def _bounded(max_steps: int, next_action: Callable[[], Any]) -> Policy:
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 0:
        raise ValueError(f"max_steps must be a non-negative integer, got {max_steps!r}")

    def policy(episode: Episode) -> Any:
        return next_action() if episode.steps_ok < max_steps else None

    return policy


def random_policy(action_schema: Any, rng: random.Random, *, max_steps: int = DEFAULT_MAX_STEPS) -> Policy:
    """A fresh random valid action every step, drawn from `rng` only; None after `max_steps` steps.

    Raises UnsupportedSchema now, rather than mid-episode, when the schema
    cannot be satisfied. A random draw that fails later (a branch that needs
    more depth or values than the bounds allow) plays the first-valid action
    for that step instead, so the policy never raises inside an episode.
    """
    fallback = first_valid_action(action_schema)

    def draw() -> Any:
        try:
            action = _draw(action_schema, rng)
        except UnsupportedSchema:
            action = None
        return action if isinstance(action, dict) else json.loads(json.dumps(fallback))

    return _bounded(max_steps, draw)


def first_valid_policy(action_schema: Any, *, max_steps: int = DEFAULT_MAX_STEPS) -> Policy:
    """The simplest valid action (see `first_valid_action`) every step; None after `max_steps` steps."""
    action = first_valid_action(action_schema)
    return _bounded(max_steps, lambda: json.loads(json.dumps(action)))  # a copy each step: the caller may keep it
