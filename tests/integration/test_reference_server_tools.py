"""Reference server, tools: definitions count into the prompt; an answer calls a tool, streamed as tool-call deltas
whose arguments are valid JSON for the tool's schema; a tool result is answered in text; bad tools are a 400 naming
the field. And latbench's conversations answer the calls with tool results (records: a call, then the answer)."""

from __future__ import annotations

import json

import pytest

from loadgen.scenario.json_schema import mismatch
from reference_server.background import BackgroundServer
from reference_server.config import ServerConfig
from tests.helpers import run
from tests.integration.test_reference_server import http, post_json

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "minLength": 1},
                                           "days": {"type": "integer", "minimum": 1},
                                           "unit": {"type": "string", "enum": ["c", "f"]}},
          "required": ["city", "days", "unit"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": SCHEMA}},
         {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def server(weights_dir):
    cfg = ServerConfig.from_preset("naive", model="tiny", backend="numpy", cache_dir=weights_dir, preload=True)
    with BackgroundServer(cfg) as srv:
        yield srv


def _chat(url, messages, stream=False, **kw):
    body = {"model": "tiny", "messages": messages, "max_tokens": 6, "temperature": 0, "stream": stream, **kw}
    return post_json(url + "/v1/chat/completions", body)


def _events(raw: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in raw.decode().splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_a_streamed_tool_call_has_valid_arguments_and_tools_cost_prompt_tokens(server):
    user = [{"role": "user", "content": "weather?"}]
    choice = {"type": "function", "function": {"name": "weather"}}
    _, _, plain = _chat(server.url, user)
    status, _, raw = _chat(server.url, user, stream=True, tools=TOOLS, tool_choice=choice,
                           stream_options={"include_usage": True})
    assert status == 200
    events = _events(raw)
    deltas = [e["choices"][0]["delta"]["tool_calls"][0] for e in events
              if e.get("choices") and e["choices"][0]["delta"].get("tool_calls")]
    assert deltas[0]["function"]["name"] == "weather" and deltas[0]["id"]
    args = json.loads("".join(d["function"]["arguments"] for d in deltas))
    assert mismatch(args, SCHEMA) is None, args
    assert len(deltas) == 6 + 1  # one per generated token, then the arguments' closing
    assert [e["choices"][0]["finish_reason"] for e in events if e.get("choices")][-1] == "tool_calls"
    usage = events[-1]["usage"]
    assert usage["prompt_tokens"] > json.loads(plain)["usage"]["prompt_tokens"] + len(json.dumps(TOOLS)) // 2
    # not streamed: the same call in message.tool_calls; a tool result is answered in text; none calls nothing
    _, _, body = _chat(server.url, user, tools=TOOLS, tool_choice=choice)
    (call,) = json.loads(body)["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "weather" and mismatch(json.loads(call["function"]["arguments"]), SCHEMA) is None
    after = user + [{"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": call["id"], "content": '{"t": 21}'}]
    answer = json.loads(_chat(server.url, after, tools=TOOLS)[2])["choices"][0]
    assert answer["message"]["content"] and answer["finish_reason"] in ("length", "stop")
    assert json.loads(_chat(server.url, user, tools=TOOLS, tool_choice="none")[2])["choices"][0]["message"]["content"]


@pytest.mark.parametrize("tools, choice, param", [
    ([{"type": "function", "function": {}}], "auto", "tools[0]"),
    ([{"type": "function", "function": {"name": "a", "parameters": 3}}], "auto", "tools[0].function.parameters"),
    (TOOLS, {"type": "function", "function": {"name": "nope"}}, "tool_choice"),
])
def test_bad_tools_are_a_400_naming_the_field(server, tools, choice, param):
    status, _, body = _chat(server.url, [{"role": "user", "content": "x"}], tools=tools, tool_choice=choice)
    assert status == 400 and json.loads(body)["error"]["param"] == param, body


def test_a_conversation_answers_each_tool_call_with_a_tool_result(tmp_path, server):
    _, _, frame = run(tmp_path, f"""
        name: agent
        target: {{url: "{server.url}/v1", model: tiny}}
        workload:
          prompts: {{input_tokens: 8, output_tokens: 4, distinct: 4}}
          tools: {{definitions: {json.dumps(TOOLS[:1])}, choice: auto, result: '{{"t": 21}}'}}
          conversations: {{turns: 2}}
        load:
          mode: closed
          phases: [{{name: main, duration: 5s, concurrency: 1, max_requests: 4}}]
        """)
    rows = frame.sort_values("turn")
    assert (rows["error"] == "").all() and list(rows["session"]) == [0] * 4
    # each user turn: a tool call, then the answer to its result (a longer prompt: the call and the result)
    assert list(rows["tool_calls"]) == [1, 0, 1, 0] and (rows["tools"] == 1).all()
    assert rows["prompt_tokens"].is_monotonic_increasing
    assert rows["ttftc"].notna().tolist() == [True, False, True, False]
    _, _, metrics = http("GET", server.url + "/metrics")
    assert b"refserver:requests" in metrics


def test_a_response_format_is_answered_with_json_valid_for_its_schema(server):
    user = [{"role": "user", "content": "a city?"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA}}
    _, _, body = _chat(server.url, user, response_format=fmt)
    assert mismatch(json.loads(json.loads(body)["choices"][0]["message"]["content"]), SCHEMA) is None
    _, _, raw = _chat(server.url, user, stream=True, response_format={"type": "json_object"})
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in _events(raw) if e.get("choices"))
    assert isinstance(json.loads(text), dict)
    status, _, body = _chat(server.url, user, response_format={"type": "json_schema"})
    assert status == 400 and json.loads(body)["error"]["param"] == "response_format"
