"""ReasoningSplitter: the same split however the text is cut, for every case the issue lists."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.reasoning import THINK, Markers, ReasoningSplitter, State
from gateway.reasoning.splitter import PENDING_MAX_CHARS

FW = "｜"  # the full-width bar DeepSeek's tokenizer uses
OPENED = State.REASONING  # the prompt ended with the start marker: the output starts inside reasoning


def split(
    pieces: list[str], thinking: bool = True, start: State = State.PENDING, markers: Markers = THINK
) -> tuple[str, str, list[tuple[str, dict]]]:
    splitter = ReasoningSplitter(thinking, markers, start)
    reasoning, content, calls = "", "", []
    for delta in [*(splitter.feed(p) for p in pieces), splitter.finish()]:
        reasoning += delta.reasoning
        content += delta.content
        calls += [(c.name, json.loads(c.arguments)) for c in delta.tool_calls]
    return reasoning, content, calls


def cuts2(text: str):
    for i in range(len(text) + 1):
        yield [text[:i], text[i:]]


def cuts3(text: str):
    for i, j in itertools.combinations_with_replacement(range(len(text) + 1), 2):
        yield [text[:i], text[i:j], text[j:]]


def test_end_marker_cut_at_every_offset_two_and_three_ways() -> None:
    text = "Let me think about <b> and </thi ng.</think>The answer is 4."
    expected = ("Let me think about <b> and </thi ng.", "The answer is 4.", [])
    assert split([text]) == expected
    for pieces in itertools.chain(cuts2(text), cuts3(text)):
        assert split(pieces) == expected, pieces


@pytest.mark.parametrize("fragment", ["<", "</", "</thi", "<think", "</think", "<｜DSML｜tool"])
def test_lone_marker_prefix_is_released_once_it_cannot_be_a_marker(fragment: str) -> None:
    splitter = ReasoningSplitter(True, start=OPENED)
    held = splitter.feed("a " + fragment)
    assert held.reasoning == "a "  # the fragment waits for the next character ...
    nxt = splitter.feed("!")
    assert nxt.reasoning == fragment + "!"  # ... and comes out unchanged when it can't be a marker


def test_fragment_at_the_very_end_is_flushed_by_finish() -> None:
    assert split(["thinking </thi"], start=OPENED) == ("thinking </thi", "", [])
    assert split(["thinking </thi"]) == ("", "thinking </thi", [])


def test_text_is_reasoning_only_once_a_marker_shows_it() -> None:
    """Thinking on, not known to start inside reasoning: the text waits until a marker decides."""
    splitter = ReasoningSplitter(True)
    assert not splitter.feed("The answer")  # nothing released: reasoning, or a plain answer?
    assert splitter.pending and not splitter.saw_reasoning_marker
    out = splitter.finish()
    assert (out.reasoning, out.content) == ("", "The answer")  # no marker came: it was the answer
    splitter = ReasoningSplitter(True)
    assert not splitter.feed("Let me see")
    out = splitter.feed("</think>It is 4")
    assert (out.reasoning, out.content) == ("Let me see", "It is 4") and splitter.saw_reasoning_marker
    assert split(["Hi <think>hm</think>there"]) == ("hm", "Hi there", [])
    assert split(['{"a": 1}']) == ("", '{"a": 1}', [])  # a response_format answer stays the answer


def test_what_is_held_waiting_for_a_marker_is_bounded() -> None:
    """Past PENDING_MAX_CHARS with no marker the text is the answer (a plain answer of any length
    streams on, and what is held stays bounded); a later end marker is then a stray one."""
    splitter = ReasoningSplitter(True)
    piece = "word " * 1000
    released = ""
    for _ in range(PENDING_MAX_CHARS // len(piece) + 1):
        out = splitter.feed(piece)
        assert not out.reasoning
        released += out.content
    assert released == piece * (PENDING_MAX_CHARS // len(piece) + 1) and not splitter.pending
    assert splitter.feed("more</think>").content == "more"


def test_cut_by_max_tokens_before_the_end_marker() -> None:
    """All reasoning when the output is known to start inside it; else no marker showed any."""
    assert split(["still thinking", " about it"], start=OPENED) == ("still thinking about it", "", [])
    assert split(["still thinking", " about it"]) == ("", "still thinking about it", [])


def test_missing_start_marker_and_explicit_start_marker_agree() -> None:
    assert (
        split(["reason</think>answer"]) == split(["<think>reason</think>answer"]) == ("reason", "answer", [])
    )


def test_one_speculative_chunk_crosses_the_boundary() -> None:
    assert split(["I should add", " them.</think>It is", " 7"]) == ("I should add them.", "It is 7", [])


def test_thinking_off_leaves_text_untouched() -> None:
    text = "Use <think> tags like </think> this."
    for pieces in cuts2(text):
        assert split(pieces, thinking=False) == ("", text, [])


@pytest.mark.parametrize(
    ("d", "block"),
    [(f"{FW}DSML{FW}", "tool_calls"), ("|DSML|", "tool_calls"), (f"{FW}DSML{FW} ", "calls")],  # V4.1: spaced
)
def test_dsml_tool_calls_become_tool_calls(d: str, block: str) -> None:
    text = (
        f"need weather</think>Checking.\n<{d}{block}>\n"
        f'<{d}invoke name="get_weather">\n'
        f'<{d}parameter name="city" string="true">Paris</{d}parameter>\n'
        f'<{d}parameter name="days" string="false">3</{d}parameter>\n'
        f"</{d}invoke>\n"
        f'<{d}invoke name="get_time">\n'
        f'<{d}parameter name="tz" string="true">CET</{d}parameter>\n</{d}invoke>\n'
        f"</{d}{block}>"
    )
    expected = (
        "need weather",
        "Checking.\n",
        [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"tz": "CET"})],
    )
    for pieces in cuts2(text):
        for start in (State.PENDING, OPENED):
            reasoning, content, calls = split(pieces, start=start)
            assert (reasoning, content, calls) == expected
            assert "DSML" not in content and all("DSML" not in json.dumps(a) for _, a in calls)
    # no end marker before the block: opened, the text before it is reasoning; else it is the answer
    block = text.split("</think>", 1)[1].removeprefix("Checking.\n")
    assert split(["need weather" + block], start=OPENED)[:2] == ("need weather", "")
    assert split(["need weather" + block])[:2] == ("", "need weather")


def test_dsml_with_thinking_off_and_incomplete_call_is_dropped() -> None:
    d = f"{FW}DSML{FW}"
    splitter = ReasoningSplitter(thinking=False)
    out = splitter.feed(f'ok <{d}tool_calls><{d}invoke name="f"><{d}parameter name="x" string="true">1')
    assert out.content == "ok " and not out.tool_calls
    assert not splitter.finish() and splitter.incomplete_tool_call


ALPHABET = [
    "<",
    "/",
    "think",
    ">",
    "</think>",
    "<think>",
    "a",
    " ",
    "\n",
    "<｜DSML｜tool_calls>",
    "｜",
    "DSML",
]


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from(ALPHABET), max_size=30).map("".join),
    st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    st.booleans(),
)
def test_any_text_any_chunking_matches_the_one_chunk_split(
    text: str, cuts: list[int], thinking: bool
) -> None:
    points = sorted({c for c in cuts if c <= len(text)})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    for start in (State.PENDING, State.REASONING, State.CONTENT):
        assert split(pieces, thinking, start) == split([text], thinking, start)


SEED = Markers(" thinking", " response")  # the seed deployment's --reasoning-config markers


def test_configured_multi_character_markers_split_however_the_text_is_cut() -> None:
    text = " thinkingWeigh a respons e and a think ing. response The answer is 4."
    expected = ("Weigh a respons e and a think ing.", " The answer is 4.", [])
    assert split([text], markers=SEED) == expected
    for pieces in itertools.chain(cuts2(text), cuts3(text)):
        assert split(pieces, markers=SEED) == expected, pieces
    # opened by the prompt, no start marker in the output; <think> is text under these markers
    assert split(["a <think>b", " respo", "nse c"], start=OPENED, markers=SEED) == ("a <think>b", " c", [])


def test_dsml_non_json_constants_stay_text_so_arguments_are_strict_json() -> None:
    d = f"{FW}DSML{FW}"
    text = f'<{d}invoke name="f"><{d}parameter name="x" string="false">NaN</{d}parameter></{d}invoke>'
    _, _, calls = split([text], thinking=False)
    assert calls == [("f", {"x": "NaN"})]
