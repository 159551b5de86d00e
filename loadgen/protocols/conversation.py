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

**Numbers.** Turn 0 is the session's own ``seq`` (its arrival's); turn ``n > 0`` has
``seq = TURN_SEQ_BASE + session * MAX_TURNS + n``, so every request of a run keeps a unique ``seq``; records
carry ``session`` and ``turn``. ``input_tokens`` of a turn counts the whole history's content: the user turns
as the conversation counted them, each answer by the server's usage (or the tokenizer) when known, else
approximated; ``added_tokens`` is the first turn's for chat, a plain prompt's special tokens for text.
"""

from __future__ import annotations

from loadgen.protocols.base import ApiProtocol, Request
from loadgen.records.schema import Outcome
from loadgen.scenario.conversations import Conversation, ConversationSource
from loadgen.scenario.model import MAX_TURNS
from loadgen.scenario.prompts import Prompt, approx_tokens

__all__ = ["TURN_SEQ_BASE", "Session", "Sessions", "turn_seq"]

#: ``seq`` of turn n > 0 of session s: TURN_SEQ_BASE + s * MAX_TURNS + n (above every open and closed seq).
TURN_SEQ_BASE = 1 << 52

_COUNTED = ("usage", "tokenizer")


def turn_seq(session: int, turn: int) -> int:
    """The ``seq`` of a session's turn (see the module's docstring)."""
    return session if turn == 0 else TURN_SEQ_BASE + session * MAX_TURNS + turn


class Session:
    """One session in flight: its conversation, the next turn, and the history so far."""

    __slots__ = ("id", "conv", "turn", "history", "tokens", "by")

    def __init__(self, sid: int, conv: Conversation):
        self.id = sid
        self.conv = conv
        self.turn = 0
        self.history: list[dict] = []  # messages sent and answered so far
        self.tokens = 0  # their content in tokens
        self.by = conv.counted_by  # "approximation" once any part was approximated

    @property
    def seq(self) -> int:
        return turn_seq(self.id, self.turn)


class Sessions:
    """What a sender needs for conversations: starts sessions, builds their turns, follows their answers."""

    def __init__(self, protocol: ApiProtocol, source: ConversationSource, chat: bool):
        self.protocol, self.source, self.chat = protocol, source, chat
        self.cut = 0  # turns that were due after the run's last phase (not sent)

    def start(self, sid: int) -> Session:
        return Session(sid, self.source.get(sid))

    def request(self, s: Session) -> Request:
        """The request of the session's current turn: the history, then the user's turn."""
        turn = s.conv.turns[s.turn]
        messages = s.history + [{"role": "user", "content": turn.text}]
        text = "\n\n".join(m["content"] for m in messages)
        added = s.conv.added_tokens if (s.turn == 0 or not self.chat) else -1
        prompt = Prompt(text, messages if self.chat else None, s.tokens + turn.tokens, turn.max_tokens, added,
                        s.by, s.conv.extra_body)
        return self.protocol.build(s.seq, prompt)

    def answered(self, s: Session, out: Outcome) -> float | None:
        """After the current turn ended: the think time before the next one, or None when the session is over
        (that was its last turn, or it did not succeed). The answer joins the history."""
        if out.error or out.answer is None or s.turn + 1 >= len(s.conv.turns):
            return None
        turn = s.conv.turns[s.turn]
        s.history = s.history + [{"role": "user", "content": turn.text},
                                 {"role": "assistant", "content": out.answer}]
        if out.output_tokens_source in _COUNTED:
            s.tokens += turn.tokens + out.output_tokens
        else:
            s.tokens += turn.tokens + approx_tokens(out.answer)
            s.by = "approximation"
        s.turn += 1
        return s.conv.turns[s.turn].think
