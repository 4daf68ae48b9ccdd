"""SSE decoder: whole events out, byte-faithful, at any cut of the input."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gateway.dialects.sse import SSEDecoder, event_data

STREAM = (
    b'data: {"a":1}\n\n'
    b": keep-alive\n\n"
    b'data: {"b":"x\\ny"}\r\n\r\n'
    b"event: error\ndata: first\ndata: second\n\n"
    b"data: [DONE]\n\n"
)


def test_events_and_data() -> None:
    events = SSEDecoder().feed(STREAM)
    assert b"".join(events) == STREAM
    assert [event_data(e) for e in events] == [
        b'{"a":1}',
        None,
        b'{"b":"x\\ny"}',
        b"first\nsecond",
        b"[DONE]",
    ]


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    pieces = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    decoder = SSEDecoder()
    events = [e for piece in pieces for e in decoder.feed(piece)]
    assert events == SSEDecoder().feed(STREAM)
    assert decoder.pending == b""


def _reference_events(stream: bytes) -> list[bytes]:
    """Events per the WHATWG rule, from the whole stream at once: text up to two line ends in a row."""
    end = rb"(?:\r\n|\n|\r(?!\n))"
    return re.findall(rb"(?s).*?" + end + end, stream)


@given(
    st.text(alphabet="a:\n\r", max_size=60).map(lambda t: t.encode() + b"x"),
    st.lists(st.integers(min_value=0, max_value=61), max_size=8),
)
def test_any_bytes_any_chunking_match_the_reference(stream: bytes, cuts: list[int]) -> None:
    """LF-only pieces take a fast path, others the general one: both must cut events the same way."""
    points = sorted({c for c in cuts if c <= len(stream)})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    decoder = SSEDecoder()
    events = [e for piece in pieces for e in decoder.feed(piece)]
    assert events == _reference_events(stream)
    assert b"".join(events) + decoder.pending == stream


def test_incomplete_event_is_held() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a"') == []
    assert decoder.feed(b":1}\n") == []
    assert decoder.feed(b"\n") == [b'data: {"a":1}\n\n']


_PARTS = [b'data: {"a":1}\n\n', b"data:x\n\n", b": c\n\n", b"data: a\r\n\r\n", b"data: b\ndata: c\n\n"]


@given(
    st.lists(st.sampled_from([*_PARTS, b"\n", b"\r", b"data: "]), max_size=10).map(b"".join),
    st.lists(st.integers(min_value=0, max_value=120), max_size=8),
)
def test_payloads_are_each_events_data_at_any_chunking(stream: bytes, cuts: list[int]) -> None:
    """``feed_payloads`` answers a lone ``data:`` line in one scan: the same events, each with exactly
    :func:`event_data` of it, as ``feed`` gives."""
    points = sorted({c for c in cuts if c <= len(stream)})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    decoder, reference = SSEDecoder(), SSEDecoder()
    got = [pair for piece in pieces for pair in decoder.feed_payloads(piece)]
    want = [(e, event_data(e)) for piece in pieces for e in reference.feed(piece)]
    assert got == want
    assert decoder.pending == reference.pending
