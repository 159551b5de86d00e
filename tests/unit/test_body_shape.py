"""What a non-streamed answer of each API must look like (loadgen.protocols.shape), at every size: a table of
bodies, each judged whole (body_problem) and fed in small pieces (BodyReader), which must agree."""

from __future__ import annotations

import json

import pytest

from loadgen.protocols.shape import MAX_PARSED_BODY, BodyReader, Large, body_problem, shape_problem

LONG = MAX_PARSED_BODY + 1000  # past the parse limit: scanned
CHAT = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"content": "hi"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


def _long_chat(text: str) -> bytes:
    return json.dumps({**CHAT, "choices": [{"index": 0, "message": {"content": text}}]}).encode()


@pytest.mark.parametrize("api, body, problem", [
    ("openai-chat", json.dumps(CHAT).encode(), None),
    ("openai-chat", _long_chat('a "quoted\\" {[ text' * (LONG // 20)), None),
    ("openai-completions", json.dumps({"choices": [{"text": "x"}]}).encode(), None),
    ("openai-chat", b"<!DOCTYPE html>\n<html>" + b"x" * LONG, "not JSON: starts '<!DOCTYPE html>\\n<html>xxx"),
    ("openai-chat", b"<!DOCTYPE html>\n<html></html>", "not JSON: starts '<!DOCTYPE html>\\n<html></html>'"),
    ("openai-chat", json.dumps({"error": {"message": "m" * LONG}}).encode(), 'an error object: {"message": "mmm'),
    ("openai-chat", b'{"error": {"message": "overloaded"}}', 'an error object: {"message": "overloaded"}'),
    ("openai-chat", _long_chat("a" * LONG)[:-3], "not JSON: the body ended inside the object"),
    ("openai-chat", _long_chat("a" * LONG) + b" {}", "not JSON: more after the object"),
    ("openai-chat", b"[" + b"1," * LONG + b"1]", "not a JSON object: starts '[1,1,"),
    ("openai-chat", b'{"object": "chat.completion"}', "no 'choices' list in the response"),
    ("openai-chat", b"", "an empty body"),
    ("openai-chat", b"\x1f\x8b\x08\x00\x01\x02" + b"\x00" * LONG, "not JSON: starts '\\x1f"),
    ("embeddings", json.dumps({"data": [{"embedding": [0.25] * (LONG // 5)}]}).encode(), None),
    ("embeddings", json.dumps({"object": "list", "dat": [0.5] * (LONG // 4)}).encode(), "no 'data' list"),
    ("anthropic-messages", b'{"type": "error", "error": {"type": "overloaded_error"}}', "an error object: "),
    ("anthropic-messages", b'{"type": "message", "content": []}', None),
    ("openai-responses", b'{"status": "failed", "output": []}', "status failed"),
    ("rerank", b'{"results": []}', None),
    ("kserve-v2", b'{"outputs": [' + b"1," * LONG + b'1], "x": {]}', "not JSON: ']' closes '}'"),
    ("triton-generate", b'{"text_output": "hi"}', None),
    ("triton-generate", b'{"text": "hi"}', "no 'text_output' in the response"),
    ("http", b"<html>anything</html>", None),
])
def test_body_problem_at_every_size(api, body, problem):
    got = body_problem(api, body)
    if problem is None:
        assert got is None
    else:
        assert got is not None and got.startswith(problem), got
        assert len(got) < 300 and "\n" not in got and "\x1f" not in got  # short, one line, controls escaped
    if api == "http":
        return  # anything goes: no handler reads an http body
    reader = BodyReader()  # the handlers' path, fed in pieces that split strings and escapes
    for i in range(0, len(body), 4093):
        reader.feed(body[i:i + 4093])
    obj, found = reader.result()
    assert (found or shape_problem(api, obj)) == got


def test_a_long_answer_keeps_its_short_values_and_sizes_its_long_ones():
    reader = BodyReader()
    reader.feed(_long_chat("a" * LONG))
    obj, problem = reader.result()
    assert problem is None and obj["usage"] == CHAT["usage"] and obj["id"] == "x"
    assert isinstance(obj["choices"], Large) and obj["choices"].kind == "list"


def test_body_problem_names_the_content_type_of_a_body_that_is_not_json():
    assert body_problem("openai-chat", b"<html>", "text/html; charset=utf-8").endswith(
        "(Content-Type text/html; charset=utf-8)")
    with pytest.raises(ValueError, match="unknown api"):
        body_problem("nosuch", b"{}")
