"""Pure tests of scripted tool calls: the ``#sim:call`` directive, the call and tool-result scripts,
and how an output's spans split into reasoning, content and call arguments."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dspark_sim.errors import SimError
from dspark_sim.text import THINK_END, build_output, pieces
from dspark_sim.tools import ToolCall, result_answer, scripted_call

SHELL = frozenset({"shell"})
LS = ToolCall("shell", '{"cmd": "ls -la", "n": 3}')


def output(**kwargs):
    params = {"seed": 0, "request_key": "k", "instruction": "go", "thinking": True, "max_tokens": None}
    return build_output(**{**params, **kwargs})


def test_directive_gives_the_call_with_its_arguments_respelled():
    call = scripted_call('please #sim:call shell {"cmd":"ls -la","n":3}', SHELL)
    assert call == LS  # json.dumps spacing, as vLLM's DeepSeek parsers write arguments


def test_the_json_runs_to_the_end_of_its_line():
    text = 'first line\n#sim:call shell {"cmd": "ls -la", "n": 3}\n#sim:call other {}'
    assert scripted_call(text, SHELL | {"other"}) == LS


@pytest.mark.parametrize("text", ["no directive here", '#sim:call python {"code": "1"}'])
def test_no_call_without_a_directive_for_a_callable_tool(text):
    assert scripted_call(text, SHELL) is None


@pytest.mark.parametrize("text", ["#sim:call shell", "#sim:call shell {oops}", "#sim:call shell [1, 2]"])
def test_arguments_that_are_not_a_json_object_are_a_400(text):
    with pytest.raises(SimError) as info:
        scripted_call(text, SHELL)
    assert info.value.status == 400


def test_a_call_is_reasoning_then_its_arguments():
    out = output(call=LS)
    assert out.call == LS and out.finish_reason == "stop"
    span = out.span()
    assert span.reasoning == "The user asked me to call shell. I will call it with the arguments given."
    assert (span.content, span.arguments, span.opens_call) == ("", LS.arguments, True)
    assert out.raw() == span.reasoning + THINK_END + LS.arguments


def test_without_thinking_a_call_is_only_its_arguments():
    out = output(call=LS, thinking=False)
    assert out.span() == out.span(split=False)
    assert (out.span().reasoning, out.span().arguments) == ("", LS.arguments)


def test_a_cut_inside_the_call_keeps_what_was_emitted():
    whole = output(call=LS)
    cut = output(call=LS, max_tokens=whole.answer_start + 2)
    assert cut.finish_reason == "length" and cut.call == LS
    assert cut.span().arguments == "".join(pieces(LS.arguments)[:2])
    in_reasoning = output(call=LS, max_tokens=3)
    assert in_reasoning.call is None and in_reasoning.in_reasoning


def test_a_tool_result_is_quoted_and_wins_over_the_directive_that_called():
    result = "x" * 150 + "\n" + "y" * 100 + "\n"
    out = output(call=LS, tool_result=result)
    assert out.call is None
    assert out.split() == (
        "The tool returned its result. I will quote it for the user.",
        result_answer(result),
    )
    assert result_answer(result) == "Tool result: " + result[:200]
    trailing = output(tool_result="a\nb\n", thinking=False)  # trailing whitespace survives
    assert trailing.raw() == "Tool result: a\nb\n"


def test_without_the_reasoning_parser_the_reasoning_is_content_but_the_call_is_apart():
    out = output(call=LS)
    raw = out.span(split=False)
    assert raw.reasoning == "" and raw.content == out.span().reasoning + THINK_END
    assert raw.arguments == LS.arguments


@given(st.integers(1, 80), st.lists(st.integers(0, 80), max_size=10), st.booleans(), st.booleans())
def test_spans_of_the_parts_add_up_to_the_whole(max_tokens, cuts, thinking, split):
    out = output(call=LS, thinking=thinking, max_tokens=max_tokens)
    bounds = sorted({0, len(out), *(c % (len(out) + 1) for c in cuts)})
    parts = [out.span(a, b, split=split) for a, b in zip(bounds, bounds[1:], strict=False)]
    whole = out.span(split=split)
    assert "".join(p.reasoning for p in parts) == whole.reasoning
    assert "".join(p.content for p in parts) == whole.content
    assert "".join(p.arguments for p in parts) == whole.arguments
    assert sum(p.opens_call for p in parts) == (1 if out.call is not None else 0)
    if out.finish_reason == "stop":
        assert json.loads(whole.arguments) == json.loads(LS.arguments)
