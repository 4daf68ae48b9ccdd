"""Pure tests of the output script: counting, cuts, reasoning split, determinism."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dspark_sim.text import THINK_END, build_output, estimate_prompt_tokens, pieces


def output(instruction: str = "hello", **kwargs):
    params = {
        "seed": 0,
        "request_key": instruction,
        "instruction": instruction,
        "thinking": True,
        "max_tokens": None,
    }
    return build_output(**{**params, **kwargs})


def test_count_answer_is_exact():
    out = output("Please count from 1 to 12, thanks")
    reasoning, content = out.split()
    assert content == ", ".join(str(n) for n in range(1, 13))
    assert "count from 1 to 12" in reasoning
    assert out.finish_reason == "stop"
    assert out.raw() == f"{reasoning}{THINK_END}{content}"


def test_count_variants():
    assert output("count to 3").split()[1] == "1, 2, 3"
    assert output("Count down from 3 to 1").split()[1] == "3, 2, 1"


def test_thinking_off_has_no_reasoning_part():
    out = output("count from 1 to 3", thinking=False)
    assert out.split() == ("", "1, 2, 3")
    assert THINK_END not in out.tokens


def test_cut_inside_reasoning_is_all_reasoning():
    out = output("count from 1 to 50", max_tokens=5)
    assert len(out) == 5 and out.finish_reason == "length" and out.in_reasoning
    reasoning, content = out.split()
    assert content == "" and reasoning == out.raw()


def test_cut_inside_content():
    full = output("count from 1 to 50")
    cut = output("count from 1 to 50", max_tokens=full.think_end + 4)
    assert cut.finish_reason == "length"
    assert cut.split()[1] == "1, 2"


def test_deterministic_and_seed_sensitive():
    assert output("tell me a story") == output("tell me a story")
    assert output("tell me a story").tokens != output("tell me a story", seed=1).tokens
    assert output("tell me a story").tokens != output("tell me another story").tokens


def test_ignore_eos_fills_to_max_tokens_and_ends_by_length():
    # vLLM: with EOS ignored only max_tokens ends the sequence, and it reports "length"
    out = output("count to 3", max_tokens=200, ignore_eos=True)
    assert len(out) == 200 and out.finish_reason == "length"
    natural = len(output("count to 3"))
    exact = output("count to 3", max_tokens=natural, ignore_eos=True)
    assert len(exact) == natural and exact.finish_reason == "length"
    assert output("count to 3", max_tokens=natural).finish_reason == "stop"  # EOS came at the limit


def test_prompt_estimate_grows_with_text():
    assert estimate_prompt_tokens(["a" * 400]) == 3 + 4 + 100
    assert estimate_prompt_tokens(["x"], per_message=0, fixed=1) == 2


@given(st.text(alphabet="ab ,.\n'"))
def test_pieces_round_trip(text):
    assert "".join(pieces(text)) == text


@given(st.integers(1, 400), st.lists(st.integers(0, 400), max_size=12), st.booleans())
def test_split_of_parts_concatenates_to_split_of_whole(max_tokens, cuts, thinking):
    out = output("count from 1 to 40", max_tokens=max_tokens, thinking=thinking)
    bounds = sorted({0, len(out), *(c % (len(out) + 1) for c in cuts)})
    parts = [out.split(a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
    assert ("".join(p[0] for p in parts), "".join(p[1] for p in parts)) == out.split()


@given(
    st.sampled_from(["tell me a story", "count to 300"]),
    st.integers(1, 400),
    st.booleans(),
    st.booleans(),
    st.integers(0, 3),
)
def test_a_cut_output_is_a_prefix_of_the_whole(instruction, max_tokens, thinking, ignore_eos, seed):
    """Generation stops at the cut, yet a cut output is exactly the start of the longer one."""
    kwargs = {"thinking": thinking, "seed": seed, "ignore_eos": ignore_eos}
    whole = output(instruction, max_tokens=1000, **kwargs)
    cut = output(instruction, max_tokens=max_tokens, **kwargs)
    assert cut.tokens == whole.tokens[: len(cut)]
    natural = len(output(instruction, thinking=thinking, seed=seed))
    assert len(cut) == (max_tokens if ignore_eos else min(max_tokens, natural))
    assert cut.finish_reason == ("length" if ignore_eos or max_tokens < natural else "stop")


def test_the_answer_does_not_depend_on_thinking():
    on, off = output("tell me a story"), output("tell me a story", thinking=False)
    assert on.split()[1] == off.split()[1] != "" and on.split()[0] != ""
