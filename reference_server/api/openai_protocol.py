"""The OpenAI wire format: validating request bodies and building responses, errors and stream chunks.

Validation happens here, at the edge, and fails with :class:`ApiError` (an HTTP status plus an
OpenAI-style body ``{"error": {"message", "type", "param", "code"}}``) naming the offending field.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

from ..models.tokenizer import encode, render_chat
from .media import IMAGE_MARK, ImageInput, MediaError, read_audio_part, read_image_part, splice
from .tools import ToolCall, ToolsError, json_template, parse_tools, plan_tool_call, tools_message

CHAT_ROLES = ("system", "user", "assistant", "tool", "developer")


class ApiError(Exception):
    """An error answered to the client with ``status`` and an OpenAI-style body."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class ParsedRequest:
    """A validated generation request. ``canonical`` holds exactly the fields that decide the output."""

    kind: str  # chat | completion
    model: str
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: list[str]
    stream: bool
    include_usage: bool
    canonical: dict = field(default_factory=dict)
    messages: list[dict] | None = None  # chat: the normalized messages (string contents), for counting
    images: list = field(default_factory=list)  # chat: the ImageInputs of its image parts, in order
    image_spans: list = field(default_factory=list)  # each image's (start, length) in prompt_ids
    tool_call: ToolCall | None = None  # the tool the answer calls (api.tools), None: it answers in text
    json_format: tuple[str, str] | None = None  # response_format: the answer's JSON around the generated text

    @property
    def image_tokens(self) -> int:
        """Prompt tokens its images take."""
        return sum(n for _, n in self.image_spans)


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def _int(body: dict, name: str, default=None):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"'{name}' must be an integer, got {type(value).__name__}", name)
    return value


def _number(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(f"'{name}' must be a number, got {type(value).__name__}", name)
    if not lo <= value <= hi:
        raise _bad(f"'{name}' must be within [{lo}, {hi}], got {value}", name)
    return float(value)


def _bool(body: dict, name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(f"'{name}' must be a boolean, got {type(value).__name__}", name)
    return value


def parse_json(raw: bytes) -> dict:
    """Decode a request body that must be one JSON object."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(f"request body is not valid JSON: {exc}") from None
    except RecursionError:  # "[[[[..." within the body-size limit: a client error, not a 500
        raise _bad("request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object")
    return body


def _chat_content(content, i: int, images: list | None, patch: tuple[int, int, int]) -> str:
    if isinstance(content, str):
        return content.replace(IMAGE_MARK, "\ufffd") if images is not None else content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, {"type": "image_url", ...}, ...]
        parts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"].replace(IMAGE_MARK, "\ufffd") if images is not None else part["text"])
            elif kind in ("image_url", "input_audio") and images is not None:
                param = f"messages[{i}].content[{j}]"
                try:
                    images.append(read_image_part(part, param, *patch[:2]) if kind == "image_url"
                                  else read_audio_part(part, param, patch[2]))
                except MediaError as exc:
                    raise _bad(str(exc), exc.param) from None
                parts.append(IMAGE_MARK)
            else:
                what = "text, image_url or input_audio parts" if images is not None else "text parts"
                raise _bad(f"messages[{i}].content parts must be {what}", f"messages[{i}].content")
        return "".join(parts)
    raise _bad(f"messages[{i}].content must be a string or a list of content parts", f"messages[{i}].content")


def parse_messages(body: dict, images: list | None = None, patch: tuple[int, int, int] = (16, 2, 25)) -> list[dict]:
    """The ``messages`` of a chat body, each with a role and string content; ApiError naming the bad field. With
    ``images`` (a list), image parts are read into it and marked in the content (:data:`media.IMAGE_MARK`);
    ``patch`` is (patch size, merge, audio tokens a second): what an image's and a clip's tokens are counted by."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    normal = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _bad(f"messages[{i}] must be an object", f"messages[{i}]")
        if m.get("role") not in CHAT_ROLES:
            raise _bad(f"messages[{i}].role must be one of {', '.join(CHAT_ROLES)}", f"messages[{i}].role")
        content = m.get("content")
        if content is None and m["role"] == "assistant" and m.get("tool_calls"):  # a tool call, as its JSON
            content = json.dumps(m["tool_calls"], separators=(",", ":"))
        normal.append({"role": m["role"], "content": _chat_content(content, i, images, patch)})
    return normal


def _prompt(body: dict, kind: str, patch: tuple[int, int, int], tools: list[dict]) -> tuple[list[int], object, list,
                                                                                           list]:
    """(prompt ids, the canonical prompt, images, each image's (start, length) in the ids); ``tools`` (their
    function definitions) open the rendered prompt."""
    if kind == "chat":
        images: list[ImageInput] = []
        normal = parse_messages(body, images, patch)
        if tools:
            normal = [tools_message(tools), *normal]
        if images:
            ids, spans = splice(render_chat(normal), images)
            return ids, normal, images, spans
        return encode(render_chat(normal)), normal, [], []
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = encode(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 256
                                                     for t in prompt):
        ids = list(prompt)
    else:
        raise _bad("'prompt' must be a string, a one-string list, or a list of token ids in [0, 255]", "prompt")
    if not ids:
        raise _bad("'prompt' must not be empty", "prompt")
    return ids, ids, [], []


def _response_format(body: dict) -> tuple[str, str] | None:
    """(prefix, suffix) of the JSON answer ``response_format`` asks for (None: text); ApiError for a bad one."""
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return json_template({"type": "object"})
    inner = fmt.get("json_schema") if isinstance(fmt, dict) else None
    if kind == "json_schema" and isinstance(inner, dict) and isinstance(inner.get("schema"), dict):
        return json_template(inner["schema"])
    raise _bad("'response_format' must be {type: text | json_object} or {type: json_schema, json_schema: "
               "{name, schema}}", "response_format")


def escape(text: str) -> str:
    """``text`` as it stands inside a JSON string."""
    return json.dumps(text)[1:-1]


def parse_request(body: dict, kind: str, *, served_model: str, max_model_len: int,
                  default_max_tokens: int, image_patch: tuple[int, int, int] = (16, 2, 25)) -> ParsedRequest:
    """Validate a chat (``kind="chat"``) or completions body; raise ApiError naming the bad field. An image part
    of a chat message takes ``patches_of(width, height, patch size, merge)`` prompt tokens, an audio clip
    ``ceil(seconds x audio tokens a second)`` (``image_patch``: those three)."""
    model = body.get("model")
    if not isinstance(model, str):
        raise _bad("'model' is required and must be a string", "model")
    if model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist; this server serves `{served_model}`",
                       param="model", code="model_not_found")
    try:
        tools, tool_choice = parse_tools(body) if kind == "chat" else ([], None)
    except ToolsError as exc:
        raise _bad(str(exc), exc.param) from None
    prompt_ids, canonical_prompt, images, spans = _prompt(body, kind, image_patch, tools)
    max_tokens = _int(body, "max_tokens")
    if kind == "chat" and body.get("max_completion_tokens") is not None:
        max_tokens = _int(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = default_max_tokens
    if max_tokens < 1:
        raise _bad(f"'max_tokens' must be at least 1, got {max_tokens}", "max_tokens")
    if len(prompt_ids) + max_tokens > max_model_len:
        raise ApiError(400, f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) exceeds the "
                            f"model's context length of {max_model_len} tokens", param="max_tokens",
                       code="context_length_exceeded")
    n = _int(body, "n", 1)
    if n != 1:
        raise _bad("only n=1 is supported", "n")
    if kind == "completion" and _bool(body, "echo"):
        raise _bad("echo is not supported", "echo")
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p <= 0.0:
        raise _bad("'top_p' must be greater than 0", "top_p")
    seed = _int(body, "seed")
    if seed is not None and seed < 0:  # numpy seeds are non-negative; a negative one failed the model step (500)
        raise _bad(f"'seed' must be a non-negative integer, got {seed}", "seed")
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    elif not (isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) for s in stop)):
        raise _bad("'stop' must be a string or a list of at most 4 strings", "stop")
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("'stream_options' must be an object", "stream_options")
    include_usage = _bool(options or {}, "include_usage")
    _bool(body, "ignore_eos")  # accepted: this model never emits an end-of-sequence token
    _int(body, "min_tokens", 0)
    canonical = {"prompt": canonical_prompt, "max_tokens": max_tokens, "temperature": temperature,
                 "top_p": top_p, "seed": seed, "stop": stop}
    if images:
        canonical["images"] = [i.sha256 for i in images]
    call = plan_tool_call(tools, tool_choice, canonical_prompt, len(prompt_ids)) if tools else None
    if call is not None:
        canonical["tool_call"] = call.name
    json_format = _response_format(body) if kind == "chat" and call is None else None
    if json_format is not None:
        canonical["response_format"] = json_format
    return ParsedRequest(kind, model, prompt_ids, max_tokens, temperature, top_p, seed, stop,
                         stream, include_usage, canonical, canonical_prompt if kind == "chat" else None,
                         images, spans, call, json_format)


# ---- responses -----------------------------------------------------------------------------------

def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex


def usage(prompt_tokens: int, completion_tokens: int, details: dict | None = None) -> dict:
    """OpenAI's usage object; ``details``: what it adds (``prompt_tokens_details``, for a request with media)."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, **(details or {})}


def full_response(req: ParsedRequest, rid: str, text: str, finish_reason: str, prompt_tokens: int,
                  completion_tokens: int, details: dict | None = None) -> dict:
    """The non-streaming response body."""
    if req.kind == "chat" and req.tool_call is not None:
        call = req.tool_call
        function = {"name": call.name, "arguments": call.prefix + json.dumps(text)[1:-1] + call.suffix}
        message = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": "call_" + rid[-12:], "type": "function", "function": function}]}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls"}
        obj = "chat.completion"
    elif req.kind == "chat":
        if req.json_format is not None:
            text = req.json_format[0] + escape(text) + req.json_format[1]
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": req.model,
            "choices": [choice], "usage": usage(prompt_tokens, completion_tokens, details)}


def chunk(req: ParsedRequest, rid: str, created: int, text: str | None, *, first: bool = False,
          finish_reason: str | None = None) -> dict:
    """One streaming chunk. The first chat chunk carries the assistant role together with its text."""
    if req.kind == "chat":
        delta: dict = {}
        if first:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    out = {"id": rid, "object": obj, "created": created, "model": req.model, "choices": [choice]}
    if req.include_usage:
        out["usage"] = None
    return out


def tool_chunk(req: ParsedRequest, rid: str, created: int, arguments: str, *, first: bool = False,
               finish_reason: str | None = None) -> dict:
    """One streaming chunk of the answer's tool call: the first names it (with the role), each carries a fragment
    of its arguments."""
    call: dict = {"index": 0, "function": {"arguments": arguments}}
    delta: dict = {"tool_calls": [call]}
    if first:
        delta["role"] = "assistant"
        call.update(id="call_" + rid[-12:], type="function")
        call["function"] = {"name": req.tool_call.name, "arguments": arguments}
    out = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": req.model,
           "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
    if req.include_usage:
        out["usage"] = None
    return out


class ToolChunks:
    """The tool-call chunks of one stream: each generated token a fragment of the arguments (JSON-escaped), the
    first one after the arguments' opening, then their closing in a chunk of its own."""

    def __init__(self, req: ParsedRequest, rid: str, created: int):
        self.req, self.rid, self.created = req, rid, created

    def token(self, text: str, first: bool) -> bytes:
        piece = json.dumps(text)[1:-1]
        return sse(tool_chunk(self.req, self.rid, self.created, (self.req.tool_call.prefix if first else "") + piece,
                              first=first))

    def end(self, first: bool) -> bytes:
        """The closing of the arguments (with the opening too when no token came), and the finish reason."""
        call = self.req.tool_call
        return (sse(tool_chunk(self.req, self.rid, self.created, (call.prefix if first else "") + call.suffix,
                               first=first))
                + sse(chunk(self.req, self.rid, self.created, None, finish_reason="tool_calls")))


class ChunkTemplate:
    """Content chunks of one stream, pre-encoded: the same bytes as ``sse(chunk(...))`` for a content
    chunk after the first, built by splicing the JSON-encoded text between a fixed prefix and suffix
    instead of building and encoding a dict per token."""

    _MARK = "\x00latbench-text\x00"

    def __init__(self, req: ParsedRequest, rid: str, created: int):
        whole = sse(chunk(req, rid, created, self._MARK))
        self.prefix, _, self.suffix = whole.partition(json.dumps(self._MARK).encode())

    def encode(self, text: str) -> bytes:
        return self.prefix + json.dumps(text).encode() + self.suffix


def usage_chunk(req: ParsedRequest, rid: str, created: int, prompt_tokens: int, completion_tokens: int,
                details: dict | None = None) -> dict:
    """The extra chunk sent before ``[DONE]`` when ``stream_options.include_usage`` is set."""
    obj = "chat.completion.chunk" if req.kind == "chat" else "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": req.model, "choices": [],
            "usage": usage(prompt_tokens, completion_tokens, details)}


def sse(obj: dict) -> bytes:
    """Encode one server-sent event carrying ``obj`` as JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
