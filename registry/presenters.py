"""Turning what the index and the probe recorded into what a page shows: pure, no Django, no I/O.

Everything here reads data an environment chose to publish (its JSON
Schemas, its tool list, its episode replies): it is walked with bounds and
returned as plain strings for templates to escape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from registry.conformance.report import PROPERTY_ORDER

MAX_ROWS = 80
MAX_DEPTH = 3
MAX_TEXT = 300


@dataclass
class SchemaRow:
    """One field of a JSON Schema object, flattened for a table."""

    name: str
    type: str
    required: bool
    description: str = ""
    constraints: list[str] = field(default_factory=list)


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _resolve(root: dict, schema: Any, seen: int = 0) -> dict:
    """Follow a local `$ref` (`#/$defs/X`, `#/definitions/X`) a few times; anything else is left as it is."""
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < 8:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            break
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            break
        schema, seen = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}, seen + 1
    return schema if isinstance(schema, dict) else {}


def _type(root: dict, schema: dict) -> tuple[str, dict | None]:
    """A readable type (`string`, `integer | null`, `array of number`, `Move`) and the object schema to expand."""
    schema = _resolve(root, schema)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            parts, expand = [], None
            for option in schema[key][:6]:
                name, nested = _type(root, option if isinstance(option, dict) else {})
                parts.append(name)
                expand = expand or nested
            return " | ".join(dict.fromkeys(parts)) or "any", expand
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind[:6]), None
    if kind == "array":
        item_type, _ = _type(root, schema.get("items") if isinstance(schema.get("items"), dict) else {})
        return f"array of {item_type}", None
    if kind == "object" or isinstance(schema.get("properties"), dict):
        return _text(schema.get("title") or "object", 60), schema if isinstance(schema.get("properties"), dict) else None
    if kind:
        return _text(kind, 40), None
    if "enum" in schema:
        return "enum", None
    if "const" in schema:
        return "constant", None
    return "any", None


def _constraints(schema: dict) -> list[str]:
    out = []
    for key, label in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"),
                       ("minLength", "min length"), ("maxLength", "max length"), ("minItems", "min items"),
                       ("maxItems", "max items"), ("pattern", "pattern"), ("format", "format")):
        if key in schema and not isinstance(schema[key], (dict, list)):
            out.append(f"{label} {_text(schema[key], 80)}")
    if isinstance(schema.get("enum"), list):
        out.append("one of " + ", ".join(_text(v, 40) for v in schema["enum"][:12])
                   + (" …" if len(schema["enum"]) > 12 else ""))
    if "const" in schema:
        out.append(f"always {_text(schema['const'], 60)}")
    if "default" in schema:
        out.append(f"default {_text(schema['default'], 60)}")
    return out


def _in_declared_order(node: dict, properties: dict) -> list[tuple[str, Any]]:
    """The properties in the order the server declared them (recorded by the probe, since the database may
    reorder an object's keys), then any the record does not name."""
    recorded = node.get(PROPERTY_ORDER)
    order = [k for k in recorded if isinstance(k, str) and k in properties] if isinstance(recorded, list) else []
    order = list(dict.fromkeys(order))
    return [(k, properties[k]) for k in order] + [(k, v) for k, v in properties.items() if k not in set(order)]


def schema_rows(schema: Any) -> list[SchemaRow]:
    """The fields of an object schema as table rows (nested objects as `parent.child`, a few levels deep),
    at most MAX_ROWS; an unusable schema gives no rows."""
    if not isinstance(schema, dict):
        return []
    rows: list[SchemaRow] = []

    def walk(node: dict, prefix: str, depth: int) -> None:
        node = _resolve(schema, node)
        properties = node.get("properties")
        if not isinstance(properties, dict):
            return
        required = set(r for r in node.get("required", []) if isinstance(r, str)) if isinstance(
            node.get("required"), list) else set()
        for name, child in _in_declared_order(node, properties):
            if len(rows) >= MAX_ROWS:
                return
            child = _resolve(schema, child if isinstance(child, dict) else {})
            kind, nested = _type(schema, child)
            constraints = _constraints(child)
            for key in ("anyOf", "oneOf"):  # `X | null` and friends: the alternatives' constraints count too
                for option in child.get(key, [])[:6] if isinstance(child.get(key), list) else []:
                    constraints += [c for c in _constraints(_resolve(schema, option)) if c not in constraints]
            rows.append(SchemaRow(name=_text(f"{prefix}{name}", 120), type=kind, required=name in required,
                                  description=_text(child.get("description", "")), constraints=constraints))
            if nested is not None and depth < MAX_DEPTH:
                walk(nested, f"{prefix}{name}.", depth + 1)

    walk(schema, "", 1)
    return rows


@dataclass
class ToolView:
    name: str
    description: str
    parameters: list[SchemaRow]


def tool_views(tools: Any) -> list[ToolView]:
    """MCP tools as shown: name, description and the fields of the input schema (either spelling of its key)."""
    out = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        schema = tool.get("inputSchema", tool.get("input_schema"))
        out.append(ToolView(name=_text(tool["name"], 100), description=_text(tool.get("description", ""), 600),
                            parameters=schema_rows(schema)))
    return out[:100]


@dataclass
class IntervalBar:
    """Where one result's mean and 95% interval fall on a leaderboard's shared axis, in SVG user units."""

    mean_x: float
    low_x: float | None
    high_x: float | None
    label: str  # the same in words: the SVG's accessible name


def interval_bars(rows: list, *, width: float = 200.0, pad: float = 6.0) -> list[IntervalBar]:
    """Each row's mean and interval on one axis spanning every row's interval (or mean, without one), so the
    bars compare at a glance; a degenerate axis (all equal) puts everything in the middle."""
    values = [v for r in rows for v in (r.mean, r.ci_low, r.ci_high) if v is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    span = high - low

    def x(value: float) -> float:
        return round(width / 2 if span <= 0 else pad + (value - low) / span * (width - 2 * pad), 2)

    bars = []
    for r in rows:
        if r.ci_low is not None and r.ci_high is not None:
            label = f"mean {r.mean:.4g}, 95% interval {r.ci_low:.4g} to {r.ci_high:.4g}"
            bars.append(IntervalBar(x(r.mean), x(r.ci_low), x(r.ci_high), label))
        else:
            bars.append(IntervalBar(x(r.mean), None, None, f"mean {r.mean:.4g}, no interval (one episode)"))
    return bars
