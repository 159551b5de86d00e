"""JSON Schema, the part that tool definitions and structured outputs use: is a value a schema (a tool's
``parameters``, a ``json_schema`` response format), and does an answer match one.

The keywords understood are those OpenAI's and vLLM's structured outputs accept: ``type`` (a name or a list),
``properties``, ``required``, ``additionalProperties``, ``items``, ``enum``, ``const``, ``anyOf``/``oneOf``/
``allOf``, ``minimum``/``maximum``, ``minLength``/``maxLength``, ``minItems``/``maxItems``, ``pattern`` and local
``$ref``s (``#/$defs/...``); other keywords (``description``, ``title``, ``format``, ``default``...) are accepted
and not checked. Bounded: nesting deeper than :data:`MAX_DEPTH` is refused as a schema, and checking an answer
visits each of its values once per schema that applies to it.
"""

from __future__ import annotations

import re

__all__ = ["MAX_DEPTH", "schema_problem", "mismatch"]

MAX_DEPTH = 32  # schemas nested deeper than this are refused
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_SUBS = ("anyOf", "oneOf", "allOf")


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def schema_problem(schema, path: str = "", depth: int = 0) -> str | None:
    """Why ``schema`` is not a JSON Schema (the first problem, naming its path inside the schema), or None."""
    where = path or "(top level)"
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return f"{where}: a JSON Schema is an object, got {type(schema).__name__}"
    if depth > MAX_DEPTH:
        return f"{where}: nested more than {MAX_DEPTH} levels deep"
    t = schema.get("type")
    names = t if isinstance(t, list) else [t] if t is not None else []
    bad = [n for n in names if n not in TYPES]
    if bad or (t is not None and not names):
        return f"{_at(path, 'type')}: {bad[0] if bad else t!r} is not a JSON Schema type ({', '.join(TYPES)})"
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            return f"{_at(path, 'properties')}: expected an object of schemas"
        for k, sub in props.items():
            problem = schema_problem(sub, f"{path}.properties.{k}".lstrip("."), depth + 1)
            if problem:
                return problem
    req = schema.get("required")
    if req is not None and not (isinstance(req, list) and all(isinstance(r, str) for r in req)):
        return f"{_at(path, 'required')}: expected a list of property names"
    for key in ("items", "additionalProperties", "not"):
        if key in schema:
            sub = schema[key]
            if key == "items" and isinstance(sub, list):
                subs = sub
            else:
                subs = [sub]
            for i, s in enumerate(subs):
                problem = schema_problem(s, _at(path, key) + (f"[{i}]" if len(subs) > 1 else ""), depth + 1)
                if problem:
                    return problem
    for key in _SUBS:
        if key in schema:
            if not isinstance(schema[key], list) or not schema[key]:
                return f"{_at(path, key)}: expected a non-empty list of schemas"
            for i, s in enumerate(schema[key]):
                problem = schema_problem(s, f"{path}.{key}[{i}]".lstrip("."), depth + 1)
                if problem:
                    return problem
    for key in ("$defs", "definitions"):
        if key in schema:
            if not isinstance(schema[key], dict):
                return f"{_at(path, key)}: expected an object of schemas"
            for k, s in schema[key].items():
                problem = schema_problem(s, f"{path}.{key}.{k}".lstrip("."), depth + 1)
                if problem:
                    return problem
    if "enum" in schema and not isinstance(schema["enum"], list):
        return f"{_at(path, 'enum')}: expected a list of values"
    for key in ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"):
        if key in schema and (isinstance(schema[key], bool) or not isinstance(schema[key], (int, float))):
            return f"{_at(path, key)}: expected a number"
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except (re.error, TypeError):
            return f"{_at(path, 'pattern')}: not a regular expression"
    if "$ref" in schema and not (isinstance(schema["$ref"], str) and schema["$ref"].startswith("#")):
        return f"{_at(path, '$ref')}: only local references (#/...) are understood"
    return None


def _is(value, t: str) -> bool:
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or (isinstance(value, float)
                                                                          and value.is_integer())
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    return value is None


def _ref(root: dict, ref: str):
    node = root
    for part in ref.lstrip("#").strip("/").split("/") if ref != "#" else []:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def mismatch(value, schema, root=None, path: str = "$", depth: int = 0) -> str | None:
    """Where and why ``value`` (parsed JSON) does not match ``schema`` (a valid one: see :func:`schema_problem`),
    or None when it matches."""
    root = schema if root is None else root
    if schema is True or schema is None:
        return None
    if schema is False:
        return f"{path}: no value is allowed here"
    if depth > 2 * MAX_DEPTH:
        return f"{path}: references nested too deep"
    if "$ref" in schema:
        target = _ref(root, schema["$ref"])
        if target is None:
            return f"{path}: unresolved $ref {schema['$ref']}"
        problem = mismatch(value, target, root, path, depth + 1)
        if problem:
            return problem
    t = schema.get("type")
    if t is not None:
        names = t if isinstance(t, list) else [t]
        if not any(_is(value, n) for n in names):
            return f"{path}: expected {' or '.join(names)}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path}: not one of the enum's values"
    if "const" in schema and value != schema["const"]:
        return f"{path}: not the const value"
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        missing = [r for r in schema.get("required") or [] if r not in value]
        if missing:
            return f"{path}: missing required property {missing[0]!r}"
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            sub = props.get(k, extra)
            problem = mismatch(v, sub, root, f"{path}.{k}", depth + 1)
            if problem:
                return problem
    if isinstance(value, list):
        items = schema.get("items")
        for key, bound in (("minItems", len(value) < schema.get("minItems", 0)),
                           ("maxItems", "maxItems" in schema and len(value) > schema["maxItems"])):
            if bound:
                return f"{path}: {len(value)} items breaks {key}"
        if items is not None:
            for i, v in enumerate(value):
                sub = items[i] if isinstance(items, list) and i < len(items) else (
                    True if isinstance(items, list) else items)
                problem = mismatch(v, sub, root, f"{path}[{i}]", depth + 1)
                if problem:
                    return problem
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or ("maxLength" in schema and len(value) > schema["maxLength"]):
            return f"{path}: a string of {len(value)} characters breaks minLength/maxLength"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return f"{path}: does not match the pattern"
    if _is(value, "number") and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"] or "maximum" in schema and value > schema["maximum"]:
            return f"{path}: {value} is out of [minimum, maximum]"
    for key in _SUBS:
        subs = schema.get(key)
        if subs:
            ok = [mismatch(value, s, root, path, depth + 1) is None for s in subs]
            if key == "allOf" and not all(ok) or key == "anyOf" and not any(ok) or key == "oneOf" and sum(ok) != 1:
                return f"{path}: does not match {key}"
    if "not" in schema and mismatch(value, schema["not"], root, path, depth + 1) is None:
        return f"{path}: matches the schema under not"
    return None
