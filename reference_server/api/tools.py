"""Tools in chat requests: definitions counted into the prompt, and answers that call a tool with arguments that
are valid JSON for its parameters.

**Prompt.** ``tools`` (OpenAI's ``[{"type": "function", "function": {name, description, parameters}}]``) are
rendered into the prompt as a first ``tools`` message holding their JSON, as chat templates render them, so a
request's prefill grows with its tools' size and usage's ``prompt_tokens`` counts them.

**Answer.** A request with tools calls one unless ``tool_choice`` is ``"none"`` or its last message is a tool
result (the model answers that in text): the tool ``tool_choice`` names, else tool ``len(prompt) % len(tools)``.
The call's arguments are a JSON document made from the tool's ``parameters`` schema (:func:`json_template`) whose
first string value is the generated text: the model's tokens stream as fragments of ``function.arguments``
(the first fragment opens the document, a last one closes it), so the arguments are valid JSON for the schema
however many tokens were generated, and each generated token is one argument chunk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["ToolCall", "json_template", "parse_tools", "plan_tool_call"]

_MARK = "\x00latbench-slot\x00"


class ToolsError(ValueError):
    """``tools`` or ``tool_choice`` that cannot be used; ``param`` names the field."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def _value(schema, slot: list, root: dict, depth: int = 0):
    """A value valid for ``schema`` whose first string is the slot (``slot`` holds [False] until it is taken)."""
    if not isinstance(schema, dict) or depth > 16:
        return None
    if "$ref" in schema and isinstance(schema["$ref"], str):
        node = root
        for part in schema["$ref"].lstrip("#").strip("/").split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return _value(node, slot, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _value(schema[key][0], slot, root, depth + 1)
    t = schema.get("type")
    t = t[0] if isinstance(t, list) and t else t
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else list(props)
        return {k: _value(props[k], slot, root, depth + 1) for k in props if k in required or not slot[0]}
    if t == "array":
        n = max(int(schema.get("minItems", 1)), 1)
        return [_value(schema.get("items", {}), slot, root, depth + 1) for _ in range(n)]
    if t == "integer":
        return int(schema.get("minimum", 1))
    if t == "number":
        return float(schema.get("minimum", 1.0))
    if t == "boolean":
        return True
    if t == "null":
        return None
    if not slot[0]:
        slot[0] = True
        return _MARK
    return "x" * max(int(schema.get("minLength", 1)), 1)


def json_template(schema: dict | None) -> tuple[str, str]:
    """(prefix, suffix) of a JSON document valid for ``schema`` around its first string value: the generated
    text, JSON-escaped, goes between them. A schema without a string gets one ``text`` property when it allows
    extra properties; else the text is not in the document (prefix holds it whole, suffix is empty)."""
    schema = schema if isinstance(schema, dict) else {"type": "object"}
    slot = [False]
    doc = _value(schema, slot, schema)
    if not slot[0] and isinstance(doc, dict) and schema.get("additionalProperties", True) is not False:
        doc["text"] = _MARK
    text = json.dumps(doc, separators=(",", ":"))
    prefix, mark, suffix = text.partition(json.dumps(_MARK))
    if not mark:
        return text, ""
    return prefix + '"', '"' + suffix


@dataclass(frozen=True)
class ToolCall:
    """The call an answer makes: the tool's name and its arguments' template (see :func:`json_template`)."""

    name: str
    prefix: str
    suffix: str


def parse_tools(body: dict) -> tuple[list[dict], object]:
    """(the function definitions of ``tools``, ``tool_choice``); ToolsError naming the bad field."""
    tools = body.get("tools")
    if tools is None:
        return [], None
    if not isinstance(tools, list):
        raise ToolsError("'tools' must be a list", "tools")
    fns = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) and t.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolsError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}",
                             f"tools[{i}]")
        if not isinstance(fn.get("parameters", {}), dict):
            raise ToolsError(f"tools[{i}].function.parameters must be a JSON Schema object",
                             f"tools[{i}].function.parameters")
        fns.append(fn)
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
        if name not in {f["name"] for f in fns}:
            raise ToolsError("tool_choice names no tool of 'tools'", "tool_choice")
    elif choice not in ("auto", "none", "required"):
        raise ToolsError("'tool_choice' must be auto, none, required or {\"type\": \"function\", ...}",
                         "tool_choice")
    return fns, choice


def tools_message(fns: list[dict]) -> dict:
    """The message that carries the tools into the rendered prompt."""
    return {"role": "tools", "content": json.dumps(fns, separators=(",", ":"))}


def plan_tool_call(fns: list[dict], choice, messages: list[dict], prompt_len: int) -> ToolCall | None:
    """The tool the answer calls (None: it answers in text)."""
    if not fns or choice == "none" or (messages and messages[-1].get("role") == "tool"):
        return None
    if isinstance(choice, dict):
        fn = next(f for f in fns if f["name"] == choice["function"]["name"])
    else:
        fn = fns[prompt_len % len(fns)]
    prefix, suffix = json_template(fn.get("parameters"))
    return ToolCall(fn["name"], prefix, suffix)
