"""Sessions of ``workload.conversations`` during a run: each turn's request, with the server's answers resent.

**Timing** (every engine alike). A session *starts* on the load's schedule: an open-loop phase's arrival
is a session's first turn, due at its arrival time; a closed-loop worker starts a session when its last one
ended. Turn ``n+1`` is due at turn ``n``'s end (``done``) plus the conversation's think time, and its latency
counts from that due time (``scheduled``), so a generator that sends it late shows as send lag, never as
a shorter latency. A turn belongs to the phase of its due time, as every request does; a turn due after the
last phase has ended is not sent (the engine counts it). A session ends after its last turn, or at a turn
that did not succeed (an error, a timeout, an abort): its user got no answer to go on with.

**Requests.** Turn ``n`` sends the history (user turn 1, the server's answer 1, ..., user turn ``n``) as chat
``messages`` (``openai-chat``), or as that text, blank-line separated (``openai-completions``). A session
stays with the sender that started it (one process, one Locust worker): its history never travels. Its
requests are built per turn (no request cache: they hold answers).

**Tool calls** (``workload.tools``, chat): an answer that called tools is answered at once with a tool result
per call (``tools.result``, or ``result_tokens`` of generated text), sent as the next request of the same user
turn; the model's answer to the results ends the turn (at most ``tools.max_rounds`` tool rounds in a row).

**Numbers.** Turn 0 is the session's own ``seq`` (its arrival's); turn ``n > 0`` has
``seq = TURN_SEQ_BASE + session * MAX_TURNS + n``, so every request of a run keeps a unique ``seq``; records
carry ``session`` and ``turn``. ``input_tokens`` of a turn counts the whole history's content: the user turns
as the conversation counted them, each answer by the server's usage (or the tokenizer) when known, else
approximated; ``added_tokens`` is the first turn's for chat, a plain prompt's special tokens for text.
"""

from __future__ import annotations

import json

from loadgen.protocols.base import ApiProtocol, Request
from loadgen.records.schema import Outcome
from loadgen.scenario.conversations import Conversation, ConversationSource
from loadgen.scenario.media_model import Tools
from loadgen.scenario.model import MAX_TURNS
from loadgen.scenario.prompts import CHARS_PER_TOKEN, WORDS, Prompt, approx_tokens

__all__ = ["TURN_SEQ_BASE", "Session", "Sessions", "turn_seq"]

#: ``seq`` of turn n > 0 of session s: TURN_SEQ_BASE + s * MAX_TURNS + n (above every open and closed seq).
TURN_SEQ_BASE = 1 << 52

_COUNTED = ("usage", "tokenizer")


def turn_seq(session: int, turn: int) -> int:
    """The ``seq`` of a session's turn (see the module's docstring)."""
    return session if turn == 0 else TURN_SEQ_BASE + session * MAX_TURNS + turn


class Session:
    """One session in flight: its conversation, the next request, and the history so far. ``turn`` counts the
    session's requests (its records' ``turn``); ``user_turn`` the conversation's user turns: they differ once a
    tool call was answered with a tool result (a request of its own within the same user turn)."""

    __slots__ = ("id", "conv", "turn", "user_turn", "history", "tokens", "by", "rounds")

    def __init__(self, sid: int, conv: Conversation):
        self.id = sid
        self.conv = conv
        self.turn = 0
        self.user_turn = 0
        self.history: list[dict] = []  # messages sent and answered so far
        self.tokens = 0  # their content in tokens
        self.by = conv.counted_by  # "approximation" once any part was approximated
        self.rounds = 0  # tool calls answered in a row within the current user turn (0: its user message is next)

    @property
    def seq(self) -> int:
        return turn_seq(self.id, self.turn)


class Sessions:
    """What a sender needs for conversations: starts sessions, builds their turns, follows their answers."""

    def __init__(self, protocol: ApiProtocol, source: ConversationSource, chat: bool, tools: Tools | None = None):
        self.protocol, self.source, self.chat = protocol, source, chat
        self.cut = 0  # turns that were due after the run's last phase (not sent)
        self.tools = tools  # workload.tools: a tool call is answered with a tool result (chat only)
        if tools is not None:
            self.result = tools.result if tools.result is not None else tool_result_text(tools.result_tokens)
            self.result_tokens = approx_tokens(self.result)

    def start(self, sid: int) -> Session:
        return Session(sid, self.source.get(sid))

    def request(self, s: Session) -> Request:
        """The request of the session's current turn: the history, then the user's turn (after a tool call: the
        history, which ends with the tool results)."""
        turn = s.conv.turns[s.user_turn]
        messages = s.history + [{"role": "user", "content": turn.text}] if not s.rounds else s.history
        text = "\n\n".join(m["content"] or "" for m in messages)
        added = s.conv.added_tokens if (s.turn == 0 or not self.chat) else -1
        own = turn.tokens if not s.rounds else 0
        prompt = Prompt(text, messages if self.chat else None, s.tokens + own, turn.max_tokens, added,
                        s.by, s.conv.extra_body)
        return self.protocol.build(s.seq, prompt)

    def answered(self, s: Session, out: Outcome) -> float | None:
        """After the current request ended: the think time before the next one, or None when the session is over
        (that was its last turn, or it did not succeed). The answer joins the history; a tool call is answered
        with a tool result at once (no think time), within the same user turn, at most ``tools.max_rounds`` in a
        row."""
        if out.error or out.answer is None:
            return None
        calls = out.tool_calls.calls if out.tool_calls is not None else None
        if calls and self.chat and self.tools is not None and s.rounds < self.tools.max_rounds:
            if s.turn + 1 >= MAX_TURNS:
                return None
            self._add_answer(s, out, calls)
            s.history = s.history + [{"role": "tool", "tool_call_id": cid, "content": self.result}
                                     for cid, _, _ in calls.values()]
            s.tokens += self.result_tokens * len(calls)
            s.rounds += 1
            s.turn += 1
            return 0.0
        if s.user_turn + 1 >= len(s.conv.turns) or s.turn + 1 >= MAX_TURNS:
            return None
        self._add_answer(s, out, calls)
        s.rounds = 0
        s.user_turn += 1
        s.turn += 1
        return s.conv.turns[s.user_turn].think

    def _add_answer(self, s: Session, out: Outcome, calls: dict | None) -> None:
        """The user's message (unless a tool round already added it) and the answer join the history."""
        turn = s.conv.turns[s.user_turn]
        own = [] if s.rounds else [{"role": "user", "content": turn.text}]
        if calls:
            answer = {"role": "assistant", "content": out.answer or None,
                      "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                                     for cid, name, args in calls.values()]}
            tokens = out.tool_calls.tokens
        else:
            answer = {"role": "assistant", "content": out.answer}
            tokens = 0
        s.history = s.history + own + [answer]
        mine = 0 if s.rounds else turn.tokens
        if out.output_tokens_source in _COUNTED:
            s.tokens += mine + out.output_tokens
        else:
            s.tokens += mine + approx_tokens(out.answer) + tokens
            s.by = "approximation"


def tool_result_text(tokens: int) -> str:
    """A generated tool result of about ``tokens`` tokens: a JSON object whose one value is words."""
    words = " ".join(WORDS[(7 * i) % len(WORDS)] for i in range(tokens))
    return json.dumps({"result": words[: tokens * CHARS_PER_TOKEN - 14]})
