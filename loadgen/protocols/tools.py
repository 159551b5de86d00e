"""``workload.tools`` as each API's request fields, and the tool definitions latbench makes.

OpenAI chat takes ``tools: [{"type": "function", "function": {name, description, parameters}}]`` and
``tool_choice`` ("auto", "none", "required" or ``{"type": "function", "function": {"name"}}``); Responses the
same function fields flat (``{"type": "function", "name", ...}``, a named choice ``{"type": "function", "name"}``);
Anthropic ``{name, description, input_schema}`` with ``tool_choice`` ``{"type": "auto" | "any" | "none" |
"tool"}``.

**Generated tools** (``generate: {count, tokens}``): ``tool_i`` with a string ``query``, an integer ``limit`` and
an enum ``mode`` parameter, its description words drawn from a fixed seed until the definition's JSON is about
``tokens`` x 4 characters: the same definitions every run and on every machine.
"""

from __future__ import annotations

import json

from loadgen.scenario.media_model import Tools
from loadgen.scenario.prompts import CHARS_PER_TOKEN, WORDS

__all__ = ["tool_definitions", "tool_fields"]


def _generated(count: int, tokens: int) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(0x7001)
    out = []
    for i in range(count):
        params = {"type": "object",
                  "properties": {"query": {"type": "string", "description": "what to look up"},
                                 "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                                 "mode": {"type": "string", "enum": ["fast", "exact"]}},
                  "required": ["query"]}
        tool = {"type": "function", "function": {"name": f"tool_{i}", "description": "", "parameters": params}}
        room = tokens * CHARS_PER_TOKEN - len(json.dumps(tool))
        words: list[str] = []
        while room > 0:
            w = WORDS[int(rng.integers(len(WORDS)))]
            words.append(w)
            room -= len(w) + 1
        tool["function"]["description"] = " ".join(words)
        out.append(tool)
    return out


def tool_definitions(spec: Tools) -> list[dict]:
    """The tools as OpenAI's chat API takes them (unset optional fields left out)."""
    if spec.generate is not None:
        return _generated(spec.generate.count, spec.generate.tokens)
    return [d.model_dump(exclude_none=True) for d in spec.definitions]


def tool_fields(spec: Tools, style: str) -> dict:
    """The request fields (``tools``, ``tool_choice``) of ``spec`` for an API (``openai-chat``,
    ``openai-responses`` or ``anthropic-messages``)."""
    defs = tool_definitions(spec)
    choice = spec.choice
    named = choice not in ("auto", "none", "required")
    if style == "openai-chat":
        return {"tools": defs,
                "tool_choice": {"type": "function", "function": {"name": choice}} if named else choice}
    if style == "openai-responses":
        return {"tools": [{"type": "function", **d["function"]} for d in defs],
                "tool_choice": {"type": "function", "name": choice} if named else choice}
    tools = [{"name": d["function"]["name"], "description": d["function"].get("description", ""),
              "input_schema": d["function"]["parameters"]} for d in defs]
    kind = {"auto": {"type": "auto"}, "none": {"type": "none"}, "required": {"type": "any"}}
    return {"tools": tools, "tool_choice": kind.get(choice) or {"type": "tool", "name": choice}}
