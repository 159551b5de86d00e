"""Tool calls read from each API's answers, streamed (OpenAI delta.tool_calls, Responses function_call events,
Anthropic tool_use blocks) and whole: the first tool-call chunk's time, the calls, their argument tokens; a plain
text stream makes no tool-call object at all."""

from __future__ import annotations

import json

from loadgen.protocols.anthropic import AnthropicJson, AnthropicStream
from loadgen.protocols.openai import JsonHandler, StreamHandler
from loadgen.protocols.openai_responses import ResponsesJson, ResponsesStream
from loadgen.records.schema import Outcome


def _sse(obj, event=None) -> bytes:
    return (f"event: {event}\n".encode() if event else b"") + b"data: " + json.dumps(obj).encode() + b"\n\n"


def _feed(handler, chunks) -> Outcome:
    out = Outcome()
    handler.on_status(200, out)
    for t, data in enumerate(chunks):
        handler.on_body(data, 10.0 + t, out)
    handler.on_end(out)
    return out


def _delta(d) -> bytes:
    return _sse({"choices": [{"index": 0, "delta": d}]})


def test_openai_stream_tool_call_deltas_and_a_text_stream_has_none():
    first = {"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":'}}
    second = {"index": 1, "id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}}
    out = _feed(StreamHandler(True, keep_answer=True), [
        _delta({"role": "assistant"}), _delta({"tool_calls": [first]}),
        _delta({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}), _delta({"tool_calls": [second]}),
        _delta({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}), b"data: [DONE]\n\n"])
    tc = out.tool_calls
    assert (tc.first, tc.count, tc.tokens) == (11.0, 2, 3) and out.first_token == 11.0 and out.first_answer == 11.0
    assert tc.calls == {0: ["c1", "f", '{"a":"x"}'], 1: ["c2", "g", "{}"]}  # kept for a conversation's tool result
    text = _feed(StreamHandler(True), [_delta({"content": "hi"}), _delta({"content": "!"}), b"data: [DONE]\n\n"])
    assert text.tool_calls is None and text.output_tokens == 2


def test_whole_answers_count_their_tool_calls():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"city":"Paris"}'}}
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}
    out = _feed(JsonHandler("openai-chat", True), [json.dumps(body).encode()])
    assert (out.tool_calls.count, out.tool_calls.tokens) == (1, 4)
    anthropic = {"type": "message", "content": [{"type": "text", "text": "ok"},
                                                {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}]}
    assert _feed(AnthropicJson(), [json.dumps(anthropic).encode()]).tool_calls.count == 1
    responses = {"output": [{"type": "function_call", "name": "f", "arguments": '{"a":1}'}]}
    assert _feed(ResponsesJson(), [json.dumps(responses).encode()]).tool_calls.count == 1


def test_responses_and_anthropic_streams_time_their_first_tool_call():
    out = _feed(ResponsesStream(1 << 20), [
        _sse({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call"}}),
        _sse({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": '{"a"'}),
        _sse({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": ":1}"}),
        _sse({"type": "response.completed", "response": {"usage": {"input_tokens": 3, "output_tokens": 2}}})])
    assert (out.tool_calls.first, out.tool_calls.count, out.tool_calls.tokens) == (10.0, 1, 2)
    out = _feed(AnthropicStream(1 << 20), [
        _sse({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "name": "f"}}),
        _sse({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        _sse({"type": "message_stop"})])
    assert (out.tool_calls.first, out.tool_calls.count, out.tool_calls.tokens) == (10.0, 1, 1)
