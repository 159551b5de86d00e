"""Structured output: response_format passed through as written; each answer's JSON validity and schema match
recorded per request (streamed and not) and as rates; an invalid answer is a result, not an error, unless an SLO
says so; a response_format whose schema is not a JSON Schema is an error at its line."""

from __future__ import annotations

import json
import re
import threading

import pytest
from aiohttp import web

from loadgen.errors import ScenarioError
from loadgen.scenario.loader import load_scenario
from tests.helpers import run, write_scenario

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ANSWERS = ['{"city": "Paris"}', '{"town": 1}', "not json"]  # valid; JSON but not the schema's; not JSON
_ID = re.compile(r"req-(\d+)")


class AnswerServer:
    """Answers prompt ``req-N`` with ``ANSWERS[N % 3]``, in two chunks when streamed; keeps each body's
    response_format."""

    def __init__(self):
        self.formats: list = []
        self._ready = threading.Event()

    async def chat(self, request):
        body = await request.json()
        self.formats.append(body.get("response_format"))
        text = ANSWERS[int(_ID.search(body["messages"][0]["content"]).group(1)) % 3]
        if not body.get("stream"):
            return web.json_response({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                                      "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in (text[:4], text[4:]):
            chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def __enter__(self):
        import asyncio

        def serve():
            self.loop = asyncio.new_event_loop()
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self.chat)
            self.runner = web.AppRunner(app, access_log=None)
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            self._ready.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self.runner.cleanup())

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _scenario(port: int, stream: bool, fmt: str, slo: str = "[]") -> str:
    return f"""
        name: structured
        target: {{url: "http://127.0.0.1:{port}/v1", model: m, stream: {str(stream).lower()}}}
        workload:
          dataset: prompts.jsonl
          max_tokens: 4
          response_format: {fmt}
        load:
          arrival: constant
          phases: [{{name: main, duration: 1s, qps: 20, max_requests: 6}}]
        slo: {slo}
        """


@pytest.mark.parametrize("stream", [True, False])
def test_each_answer_is_checked_and_an_invalid_one_is_a_result(tmp_path, stream):
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": f"req-{i}"}) + "\n" for i in range(6)))
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}
    with AnswerServer() as srv:
        result, summary, frame = run(tmp_path, _scenario(srv.port, stream, json.dumps(fmt),
                                                          '["json_valid_rate > 90%"]'))
    assert len(srv.formats) == 7 and all(f == fmt for f in srv.formats)  # as written (the pre-flight's too)
    rows = frame.sort_values("seq")
    assert (rows["error"] == "").all()  # an invalid answer is not an error
    assert list(rows["json_valid"]) == [1, 1, 0] * 2 and list(rows["schema_valid"]) == [1, 0, 0] * 2
    overall = summary["overall"]
    assert overall["json_valid_rate"] == pytest.approx(4 / 6) and overall["schema_valid_rate"] == pytest.approx(2 / 6)
    assert overall["structured"]["checked"] == 6
    assert result.exit_code == 1  # ...unless an SLO says so
    (slo,) = summary["slo"]
    assert slo["passed"] is False and slo["value"] == pytest.approx(4 / 6)


def test_a_json_object_format_checks_json_only_and_a_bad_schema_is_refused(tmp_path):
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": f"req-{i}"}) + "\n" for i in range(6)))
    with AnswerServer() as srv:
        _, summary, frame = run(tmp_path, _scenario(srv.port, True, "{type: json_object}"))
    assert list(frame.sort_values("seq")["schema_valid"]) == [-1] * 6
    assert summary["overall"]["schema_valid_rate"] is None and summary["slo"] == []
    bad = _scenario(1, True, "{type: json_schema, json_schema: {name: a, schema: {type: obj}}}")
    with pytest.raises(ScenarioError) as exc:
        load_scenario(write_scenario(tmp_path, bad, "bad.yaml"), env={})
    (err,) = exc.value.errors
    assert "bad.yaml:7:53: workload.response_format.json_schema: schema: not a JSON Schema: type: 'obj'" \
        in err, err
