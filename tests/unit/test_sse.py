"""The SSE parser: same events however the stream is split, every line ending, comments, error events."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.protocols.sse import SSEParser


def feed_all(chunks) -> tuple[list[bytes], SSEParser]:
    p = SSEParser()
    events: list[bytes] = []
    for c in chunks:
        events.extend(p.feed(c))
    return events, p


def split_at(data: bytes, points) -> list[bytes]:
    cuts = sorted(set(points))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


# An OpenAI-style stream with everything a real one may hold: CRLF endings, a keep-alive comment,
# an id and retry field, multi-byte UTF-8, a multi-line event and [DONE].
STREAM = (
    b": keep-alive\r\n\r\n"
    b"retry: 3000\r\n"
    b'id: 1\r\ndata: {"choices":[{"delta":{"role":"assistant"}}]}\r\n\r\n'
    + 'data: {"choices":[{"delta":{"content":"h\u00e9llo \u4e16\u754c \U0001f600"}}]}\r\n\r\n'.encode()
    + b"data: line one\r\ndata: line two\r\n\r\n"
    b"data:no-space\r\n\r\n"
    b"data: [DONE]\r\n\r\n"
)
EXPECTED = [
    b'{"choices":[{"delta":{"role":"assistant"}}]}',
    '{"choices":[{"delta":{"content":"h\u00e9llo \u4e16\u754c \U0001f600"}}]}'.encode(),
    b"line one\nline two",
    b"no-space",
    b"[DONE]",
]


@pytest.mark.parametrize("ending", [b"\r\n", b"\n", b"\r"], ids=["crlf", "lf", "cr"])
def test_every_line_ending(ending):
    data = STREAM.replace(b"\r\n", ending)
    assert feed_all([data])[0] == EXPECTED


@pytest.mark.parametrize("ending", [b"\r\n", b"\n", b"\r"], ids=["crlf", "lf", "cr"])
def test_split_at_every_single_byte_boundary(ending):
    data = STREAM.replace(b"\r\n", ending)
    for i in range(len(data) + 1):
        assert feed_all([data[:i], data[i:]])[0] == EXPECTED, i


def test_one_byte_at_a_time():
    assert feed_all([STREAM[i : i + 1] for i in range(len(STREAM))])[0] == EXPECTED


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40), st.sampled_from([b"\r\n", b"\n", b"\r"]))
def test_random_splits_give_the_same_events(points, ending):
    data = STREAM.replace(b"\r\n", ending)
    assert feed_all(split_at(data, points))[0] == EXPECTED


# Random streams from a small grammar, checked against what the grammar says they hold.
_text = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)


@st.composite
def streams(draw):
    out, expected = [], []
    for _ in range(draw(st.integers(0, 6))):
        eol = lambda: draw(st.sampled_from(["\r\n", "\n", "\r"]))  # noqa: E731
        datas = draw(st.lists(_text, max_size=3))
        for kind in draw(st.lists(st.sampled_from(["comment", "id", "retry", "event"]), max_size=2)):
            out.append({"comment": ": ping", "id": "id: 7", "retry": "retry: 10", "event": "event: message"}[kind]
                       + eol())
        for d in datas:
            sep = " " if d.startswith(" ") else draw(st.sampled_from(["", " "]))  # one leading space is dropped
            out.append("data:" + sep + d + eol())
        out.append(eol())
        if datas:
            expected.append("\n".join(datas).encode())
    # A CR line end followed by an LF one would read as one CRLF: write that LF as CRLF instead.
    text = "".join(o if i == 0 or not o.startswith("\n") or not out[i - 1].endswith("\r") else "\r" + o
                   for i, o in enumerate(out))
    return text.encode(), expected


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(min_value=0, max_value=400), max_size=30))
def test_generated_streams(stream, points):
    data, expected = stream
    assert feed_all(split_at(data, [p for p in points if p <= len(data)]))[0] == expected


def test_many_events_in_one_read():
    data = b"".join(b"data: %d\n\n" % i for i in range(1000))
    assert feed_all([data])[0] == [str(i).encode() for i in range(1000)]


def test_data_split_across_many_reads():
    payload = b"x" * 100_000
    data = b"data: " + payload + b"\n\n"
    chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    events, p = feed_all(chunks)
    assert events == [payload]
    assert not p.pending


def test_comments_and_fields_alone_give_no_events():
    events, p = feed_all([b": keep-alive\n\n: another\nid: 3\nretry: 5\n\n"])
    assert events == [] and p.error is None


def test_error_event_is_remembered():
    events, p = feed_all([b'event: error\ndata: {"message":"overloaded"}\n\n'])
    assert p.error == b'{"message":"overloaded"}'
    assert events == [b'{"message":"overloaded"}']


def test_unterminated_event_is_not_returned_and_is_pending():
    events, p = feed_all([b"data: 1\n\ndata: 2\n"])
    assert events == [b"1"]
    assert p.pending


def test_leading_bom_is_ignored_even_when_split():
    events, _ = feed_all([b"\xef", b"\xbb\xbfdata: a\n\n"])
    assert events == [b"a"]


def test_data_field_without_colon_is_an_empty_line():
    assert feed_all([b"data\ndata: b\n\n"])[0] == [b"\nb"]


# Whole events with LF line ends, read after the first read: the short path of SSEParser.feed.
WHOLE = [
    b'data: {"a":1}\n\n',
    b": keep-alive\n\n",
    b"id: 7\ndata: with id\n\n",
    b"data: one\ndata: two\n\n",
    b"\n\ndata: after blank lines\n\n\n",
    b"data:no-space\n\n",
    b"event: error\ndata: late\n\n",
    b"data: [DONE]\n\n",
]
WHOLE_EXPECTED = [b'{"a":1}', b"with id", b"one\ntwo", b"after blank lines", b"no-space", b"late", b"[DONE]"]


@pytest.mark.parametrize("grouping", ["one read", "an event a read", "pairs"])
def test_whole_event_reads_give_what_the_general_path_gives(grouping):
    reads = {"one read": [b"".join(WHOLE)], "an event a read": WHOLE,
             "pairs": [b"".join(WHOLE[i : i + 2]) for i in range(0, len(WHOLE), 2)]}[grouping]
    events, p = feed_all([b"data: first\n", b"\n", *reads])  # the first reads take the general path
    assert events == [b"first", *WHOLE_EXPECTED]
    assert p.error == b"late" and not p.pending
    general = b"".join(WHOLE).replace(b"\n", b"\r\n")  # CR in a read: the general path throughout
    assert feed_all([b"data: first\r\n\r\n", general])[0] == events


def test_whole_events_after_a_partial_one_join_it():
    events, _ = feed_all([b"data: x\n\n", b"data: sp", b"lit\n\n", b"data: y\n\n"])
    assert events == [b"x", b"split", b"y"]
