"""target.extra_body: merged into every request, a dataset line's own over it, latbench's fields refused with a
located error, ${ENV} expanded in string values and recorded as secret where it was placed."""

from __future__ import annotations

import json

import pytest

from loadgen.errors import ScenarioError
from loadgen.protocols.registry import make_protocol
from loadgen.scenario.loader import load_scenario, scenario_schema
from loadgen.scenario.model import Target, Workload
from loadgen.scenario.prompts import Prompt, make_prompt_source
from tests.helpers import write_scenario

OPTIONS = {"temperature": 0.2, "top_p": 0.9, "seed": 7, "min_tokens": 4, "ignore_eos": True,
           "chat_template_kwargs": {"enable_thinking": False}, "response_format": {"type": "json_object"},
           "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}


@pytest.mark.parametrize("api, stream", [("openai-chat", True), ("openai-completions", False), ("embeddings", False)])
def test_extra_body_is_merged_into_every_request(api, stream):
    target = Target(url="http://h/v1", api=api, stream=stream, extra_body=OPTIONS)
    proto = make_protocol(target, Workload(), "m")
    body = json.loads(proto.build(0, Prompt("hello", None, 2, 5)).body)
    assert {k: body[k] for k in OPTIONS} == OPTIONS and body["model"] == "m"
    if api != "embeddings":
        assert body["max_tokens"] == 5 and body["stream"] is stream
    # a dataset line's own options go over the target's, for that line's requests only
    line = json.loads(proto.build(1, Prompt("x", None, 1, 5, extra_body={"temperature": 1.5, "n": 2})).body)
    assert (line["temperature"], line["n"], line["top_p"]) == (1.5, 2, 0.9)


def test_dataset_line_options_reach_the_request(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"prompt": "a", "extra_body": {"seed": 1}}\n{"prompt": "b"}\n')
    src = make_prompt_source(Workload(dataset="d.jsonl"), 0, tmp_path)
    proto = make_protocol(Target(url="http://h/v1", extra_body={"seed": 9, "top_k": 3}), Workload(), "m")
    bodies = [json.loads(proto.build(i, src.get(i)).body) for i in range(2)]
    assert [(b["seed"], b["top_k"]) for b in bodies] == [(1, 3), (9, 3)]


@pytest.mark.parametrize("field, owner", [
    ("model", "target.model"), ("messages", "the workload's prompts"), ("prompt", "the workload's prompts"),
    ("stream", "target.stream"), ("stream_options", "target.stream"), ("max_tokens", "workload.max_tokens"),
])
def test_fields_latbench_sets_are_refused_with_their_line(tmp_path, field, owner):
    p = write_scenario(tmp_path, f"""
        name: o
        target:
          url: "http://127.0.0.1:9/v1"
          extra_body:
            temperature: 0
            {field}: 1
        load: {{phases: [{{name: a, duration: 1s, qps: 1}}]}}
    """)
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    (err,) = e.value.errors
    assert err.startswith(f"{p}:6:5: target.extra_body: '{field}' is set by latbench from {owner}")


def test_extra_body_is_not_for_plain_http():
    with pytest.raises(ValueError, match="for api: http write the body in request.body"):
        Target(url="http://h", api="http", extra_body={"a": 1})


def test_env_in_extra_body_is_expanded_and_its_placement_recorded(tmp_path):
    p = write_scenario(tmp_path, """
        name: o
        targets:
          - name: a
            url: "http://127.0.0.1:9/v1"
            extra_body:
              metadata: {user: "${LB_USER}", note: "id-${LB_ID}-x"}
              tags: ["${LB_ID}", 3]
              "${LB_KEY_NAME}": literal
        load: {phases: [{name: a, duration: 1s, qps: 1}]}
    """)
    env = {"LB_USER": "alice-secret", "LB_ID": "4711", "LB_KEY_NAME": "nope"}
    loaded = load_scenario(p, env=env)
    body = loaded.scenario.targets[0].extra_body
    assert body == {"metadata": {"user": "alice-secret", "note": "id-4711-x"}, "tags": ["4711", 3],
                    "${LB_KEY_NAME}": "literal"}  # keys are taken literally
    assert {"alice-secret", "4711"} <= set(loaded.secrets)
    assert "${LB_USER}" in json.dumps(loaded.redacted())  # what is written keeps the reference, never the value
    with pytest.raises(ScenarioError) as e:
        load_scenario(p, env={"LB_ID": "1"})
    assert f"{p}:7:24: targets[0].extra_body.metadata.user: environment variable LB_USER is not set" in e.value.errors


def test_the_scenario_schema_covers_tokenizer_datasets_and_request_options():
    schema = json.dumps(scenario_schema())
    for word in ("extra_body", "tokenizer", "min_input_tokens", "sample", "hf", "columns"):
        assert f'"{word}"' in schema
