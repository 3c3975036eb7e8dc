"""JSON Schema work on what an environment publishes: synthesizing an action, and sandboxed validation.

`synthesize_action` builds a minimal action from `/schema`'s action schema
the way pydantic emits it (required properties, const, defaults, examples,
enums, bounds, nested objects, $ref/$defs, anyOf/oneOf/allOf). Whether the
result really validates is then asked of the sandboxed worker, like every
other evaluation of an environment-supplied schema (`evaluate`).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("_schema_worker.py")
WORKER_CPU_S = 5  # keep equal to the RLIMIT_CPU soft limit in _schema_worker.py
MAX_DEPTH = 16
STRING_CANDIDATES = ("probe", "a", "0", "probe-1", "A", "x0")
FORMAT_VALUES = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00Z",
    "email": "probe@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "hostname": "example.com",
}


class SchemaWorkerError(Exception):
    """Evaluating the environment's schemas exhausted the sandbox's CPU or memory: the schemas' fault."""


class ProbeOverloaded(Exception):
    """The sandbox did not get to finish for reasons of the probe host (load, cannot start)."""


def remote_refs(schema: Any, limit: int = 5) -> list[str]:
    """`$ref`/`$dynamicRef` values that are not local (`#…`): never fetched, reported instead."""
    found: list[str] = []
    stack = [schema]
    while stack and len(found) < limit:
        value = stack.pop()
        if isinstance(value, dict):
            for key, child in value.items():
                if key in ("$ref", "$dynamicRef") and (not isinstance(child, str) or not child.startswith("#")):
                    found.append(str(child)[:100])
                else:
                    stack.append(child)
        elif isinstance(value, list):
            stack.extend(value)
    return found


def schema_errors(schema: Any, limit: int = 3) -> list[str]:
    """Why `schema` is not a valid JSON Schema (Draft 2020-12), checked in-process.

    Safe to run here: only the trusted metaschema's keywords are applied, and
    the environment's patterns are compiled (format "regex"), never matched.
    Matching data against an environment's schema goes through `evaluate`.
    """
    from jsonschema import Draft202012Validator

    try:
        errors = Draft202012Validator(
            Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER,
        ).iter_errors(schema)
        found = []
        for error in errors:
            where = "/".join(str(p) for p in error.absolute_path) or "/"
            found.append(f"{where}: {error.message}"[:300])
            if len(found) >= limit:
                break
        return found
    except RecursionError:
        return ["the schema is nested too deeply to check"]


def evaluate(tasks: list[dict], *, timeout_s: float) -> dict[str, dict]:
    """Run schema tasks (see _schema_worker.py) in a fresh, isolated, resource-capped interpreter.

    The child's CPU time is capped (WORKER_CPU_S); the wall-clock `timeout_s`
    only guards against a stuck child. When the wall clock runs out first the
    host was too busy, which says nothing about the schema: that raises
    ProbeOverloaded, so the check can report `error` instead of blaming the
    environment.
    """
    if not tasks:
        return {}
    payload = json.dumps({"tasks": tasks}, ensure_ascii=False, allow_nan=False, default=str).encode("utf-8")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", str(WORKER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={},
        )
    except OSError as exc:
        raise ProbeOverloaded(f"schema evaluation could not start: {exc}") from None
    try:
        out, _ = proc.communicate(payload, timeout=max(0.5, timeout_s))
    except subprocess.TimeoutExpired:
        proc.kill()
        for pipe in (proc.stdin, proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass  # a broken pipe to a killed child
        try:
            _, _, usage = os.wait4(proc.pid, 0)
            cpu = usage.ru_utime + usage.ru_stime
        except ChildProcessError:
            cpu = 0.0
        proc.returncode = -9  # reaped above; keep Popen from waiting for it again
        if cpu >= WORKER_CPU_S - 0.5:
            raise SchemaWorkerError(f"schema evaluation used its whole CPU budget ({WORKER_CPU_S} s)") from None
        raise ProbeOverloaded(
            f"schema evaluation did not finish within {timeout_s:.1f} s on a busy probe host "
            f"({cpu:.1f} s of CPU used)"
        ) from None
    if proc.returncode != 0:
        raise SchemaWorkerError(f"schema evaluation exceeded its CPU or memory budget (exit {proc.returncode})")
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        raise SchemaWorkerError("schema evaluation returned no result") from None


# --------------------------------------------------------------------------- #
# Action synthesis
# --------------------------------------------------------------------------- #


def json_pointer(root: Any, ref: str) -> Any:
    """The node a local `$ref` (`#/…`, JSON Pointer escapes) names in `root`; KeyError when there is none."""
    node = root
    for part in ref[1:].lstrip("/").split("/") if ref not in ("#", "#/") else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(ref)
    return node


class _Synth:
    def __init__(self, root: Any):
        self.root = root
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < 10:
            self.notes.append(text)

    def value(self, schema: Any, path: str, depth: int) -> Any:
        if schema is True or schema == {}:
            return "probe"
        if not isinstance(schema, dict):
            self.note(f"{path or '/'}: unsatisfiable schema")
            return None
        if depth > MAX_DEPTH:
            self.note(f"{path or '/'}: schema nested deeper than {MAX_DEPTH} levels")
            return None
        if "const" in schema:
            return schema["const"]
        if "default" in schema:
            return schema["default"]
        examples = schema.get("examples")
        if isinstance(examples, list) and examples:
            return examples[0]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return next((v for v in enum if v is not None), enum[0])
        if isinstance(schema.get("$ref"), str):
            ref = schema["$ref"]
            if not ref.startswith("#"):
                self.note(f"{path or '/'}: remote $ref {ref!r} not followed")
                return None
            try:
                target = json_pointer(self.root, ref)
            except KeyError:
                self.note(f"{path or '/'}: unresolvable $ref {ref!r}")
                return None
            siblings = {k: v for k, v in schema.items() if k not in ("$ref", "description", "title")}
            if siblings and isinstance(target, dict):
                return self.value({"allOf": [target, siblings]}, path, depth + 1)
            return self.value(target, path, depth + 1)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of:
            outer = {k: v for k, v in schema.items() if k != "allOf"}
            return self.value(self._merge([outer, *all_of], depth), path, depth + 1)
        for key in ("oneOf", "anyOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                chosen = next((o for o in options if not (isinstance(o, dict) and o.get("type") == "null")), options[0])
                rest = {k: v for k, v in schema.items() if k not in (key, "discriminator")}
                if rest:
                    chosen = {"allOf": [chosen, rest]} if isinstance(chosen, dict) else chosen
                return self.value(chosen, path, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            if "properties" in schema or "required" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                return "probe"
        return {
            "string": self.string, "integer": self.integer, "number": self.number, "boolean": lambda s, p, d: False,
            "null": lambda s, p, d: None, "array": self.array, "object": self.object,
        }.get(kind, lambda s, p, d: self.note(f"{p or '/'}: unknown type {kind!r}"))(schema, path, depth)

    def _merge(self, parts: list, depth: int) -> dict:
        merged: dict[str, Any] = {}
        for part in parts:
            if isinstance(part, dict) and isinstance(part.get("$ref"), str) and part["$ref"].startswith("#"):
                try:
                    part = {**json_pointer(self.root, part["$ref"]), **{k: v for k, v in part.items() if k != "$ref"}}
                except (KeyError, TypeError):
                    self.note(f"unresolvable $ref {part['$ref']!r}")
                    continue
            if not isinstance(part, dict):
                continue
            for key, value in part.items():
                if key == "properties" and isinstance(value, dict):
                    merged["properties"] = {**merged.get("properties", {}), **value}
                elif key == "required" and isinstance(value, list):
                    merged["required"] = list(dict.fromkeys([*merged.get("required", []), *value]))
                else:
                    merged.setdefault(key, value)
        return merged

    def string(self, schema: dict, path: str, depth: int) -> str:
        low = schema.get("minLength", 0) if isinstance(schema.get("minLength"), int) else 0
        high = schema.get("maxLength") if isinstance(schema.get("maxLength"), int) else None
        fmt = schema.get("format")
        candidates = [FORMAT_VALUES[fmt]] if fmt in FORMAT_VALUES else list(STRING_CANDIDATES)
        fitted = []
        for candidate in candidates:
            candidate = candidate + "x" * max(0, low - len(candidate))
            if high is not None:
                candidate = candidate[: max(high, 0)]
            fitted.append(candidate)
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                regex = re.compile(pattern)
                for candidate in fitted:
                    # Short, fixed candidates: even a pathological pattern stays cheap here.
                    if regex.search(candidate):
                        return candidate
            except (re.error, RecursionError):
                pass
            self.note(f"{path or '/'}: no generated string matches pattern {pattern[:60]!r}")
        return fitted[0]

    def _bounds(self, schema: dict, integer: bool) -> tuple[float | None, float | None]:
        low = high = None
        if isinstance(schema.get("minimum"), (int, float)):
            low = schema["minimum"]
        if isinstance(schema.get("exclusiveMinimum"), (int, float)) and not isinstance(schema["exclusiveMinimum"], bool):
            value = schema["exclusiveMinimum"]
            value = math.floor(value) + 1 if integer else value + (schema.get("multipleOf") or 1)
            low = value if low is None else max(low, value)
        if isinstance(schema.get("maximum"), (int, float)):
            high = schema["maximum"]
        if isinstance(schema.get("exclusiveMaximum"), (int, float)) and not isinstance(schema["exclusiveMaximum"], bool):
            value = schema["exclusiveMaximum"]
            value = math.ceil(value) - 1 if integer else value - (schema.get("multipleOf") or 1)
            high = value if high is None else min(high, value)
        return low, high

    def integer(self, schema: dict, path: str, depth: int) -> int:
        low, high = self._bounds(schema, integer=True)
        value = math.ceil(low) if low is not None else (0 if high is None or high >= 0 else math.floor(high))
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0 and value % step:
            value += step - value % step
        if high is not None and value > high:
            self.note(f"{path or '/'}: no integer satisfies the bounds")
        return int(value)

    def number(self, schema: dict, path: str, depth: int) -> float | int:
        low, high = self._bounds(schema, integer=False)
        if low is not None and high is not None and low > high:
            low = (schema.get("minimum", low) + schema.get("maximum", high)) / 2
        value = low if low is not None else (0 if high is None or high >= 0 else high)
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and step > 0:
            value = math.ceil(value / step) * step
        return value

    def array(self, schema: dict, path: str, depth: int) -> list:
        count = schema.get("minItems", 0) if isinstance(schema.get("minItems"), int) else 0
        prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
        items = schema.get("items", {})
        values = [self.value(s, f"{path}/{i}", depth + 1) for i, s in enumerate(prefix[:max(count, len(prefix))])]
        while len(values) < count:
            values.append(self.value(items, f"{path}/{len(values)}", depth + 1))
        if schema.get("uniqueItems") and len(values) > 1:
            self.note(f"{path or '/'}: uniqueItems with {count} generated items")
        return values

    def object(self, schema: dict, path: str, depth: int) -> dict:
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = [r for r in schema.get("required", []) if isinstance(r, str)] if isinstance(schema.get("required"), list) else []
        result: dict[str, Any] = {}
        # Properties fixed by `const` (tagged-union discriminators such as
        # `type: "call_tool"`) are always valid and let a union pick its member.
        for name, sub in properties.items():
            if isinstance(sub, dict) and "const" in sub:
                result[name] = sub["const"]
        extra = schema.get("additionalProperties", True)
        for name in required:
            if name in result:
                continue
            sub = properties.get(name, extra if isinstance(extra, dict) else {})
            result[name] = self.value(sub, f"{path}/{name}", depth + 1)
        return result


def synthesize_action(schema: Any) -> tuple[dict | None, list[str]]:
    """A minimal action for an action JSON Schema, and notes on what could not be honoured."""
    synth = _Synth(schema)
    try:
        value = synth.value(schema, "", 0)
    except RecursionError:
        return None, ["the action schema is nested or recursive beyond synthesis"]
    if not isinstance(value, dict):
        return None, [*synth.notes, "the action schema does not describe an object"]
    return value, synth.notes


def invalid_action(schema: Any) -> tuple[Any, str]:
    """A step payload the action schema rejects, and why it is invalid.

    Prefers an object that breaks the schema (a missing required property, an
    unexpected one, a wrong type); falls back to a payload that is not an
    object at all, which every OpenEnv server must refuse.
    """
    if isinstance(schema, dict):
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        if required:
            return {}, f"missing required {required[0]!r}"
        if schema.get("additionalProperties") is False:
            return {"__probe_invalid__": True}, "an undeclared property"
        wrong = {"string": 12345, "integer": "not-a-number", "number": "not-a-number", "boolean": "maybe",
                 "array": "not-a-list", "object": "not-an-object"}
        for name, sub in properties.items():
            if isinstance(sub, dict) and sub.get("type") in wrong and "const" not in sub:
                return {name: wrong[sub["type"]]}, f"{name!r} of the wrong type"
    return "not-an-action", "a step payload that is not an object"
