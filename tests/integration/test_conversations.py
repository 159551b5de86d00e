"""Conversations against a real server that answers every request differently: each turn resends the
server's own answers, is due at the last turn's end plus the think time, and counts from then."""

import json
import subprocess
import sys

import numpy as np
import pytest

from loadgen.analysis.metrics import records_frame
from loadgen.protocols.conversation import TURN_SEQ_BASE
from loadgen.records.schema import read_records
from loadgen.scenario.model import MAX_TURNS
from reports import write_outputs
from tests.helpers import ROOT, run, write_scenario
from tests.servers import ConversationServer

THINK = 0.15


def _check_histories(srv: ConversationServer, chat: bool = True) -> int:
    """Every request's history holds exactly the answers the server gave to the requests before it in its
    session; returns how many requests had a history."""
    answered = {}  # a request's messages (as JSON) -> the answer the server gave it
    for body, answer in zip(srv.bodies, srv.answers):
        answered[json.dumps(body["messages"])] = answer
    later = 0
    for body in srv.bodies:
        msgs = body["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant"] * (len(msgs) // 2) + ["user"]
        for k in range(1, len(msgs), 2):  # the answer at k is the one the server gave to msgs[:k]
            assert msgs[k]["content"] == answered[json.dumps(msgs[:k])]
            later += 1
    return later


@pytest.mark.parametrize("transport, stream", [("lean", True), ("aiohttp", False)])
def test_each_turn_resends_the_servers_answers_and_is_due_after_the_think_time(tmp_path, transport, stream):
    srv = ConversationServer(delay=0.02).start()
    try:
        res, summary, df = run(tmp_path, f"""
        name: conv
        target: {{url: "{srv.url}", model: known, stream: {str(stream).lower()}, transport: {transport}}}
        workload:
          prompts: {{input_tokens: 8, output_tokens: 5, distinct: 50}}
          conversations: {{turns: 3, think_time: {THINK}s}}
        load: {{arrival: constant, phases: [{{name: a, duration: 2s, qps: 5}}]}}
        """)
    finally:
        srv.stop()
    assert res.exit_code == 0, res.reasons
    assert _check_histories(srv) > 0
    df = df.sort_values(["session", "turn"])
    assert (df["error"] == "").all() and len(df) == len(srv.bodies)
    assert sorted(df["session"].unique()) == list(range(10))  # one session per arrival, numbered by it
    first = df[df["turn"] == 0]
    assert np.allclose(first["scheduled"], np.arange(10) * 0.2)  # sessions start on the open-loop schedule
    later = df[df["turn"] > 0].merge(df.assign(turn=df["turn"] + 1)[["session", "turn", "done"]],
                                     on=["session", "turn"], suffixes=("", "_before"))
    assert len(later) == len(df) - 10
    assert np.allclose(later["scheduled"] - later["done_before"], THINK, atol=1e-9)  # due: end + think time
    assert (later["sent"] >= later["scheduled"]).all() and (later["sent"] - later["scheduled"]).max() < 0.05
    assert (later["seq"] == TURN_SEQ_BASE + later["session"] * MAX_TURNS + later["turn"]).all()
    # input tokens: the whole history, counted (8 a user turn, 5 an answer by the server's usage)
    assert (df["input_tokens"] == 8 + df["turn"] * 13).all()
    turns = summary["conversations"]["by_turn"]
    assert [t["turn"] for t in turns] == [0, 1, 2] and turns[0]["count"] == 10
    assert summary["conversations"]["sessions"] == 10
    write_outputs(res.rundir.path)
    html = (res.rundir.path / "report.html").read_text()
    assert "Conversations: what the history costs, turn by turn" in html and "By turn (conversations)" in html
    assert html.count("conversations/by_turn/2/ttft/percentiles/p50/value") >= 1


def test_a_failed_turn_ends_its_session(tmp_path):
    srv = ConversationServer(delay=0.01, fail_after=1).start()  # every second turn fails
    try:
        res, summary, df = run(tmp_path, f"""
        name: conv
        target: {{url: "{srv.url}", model: known}}
        workload:
          conversations: {{turns: 4, think_time: 50ms}}
        load: {{arrival: constant, phases: [{{name: a, duration: 1s, qps: 5}}]}}
        """)
    finally:
        srv.stop()
    assert sorted(df["turn"].unique()) == [0, 1]  # no third turn: the second failed
    assert (df.loc[df["turn"] == 1, "error"] == "http_5xx").all() and (df.loc[df["turn"] == 0, "error"] == "").all()
    assert summary["conversations"]["ended_by_failure"] == 5


def test_conversations_on_completions_send_the_history_as_text(tmp_path):
    srv = ConversationServer(delay=0.01).start()
    try:
        res, _, df = run(tmp_path, f"""
        name: conv
        target: {{url: "{srv.url}", model: known, api: openai-completions}}
        workload:
          conversations: {{turns: 2}}
        load: {{arrival: constant, phases: [{{name: a, duration: 1s, qps: 3}}]}}
        """)
    finally:
        srv.stop()
    assert res.exit_code == 0, res.reasons
    prompts = [b["prompt"] for b in srv.bodies]
    seconds = [p for p in prompts if p.count("\n\n") == 2]
    assert len(seconds) == 3
    for p in seconds:  # user 1, the server's answer to it, user 2
        user1, answer, _ = p.split("\n\n")
        assert srv.answers[prompts.index(user1)] == answer


@pytest.mark.alone  # several generator processes on two cores: the other worker would contend
@pytest.mark.parametrize("flags", [["--processes", "2"], ["--engine", "locust", "--workers", "2"]],
                         ids=["processes", "locust"])
def test_sessions_stay_with_the_sender_that_started_them(tmp_path, flags):
    srv = ConversationServer(delay=0.01).start()
    try:
        path = write_scenario(tmp_path, f"""
        name: conv
        target: {{url: "{srv.url}", model: known}}
        workload:
          conversations: {{turns: 3, think_time: 50ms}}
        load: {{arrival: constant, phases: [{{name: a, duration: 2s, qps: 6}}]}}
        """)
        r = subprocess.run([sys.executable, "-m", "loadgen.cli", "run", str(path), "--out", str(tmp_path / "runs"),
                            "--quiet", "--no-report", *flags], cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        srv.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    (rd,) = (tmp_path / "runs").iterdir()
    df = records_frame(read_records(rd / "target" / "requests.parquet"))
    assert _check_histories(srv) == 2 * 12 + 1 * 12  # 12 sessions of 3 turns: turns 2 and 3 resend 1 and 2 answers
    assert len(df) == 36 and (df["error"] == "").all() and sorted(df["session"].unique()) == list(range(12))
    assert df.groupby("session")["worker"].nunique().max() == 1 and df["worker"].nunique() == 2
    later = df[df["turn"] > 0].merge(df.assign(turn=df["turn"] + 1)[["session", "turn", "done"]],
                                     on=["session", "turn"], suffixes=("", "_before"))
    assert np.allclose(later["scheduled"] - later["done_before"], 0.05, atol=1e-9)


@pytest.mark.alone  # timing-sensitive (conftest.py): the sessions held
@pytest.mark.parametrize("transport", ["lean", "aiohttp"])
def test_closed_loop_workers_hold_one_session_after_another(tmp_path, transport):
    srv = ConversationServer(delay=0.02).start()
    try:
        res, summary, df = run(tmp_path, f"""
        name: conv
        target: {{url: "{srv.url}", model: known, transport: {transport}}}
        workload:
          conversations: {{turns: 3, think_time: 30ms}}
        load: {{phases: [{{name: a, duration: 1.5s, concurrency: 2}}]}}
        """)
    finally:
        srv.stop()
    assert res.exit_code == 0, res.reasons
    assert _check_histories(srv) > 0 and (df["error"] == "").all()
    df = df.sort_values("scheduled")
    in_use = 0
    events = sorted([(t, 1) for t in df.loc[df["turn"] == 0, "scheduled"]]
                    + [(t, -1) for t in df.groupby("session")["done"].max()])
    for _, d in events:  # never more sessions open at once than workers
        in_use += d
        assert in_use <= 2
    later = df[df["turn"] > 0].merge(df.assign(turn=df["turn"] + 1)[["session", "turn", "done"]],
                                     on=["session", "turn"], suffixes=("", "_before"))
    assert len(later) > 0 and np.allclose(later["scheduled"] - later["done_before"], 0.03, atol=1e-9)
    assert summary["conversations"]["sessions"] >= 6
    cl = summary["phases"]["a"]["closed_loop"]  # a user holds a session while it thinks: judged by sessions
    assert cl["measure"] == "sessions" and cl["held"] == cl["sessions_in_progress"] >= 0.95 * 2 and not cl["limited"]
    assert cl["requests_in_flight"] < 0.8 * 2 and sorted(df["user"].unique()) == [0, 1]
