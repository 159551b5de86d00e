"""Shared prefixes (workload.prefix): exact lengths with a real tokenizer, honest counts, the group of each
prompt fixed by its index, a system message for chat and an opening paragraph for text APIs, datasets too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.errors import ScenarioError
from loadgen.protocols.registry import make_protocol
from loadgen.protocols.reqcache import RequestCache
from loadgen.protocols.workload import make_workload
from loadgen.scenario.loader import load_scenario
from loadgen.scenario.model import Prefix, Scenario, Target, Workload
from loadgen.scenario.prefix import SEPARATOR, PrefixedPrompts, prefix_texts, with_prefix
from loadgen.scenario.prompts import make_prompt_source
from loadgen.scenario.tokenizer import load_tokenizer
from tests.helpers import write_scenario

DIST = {"mean": 40, "stddev": 30, "min": 1, "max": 200}


def prefixed(tok=None, chat=False, tokens=64, groups=4, distinct=50, seed=0, **workload) -> PrefixedPrompts:
    wl = Workload(prompts={"input_tokens": DIST, "output_tokens": 8, "distinct": distinct},
                  prefix={"tokens": tokens, "groups": groups}, **workload)
    return with_prefix(make_prompt_source(wl, seed, Path("."), tok, chat), wl, seed, tok, chat)


def test_prefixes_have_exactly_the_requested_tokens(bpe_dir):
    tok = load_tokenizer(str(bpe_dir), Path("."))
    for n in (1, 17, 512):
        texts = prefix_texts(Prefix(tokens=n, groups=8), 3, tok)
        assert [tok.count(t) for t in texts] == [n] * 8
        assert len(set(texts)) == 8 and len({t.split()[0] + t[:20] for t in texts}) == 8  # distinct openings


def test_text_prompts_count_the_joined_text_with_the_tokenizer(bpe_dir):
    tok = load_tokenizer(str(bpe_dir), Path("."))
    src = prefixed(tok, chat=False, tokens=128)
    base = make_prompt_source(Workload(prompts={"input_tokens": DIST, "output_tokens": 8, "distinct": 50}), 0,
                              Path("."), tok)
    texts = prefix_texts(Prefix(tokens=128, groups=4), 0, tok)
    for i in range(50):
        p, b = src.get(i), base.get(i)
        assert p.text == texts[i % 4] + SEPARATOR + b.text and p.messages is None
        assert p.input_tokens == tok.count(p.text) >= 128 + b.input_tokens  # the prefix counted, exactly
        assert (p.added_tokens, p.counted_by, p.max_tokens) == (b.added_tokens, "tokenizer", b.max_tokens)


def test_chat_prompts_open_with_a_system_message_counted_exactly(bpe_dir):
    tok = load_tokenizer(str(bpe_dir), Path("."))
    src = prefixed(tok, chat=True, tokens=96, groups=3, distinct=30)
    for i in range(30):
        p = src.get(i)
        system, user = p.messages
        assert system["role"] == "system" and user["role"] == "user"
        assert tok.count(system["content"]) == 96
        assert p.input_tokens == 96 + tok.count(user["content"])  # content only, as for every chat prompt
        assert p.added_tokens == tok.chat_tokens(p.messages) - p.input_tokens  # the template's, system included
        assert 10 <= p.added_tokens <= 40
    body = json.loads(make_protocol(Target(url="http://h/v1"), Workload(), "m").build(0, src.get(0)).body)
    assert body["messages"] == src.get(0).messages


def test_the_group_follows_from_the_prompt_index():
    src = prefixed(groups=4, distinct=10)
    texts = prefix_texts(Prefix(tokens=64, groups=4), 0, None)
    for seq in range(40):
        p = src.get(seq)
        assert src.group(seq) == (seq % 10) % 4 and p.text.startswith(texts[src.group(seq)] + SEPARATOR)
        assert p == src.get(seq + 10)  # a repeated prompt repeats its prefix
    # same seed, same prefixes; another seed, others; the prompts' own parts are those without a prefix
    assert [src.get(i).text for i in range(10)] == [prefixed(groups=4, distinct=10).get(i).text for i in range(10)]
    assert prefix_texts(Prefix(tokens=64, groups=4), 1, None) != texts
    base = make_prompt_source(Workload(prompts={"input_tokens": DIST, "output_tokens": 8, "distinct": 10}), 0,
                              Path("."))
    assert [src.get(i).text.split(SEPARATOR, 1)[1] for i in range(10)] == [base.get(i).text for i in range(10)]


def test_without_a_tokenizer_the_prefix_is_approximated():
    src = prefixed(tokens=100, groups=2)
    base = make_prompt_source(Workload(prompts={"input_tokens": DIST, "output_tokens": 8, "distinct": 50}), 0,
                              Path("."))
    for i in range(50):
        p = src.get(i)
        head = p.text.split(SEPARATOR, 1)[0]
        assert 400 - 5 <= len(head) <= 400  # 4 characters a token, cut at a word
        assert (p.input_tokens, p.counted_by, p.added_tokens) == (100 + base.get(i).input_tokens, "approximation", -1)


def test_dataset_prompts_get_the_prefix_too(tmp_path, bpe_dir):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why is the sky blue?"}]
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "hello there"}) + "\n" + json.dumps({"messages": msgs}))
    tok = load_tokenizer(str(bpe_dir), Path("."))
    wl = Workload(dataset="d.jsonl", prefix={"tokens": 32, "groups": 2})
    for chat in (True, False):
        base = make_prompt_source(wl, 0, tmp_path, tok, chat)
        src = with_prefix(base, wl, 0, tok, chat)
        a, b = src.get(0), src.get(1)
        assert b.messages[0]["role"] == "system" and b.messages[1:] == msgs  # the dataset's system message follows
        assert tok.count(a.text.split(SEPARATOR, 1)[0]) == tok.count(b.messages[0]["content"]) == 32
        if chat:
            assert a.messages[1] == {"role": "user", "content": "hello there"}
            assert (a.input_tokens, b.input_tokens) == (32 + base.get(0).input_tokens, 32 + base.get(1).input_tokens)
        else:
            assert a.messages is None and a.text.endswith(SEPARATOR + "hello there")
            assert (a.input_tokens, b.input_tokens) == (tok.count(a.text), tok.count(b.text))


def test_requests_are_still_built_once_per_prompt():
    target = Target(url="http://127.0.0.1:9/v1", api="openai-completions")
    wl = Workload(prompts={"input_tokens": 8, "output_tokens": 4, "distinct": 6}, prefix={"tokens": 20, "groups": 3})
    protocol, prompts = make_workload(target, wl, "m", None, 0, Path("."))
    assert isinstance(prompts, PrefixedPrompts)
    cache = RequestCache(protocol, prompts)
    assert cache.get(1) is cache.get(7)  # request caching by prompt seq % distinct holds
    assert json.loads(cache.get(1).body)["prompt"] == prompts.get(1).text
    # without a prefix nothing changes
    _, plain = make_workload(target, Workload(prompts={"distinct": 6}), "m", None, 0, Path("."))
    assert not isinstance(plain, PrefixedPrompts)


def test_bad_prefixes_are_located_errors(tmp_path):
    path = write_scenario(tmp_path, """
name: p
target: {reference: {}}
workload:
  prompts: {distinct: 4}
  prefix: {tokens: 0, groups: 8}
load: {phases: [{name: a, duration: 1s, qps: 1}]}
""")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path, env={})
    assert "prefix.tokens" in str(e.value) and "s.yaml:6" in str(e.value)
    path.write_text(path.read_text().replace("tokens: 0", "tokens: 16"))
    with pytest.raises(ScenarioError, match="prefix.groups .8. exceeds prompts.distinct .4."):
        load_scenario(path, env={})
    path.write_text(path.read_text().replace("groups: 8}", "groups: 2}\n  conversations: {turns: 2}"))
    with pytest.raises(ScenarioError, match="prefix: not with conversations"):
        load_scenario(path, env={})


def test_schema_documents_the_prefix():
    schema = Scenario.model_json_schema()
    fields = schema["$defs"]["Prefix"]["properties"]
    assert "exact with workload.tokenizer" in fields["tokens"]["description"]
    assert "i % groups" in fields["groups"]["description"]
    assert "shared system prompts" in schema["$defs"]["Workload"]["properties"]["prefix"]["description"]
