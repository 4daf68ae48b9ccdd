"""ReasoningSplitter: the same split however the text is cut, for every case the issue lists."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.reasoning import ReasoningSplitter

FW = "｜"  # the full-width bar DeepSeek's tokenizer uses


def split(pieces: list[str], thinking: bool = True) -> tuple[str, str, list[tuple[str, dict]]]:
    splitter = ReasoningSplitter(thinking)
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
    splitter = ReasoningSplitter(thinking=True)
    held = splitter.feed("a " + fragment)
    assert held.reasoning == "a "  # the fragment waits for the next character ...
    nxt = splitter.feed("!")
    assert nxt.reasoning == fragment + "!"  # ... and comes out unchanged when it can't be a marker


def test_fragment_at_the_very_end_is_flushed_by_finish() -> None:
    assert split(["thinking </thi"]) == ("thinking </thi", "", [])


def test_missing_start_marker_and_explicit_start_marker_agree() -> None:
    assert (
        split(["reason</think>answer"]) == split(["<think>reason</think>answer"]) == ("reason", "answer", [])
    )


def test_one_speculative_chunk_crosses_the_boundary() -> None:
    assert split(["I should add", " them.</think>It is", " 7"]) == ("I should add them.", "It is 7", [])


def test_cut_by_max_tokens_before_the_end_marker_is_all_reasoning() -> None:
    assert split(["still thinking", " about it"]) == ("still thinking about it", "", [])


def test_thinking_off_leaves_text_untouched() -> None:
    text = "Use <think> tags like </think> this."
    for pieces in cuts2(text):
        assert split(pieces, thinking=False) == ("", text, [])


@pytest.mark.parametrize("bar", [FW, "|"])
def test_dsml_tool_calls_become_tool_calls(bar: str) -> None:
    d = f"{bar}DSML{bar}"
    text = (
        f"need weather</think>Checking.\n<{d}tool_calls>\n"
        f'<{d}invoke name="get_weather">\n'
        f'<{d}parameter name="city" string="true">Paris</{d}parameter>\n'
        f'<{d}parameter name="days" string="false">3</{d}parameter>\n'
        f"</{d}invoke>\n"
        f'<{d}invoke name="get_time">\n'
        f'<{d}parameter name="tz" string="true">CET</{d}parameter>\n</{d}invoke>\n'
        f"</{d}tool_calls>"
    )
    expected = (
        "need weather",
        "Checking.\n",
        [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"tz": "CET"})],
    )
    for pieces in cuts2(text):
        reasoning, content, calls = split(pieces)
        assert (reasoning, content, calls) == expected
        assert "DSML" not in content and all("DSML" not in json.dumps(a) for _, a in calls)


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
    assert split(pieces, thinking) == split([text], thinking)


def test_dsml_non_json_constants_stay_text_so_arguments_are_strict_json() -> None:
    d = f"{FW}DSML{FW}"
    text = f'<{d}invoke name="f"><{d}parameter name="x" string="false">NaN</{d}parameter></{d}invoke>'
    _, _, calls = split([text], thinking=False)
    assert calls == [("f", {"x": "NaN"})]
