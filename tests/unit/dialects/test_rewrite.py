"""StreamRewriter and rewrite_body over recorded-shape SSE events (no I/O)."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.dialects.openai.client_view import ClientView
from gateway.dialects.openai.rewrite import StreamRewriter, rewrite_body
from gateway.dialects.sse import event_data
from gateway.dialects.wire import MalformedChunkError
from gateway.reasoning.policy import ReasoningPolicy, ReasoningShown

FW = "｜DSML｜"


def event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(index: int = 0, finish: str | None = None, logprobs=None, **delta) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
    }


#: A client that asked for everything: the view changes nothing, so only the split shows.
SEE_ALL = ClientView(include_usage=True, continuous_usage=True, include_metrics=True)


def step(rewriter: StreamRewriter, raw: bytes) -> list[bytes]:
    return rewriter.step(raw, event_data(raw)).events


def run(
    events: list[bytes], view: ClientView = SEE_ALL, traits: ReasoningShown | None = None, **policy
) -> list:
    rewriter = StreamRewriter(
        ReasoningPolicy(**{"mode": "auto", "thinking": True, **policy}), traits or ReasoningShown(), view
    )
    out = [e for ev in events for e in step(rewriter, ev)]
    return [json.loads(e[6:]) for e in out if e.startswith(b"data: {")], out


def test_unchanged_events_are_forwarded_byte_for_byte() -> None:
    role = event(chunk(role="assistant", content=""))
    usage = event({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": {"x": 1}})
    comment = b": keep-alive\n\n"
    _, raw = run([role, usage, comment, b"data: [DONE]\n\n"])
    assert raw == [role, usage, comment, b"data: [DONE]\n\n"]


def test_held_back_text_invents_no_empty_delta_and_keeps_ids() -> None:
    events = [
        event(chunk(content="Think a")),
        event(chunk(content="bout it</")),
        event(chunk(content="think>Answer", logprobs={"content": []})),
        event(chunk(content="", finish="stop")),
    ]
    parsed, _ = run(events, opened=True)
    deltas = [c["choices"][0]["delta"] for c in parsed]
    assert deltas[0] == {"reasoning_content": "Think a", "reasoning": "Think a"}
    assert deltas[1] == {"reasoning_content": "bout it", "reasoning": "bout it"}  # "</" held
    assert deltas[2] == {"content": "Answer"}
    assert parsed[2]["choices"][0]["logprobs"] == {"content": []}
    assert parsed[3]["choices"][0]["finish_reason"] == "stop"
    assert all(c["id"] == "chatcmpl-1" and c["choices"][0]["index"] == 0 for c in parsed)
    only_marker, _ = run([event(chunk(content="x")), event(chunk(content="</think>"))], opened=True)
    assert len(only_marker) == 1  # the marker-only chunk had nothing left to say


def test_dsml_becomes_tool_call_deltas_and_finish_reason_tool_calls() -> None:
    text = (
        f'Let me call.</think><{FW}tool_calls><{FW}invoke name="lookup">'
        f'<{FW}parameter name="q" string="true">vLLM</{FW}parameter></{FW}invoke></{FW}tool_calls>'
    )
    events = [event(chunk(content=text[i : i + 7])) for i in range(0, len(text), 7)]
    parsed, _ = run([*events, event(chunk(content="", finish="stop"))])
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in parsed)
    calls = [t for c in parsed for t in c["choices"][0]["delta"].get("tool_calls", [])]
    assert content == "" and "DSML" not in json.dumps(parsed)
    assert [(t["index"], t["function"]["name"], json.loads(t["function"]["arguments"])) for t in calls] == [
        (0, "lookup", {"q": "vLLM"})
    ]
    assert calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
    assert parsed[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_state_is_kept_per_choice_index() -> None:
    events = [
        event(chunk(index=0, content="r0</th")),
        event(chunk(index=1, content="r1 still")),
        event(chunk(index=0, content="ink>a0")),
        event(chunk(index=1, content="</think>a1", finish="stop")),
        event(chunk(index=0, content="", finish="stop")),
    ]
    parsed, _ = run(events)
    by_index: dict[int, dict[str, str]] = {0: {}, 1: {}}
    for c in parsed:
        for choice in c["choices"]:
            for key in ("reasoning", "content"):
                by_index[choice["index"]][key] = by_index[choice["index"]].get(key, "") + (
                    choice["delta"].get(key) or ""
                )
    assert by_index == {
        0: {"reasoning": "r0", "content": "a0"},
        1: {"reasoning": "r1 still", "content": "a1"},
    }


@pytest.mark.parametrize("final_delta", [{}, None], ids=["empty delta", "null delta"])
def test_text_held_back_comes_out_on_a_finish_chunk_without_text(final_delta) -> None:
    # vLLM ends a stream with {"delta": {}, "finish_reason": ...} when the last step added no text; what
    # the splitter held (a possible marker start) must come out there, not be written to a lost dict
    last = chunk(finish="stop")
    last["choices"][0]["delta"] = final_delta
    for policy in ({"thinking": False}, {"thinking": True}, {"thinking": True, "opened": True}):
        parsed, _ = run([event(chunk(content="1 <")), event(last)], **policy)
        field = "reasoning" if policy.get("opened") else "content"
        text = "".join(c["choices"][0]["delta"].get(field) or "" for c in parsed)
        assert text == "1 <", policy
        assert parsed[-1]["choices"][0]["finish_reason"] == "stop"


def test_upstream_split_is_kept_and_learnt() -> None:
    known = ReasoningShown()
    policy = ReasoningPolicy(mode="auto", thinking=True)
    rewriter = StreamRewriter(policy, known, SEE_ALL)
    first = rewriter.step(raw := event(chunk(reasoning="because")), event_data(raw))
    second = rewriter.step(raw := event(chunk(content="Answer with </think> inside")), event_data(raw))
    deltas = [json.loads(e[6:])["choices"][0]["delta"] for e in first.events + second.events]
    assert deltas == [
        {"reasoning_content": "because", "reasoning": "because"},
        {"content": "Answer with </think> inside"},
    ]
    assert first.learnt == ReasoningShown(splits_reasoning=True)  # news once, when it was shown
    assert second.learnt is None and known == ReasoningShown()  # nothing written into what it was given
    # the next request knows from the start that the upstream splits: its text is the answer
    body = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"content": "plain"}, "finish_reason": "stop"}],
    }
    assert rewrite_body(body, policy, first.learnt) == (0, 5, 0, first.learnt)
    assert body["choices"][0]["message"] == {"content": "plain", "reasoning_content": None, "reasoning": None}


def test_non_stream_length_cut_inside_opened_reasoning_is_all_reasoning_with_null_content() -> None:
    body = {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "partial thou"},
                "finish_reason": "length",
            }
        ],
    }
    policy = ReasoningPolicy(mode="gateway", thinking=True, opened=True)
    assert rewrite_body(body, policy, ReasoningShown())[:3] == (12, 0, 0)
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "partial thou",
        "reasoning": "partial thou",
    }


def test_held_back_chunks_never_look_like_the_final_usage_chunk() -> None:
    """Regression: a chunk whose text is all held back must not become a `choices: []` chunk."""
    usage = lambda n: {"prompt_tokens": 3, "completion_tokens": n}  # noqa: E731
    events = [
        event({**chunk(content="Think"), "usage": usage(1)}),
        event({**chunk(content=" </"), "usage": usage(2)}),  # "</" is held back
        event({**chunk(content="think>Hi", finish="stop"), "usage": usage(4)}),
        event({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage(4)}),
    ]
    only_final = ClientView(include_usage=True, telemetry=True)
    rewriter = StreamRewriter(ReasoningPolicy("auto", True), ReasoningShown(), only_final)
    out = [e for raw in events for e in step(rewriter, raw)]
    assert not any(b'"choices":[]' in e for e in out)  # the closing chunk waits for [DONE] and telemetry
    done = b"data: [DONE]\n\n"
    out += rewriter.step(done, event_data(done), telemetry={"t": 1}).events
    assert out[-1] == done
    parsed = [json.loads(e[6:]) for e in out[:-1]]
    empties = [c for c in parsed if c["choices"] == []]
    assert len(empties) == 1 and empties[0] is parsed[-1]
    assert parsed[-1]["usage"]["completion_tokens"] == 4 and parsed[-1]["telemetry"] == {"t": 1}
    assert all("usage" not in c for c in parsed[:-1])


def test_malformed_upstream_chunks_are_refused() -> None:
    for bad in (chunk(content=5), {"object": "chat.completion.chunk", "choices": ["x"]},
                {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": "x"}]},
                {"object": "chat.completion.chunk", "choices": "nope"}):  # fmt: skip
        with pytest.raises(MalformedChunkError):
            run([event(bad)])
    with pytest.raises(MalformedChunkError):
        rewrite_body(
            {"object": "chat.completion", "choices": [None]},
            ReasoningPolicy("gateway", True),
            ReasoningShown(),
        )


def test_an_object_field_that_is_not_a_string_reads_as_a_text_completion() -> None:
    """Regression: any ``object`` other than the two chat names (a list or an object too) means a
    text completion, whose text is under ``text``; it once raised ``TypeError`` (unhashable)."""
    for kind in ([], {}, None, 3):
        parsed, _ = run([event({"object": kind, "choices": [{"index": 0, "text": "a</think>b"}]})])
        assert parsed[0]["choices"][0]["text"] == "b"
        assert parsed[0]["choices"][0]["reasoning_content"] == "a"
        body = {"object": kind, "choices": [{"index": 0, "text": "a</think>b"}]}
        assert rewrite_body(body, ReasoningPolicy("gateway", True), ReasoningShown())[:3] == (1, 1, 0)
        assert body["choices"][0]["text"] == "b"


def test_steps_are_counted_when_reasoning_is_hidden() -> None:
    """Regression: with include_reasoning=false, reasoning-only chunks are dropped for the client but
    their tokens still count as engine steps."""
    from datetime import UTC, datetime

    from gateway.telemetry.record import RequestTelemetry
    from gateway.telemetry.recorder import RequestRecorder

    record = RequestTelemetry("r", "k", "n", "m", "/v1/chat/completions", "chat", True, datetime.now(UTC))
    recorder = RequestRecorder(record, k=5)
    rewriter = StreamRewriter(
        ReasoningPolicy("gateway", True, include_reasoning=False), ReasoningShown(), SEE_ALL
    )
    totals = [1, 4, 7, 9]
    texts = ["a", "bc", "d</think>", "Hi"]
    for tokens, text in zip(totals, texts, strict=True):
        raw = event({**chunk(content=text), "usage": {"prompt_tokens": 1, "completion_tokens": tokens}})
        seen = rewriter.step(raw, event_data(raw)).seen
        assert seen is not None
        recorder.observe(seen)
    spec = recorder.finish(200, False).spec
    assert spec is not None and spec.steps == 3 and spec.accepted_tokens == 5
    assert 0 < record.reasoning_tokens < record.completion_tokens


def texts(parsed: list[dict]) -> tuple[str, str]:
    """(reasoning, content) of choice 0 over the chunks a client got."""
    deltas = [c["choices"][0]["delta"] for c in parsed if c["choices"]]
    return (
        "".join(d.get("reasoning") or "" for d in deltas),
        "".join(d.get("content") or "" for d in deltas),
    )


def test_a_plain_answer_is_never_reasoning_and_what_the_upstream_showed_is_learnt() -> None:
    """An upstream without a reasoning parser whose model ignores the template's thinking answers with
    no marker: its answer is the answer (once it ended, nothing said otherwise), and later answers
    stream as they come. An upstream whose text shows markers makes later output start in reasoning."""
    policy = ReasoningPolicy("auto", thinking=True)
    plain = [event(chunk(content="The answer")), event(chunk(content=" is 4.", finish="stop"))]
    rewriter = StreamRewriter(policy, ReasoningShown(), SEE_ALL)
    steps = [rewriter.step(raw, event_data(raw)) for raw in plain]
    out = [e for each in steps for e in each.events]
    assert texts([json.loads(e[6:]) for e in out]) == ("", "The answer is 4.")
    traits = steps[-1].learnt
    assert traits == ReasoningShown(reasoning_markers=False) and steps[0].learnt is None
    rewriter = StreamRewriter(policy, traits, SEE_ALL)  # the next request: streamed at once
    assert texts([json.loads(e[6:]) for e in step(rewriter, plain[0])]) == ("", "The answer")
    # include_reasoning: false never leaves the answer empty
    parsed, _ = run(plain, include_reasoning=False)
    assert texts(parsed) == ("", "The answer is 4.")
    body = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"content": "The answer"}, "finish_reason": "stop"}],
    }
    rewrite_body(body, ReasoningPolicy("auto", thinking=True, include_reasoning=False), ReasoningShown())
    assert body["choices"][0]["message"]["content"] == "The answer"
    rewriter = StreamRewriter(policy, ReasoningShown(), SEE_ALL)
    marked = rewriter.step(raw := event(chunk(content="hm</think>Hi", finish="stop")), event_data(raw))
    assert marked.learnt == ReasoningShown(reasoning_markers=True)
    parsed, _ = run([event(chunk(content="still thinking", finish="length"))], traits=marked.learnt)
    assert texts(parsed) == ("still thinking", "")


def test_an_answer_held_to_a_format_stays_the_answer() -> None:
    """A response_format JSON answer has no reasoning before it, even from an upstream whose earlier
    answers showed markers (vLLM with no reasoning parser constrains the whole output)."""
    events = [event(chunk(content='{"a": ')), event(chunk(content="1}", finish="stop"))]
    for shown in (None, True, False):
        for hidden in (False, True):
            parsed, _ = run(
                events,
                traits=ReasoningShown(reasoning_markers=shown),
                structured=True,
                include_reasoning=not hidden,
            )
            assert texts(parsed) == ("", '{"a": 1}'), (shown, hidden)


def test_usage_only_on_a_chunk_with_choices_still_gets_the_closing_usage_chunk() -> None:
    """OpenAI: with include_usage, one more chunk before [DONE] whose choices are [] carries the
    usage; an upstream that put it on its last chunk with choices gets it moved there."""
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    events = [
        event(chunk(role="assistant", content="")),
        event(chunk(content="Hi")),
        event({**chunk(content="!", finish="stop"), "usage": usage, "system_fingerprint": "fp"}),
        b"data: [DONE]\n\n",
    ]
    view = ClientView(include_usage=True)
    parsed, raw = run(events, view=view, thinking=False)
    assert [c["choices"] == [] for c in parsed] == [False, False, False, True]
    assert all("usage" not in c for c in parsed[:-1])
    assert parsed[-1] == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "system_fingerprint": "fp",
        "choices": [],
        "usage": usage,
    }
    assert raw[-1] == b"data: [DONE]\n\n"
    parsed, raw = run(events, view=ClientView(), thinking=False)  # not asked for: nothing added
    assert all("usage" not in c for c in parsed) and len(raw) == 4
    # an upstream that sent its own closing chunk gets no second one
    closing = event({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    parsed, _ = run([*events[:3], closing, events[3]], view=view, thinking=False)
    assert [c["usage"] for c in parsed if "usage" in c] == [usage]


def test_text_held_when_the_stream_breaks_goes_out_before_the_error() -> None:
    """A stream that ends without its last event: what the split still holds is flushed — answer where
    no marker showed reasoning, reasoning where it had started — in one chunk; nothing when nothing
    is held."""
    rewriter = StreamRewriter(ReasoningPolicy("auto", True), ReasoningShown(), SEE_ALL)
    for text in ("Hel", "lo"):
        assert step(rewriter, event(chunk(content=text))) == []  # not known yet: waiting for a marker
    [flushed] = rewriter.flush().events
    obj = json.loads(flushed[6:])
    assert obj["choices"] == [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}]
    assert (obj["id"], obj["object"], obj["model"]) == ("chatcmpl-1", "chat.completion.chunk", "m")
    assert rewriter.flush().events == []  # once
    opened = StreamRewriter(ReasoningPolicy("auto", True, opened=True), ReasoningShown(), SEE_ALL)
    step(opened, event(chunk(content="hm </thi")))
    [flushed] = opened.flush().events
    assert json.loads(flushed[6:])["choices"][0]["delta"] == both("</thi")  # "hm " went on at once
    plain = StreamRewriter(ReasoningPolicy("auto", False), ReasoningShown(), SEE_ALL)
    step(plain, event(chunk(content="all sent")))
    assert plain.flush().events == []


def test_sse_fields_go_on_whether_or_not_the_event_is_rewritten() -> None:
    """``id``, ``event`` and ``retry`` lines stay with their event in order, rewritten or not; a held
    event's ``id`` and ``retry`` come with the next event sent (they outlast an undispatched event)."""

    def framed(fields: bytes, obj: dict) -> bytes:
        return fields + b"data: " + json.dumps(obj).encode() + b"\n\n"

    untouched = framed(b"id: 1\nevent: chunk\n", chunk(role="assistant"))
    split = framed(b"id: 2\nretry: 3000\n: note\n", chunk(content="a</think>b"))
    held = framed(b"id: 3\nretry: 4000\nevent: chunk\n", chunk(content="<"))
    after = event(chunk(content="c"))
    _, raw = run([untouched, split, held, after], opened=True)
    assert raw[0] == untouched
    assert raw[1].startswith(b"id: 2\nretry: 3000\n: note\ndata: {")
    assert json.loads(raw[1].split(b"data: ")[1])["choices"][0]["delta"] == {"content": "b", **both("a")}
    assert len(raw) == 3 and raw[2].startswith(b"id: 3\nretry: 4000\ndata: {")
    assert json.loads(raw[2].split(b"data: ")[1])["choices"][0]["delta"] == {"content": "<c"}


def both(reasoning: str) -> dict[str, str]:
    return {"reasoning_content": reasoning, "reasoning": reasoning}


@pytest.mark.parametrize(
    ("policy", "texts_", "finish", "expected"),
    [
        # "<" is held back whole (it may open a marker), then released as reasoning with "b"
        ({"opened": True}, ["a", "<", "b</think>", "Hi"], "stop", 3),
        # no marker yet: everything waits, then the end marker releases it all as reasoning
        ({}, ["Let", " me", " think</think>", "Hi"], "stop", 3),
        # cut by max_tokens inside a would-be end marker: the marker's piece is dropped, its tokens
        # count as reasoning like the rest (as the same answer non-streamed counts them: 7 of 7)
        ({"opened": True}, ["a", "b", "c", "d", "e", "</", "thi"], "length", 7),
    ],
    ids=["marker prefix held", "pending until the end marker", "cut inside the end marker"],
)
def test_tokens_of_text_held_back_count_as_what_it_is_released_as(policy, texts_, finish, expected) -> None:
    from datetime import UTC, datetime

    from gateway.telemetry.record import RequestTelemetry
    from gateway.telemetry.recorder import RequestRecorder

    record = RequestTelemetry("r", "k", "n", "m", "/v1/chat/completions", "chat", True, datetime.now(UTC))
    recorder = RequestRecorder(record, k=5)
    rewriter = StreamRewriter(ReasoningPolicy("auto", True, **policy), ReasoningShown(), SEE_ALL)
    for tokens, text in enumerate(texts_, start=1):
        usage = {"prompt_tokens": 1, "completion_tokens": tokens}
        last = finish if tokens == len(texts_) else None
        raw = event({**chunk(content=text, finish=last), "usage": usage})
        seen = rewriter.step(raw, event_data(raw)).seen
        assert seen is not None
        recorder.observe(seen)
    recorder.finish(200, False)
    assert (record.reasoning_tokens, record.completion_tokens) == (expected, len(texts_))


class GeneralPathOnly(StreamRewriter):
    """The rewriter without its plain-delta shortcut: the reference the shortcut must match."""

    def _plain_delta(self, obj, choice):  # type: ignore[no-untyped-def]
        return None


_TEXTS = st.sampled_from(
    ["word", " a b", "é😀", "word", "", None]  # mostly text no marker can start in
    + ["<", "<th", "<think>", "</think>", "x</think>y", f"<{FW}tool_calls>", 1]
)
_DELTA_DICTS = st.dictionaries(
    st.sampled_from(["role", "content", "reasoning", "reasoning_content"]), _TEXTS, max_size=3
)
_CHOICES = st.fixed_dictionaries(
    {
        "index": st.sampled_from([0] * 12 + [1, True]),
        "delta": st.one_of(st.none(), *[_DELTA_DICTS] * 6),
        "logprobs": st.sampled_from([None, None, {"content": []}]),
        "finish_reason": st.sampled_from([None] * 12 + ["stop", "length"]),
    }
)
_CHUNKS = st.builds(
    lambda kind, choices, usage: {
        "id": "chatcmpl-1",
        "object": kind,
        "choices": choices,
        **({"usage": {"completion_tokens": usage}} if usage is not None else {}),
    },
    st.sampled_from(["chat.completion.chunk"] * 12 + ["text_completion"]),
    st.one_of(
        st.just([]),  # the usage chunk
        *[st.lists(_CHOICES, min_size=1, max_size=1)] * 6,
        st.lists(_CHOICES, min_size=2, max_size=2),
    ),
    st.one_of(st.none(), st.integers(0, 50)),
)
_POLICIES = st.builds(
    ReasoningPolicy,
    mode=st.sampled_from(["auto", "gateway", "upstream", "off"]),
    thinking=st.booleans(),
    fields=st.sampled_from([("reasoning_content", "reasoning"), ("reasoning",), ("reasoning_content",)]),
    include_reasoning=st.booleans(),
    opened=st.booleans(),
    structured=st.booleans(),
)
_VIEWS = st.builds(ClientView, include_usage=st.booleans(), continuous_usage=st.booleans())


def _text_chunks(*deltas: dict) -> list[dict]:
    return [chunk(**delta) for delta in deltas]


@settings(max_examples=500, deadline=None)
@example(  # the upstream's first reasoning field switches an auto split over (state the shortcut skips)
    chunks=_text_chunks({"content": "word"}, {"reasoning": "x"}, {"content": "word"}),
    policy=ReasoningPolicy("auto", thinking=True),
    view=SEE_ALL,
    splits=None,
    markers=None,
)
@example(  # "<" may start a DSML marker: held back, it comes out with the next text
    chunks=_text_chunks({"content": "<"}, {"content": "word"}),
    policy=ReasoningPolicy("upstream", thinking=False),
    view=SEE_ALL,
    splits=True,
    markers=None,
)
@given(
    chunks=st.lists(_CHUNKS, min_size=1, max_size=14),
    policy=_POLICIES,
    view=_VIEWS,
    splits=st.sampled_from([None, True, False]),
    markers=st.sampled_from([None, True, False]),
)
def test_the_plain_delta_shortcut_gives_what_the_general_path_gives(
    chunks, policy, view, splits, markers
) -> None:
    """On generated streams (every policy, known or unknown upstream split and markers, text that may
    hold markers, malformed fields), the rewriter sends the same bytes, tells telemetry the same and
    refuses the same chunks as the general path alone."""
    rewriters = {
        name: cls(policy, ReasoningShown(splits_reasoning=splits, reasoning_markers=markers), view)
        for name, cls in (("shortcut", StreamRewriter), ("general", GeneralPathOnly))
    }
    for obj in chunks:
        raw = event(obj)
        outcome = {}
        for name, rewriter in rewriters.items():
            try:
                outcome[name] = repr(rewriter.step(raw, event_data(raw)))
            except MalformedChunkError as exc:
                outcome[name] = str(exc)
        assert outcome["shortcut"] == outcome["general"], obj


@pytest.mark.parametrize("mode", ["auto", "gateway", "upstream", "off"])
@pytest.mark.parametrize("cut", ["</thi", "<", "</think"])
def test_a_marker_cut_in_two_by_max_tokens_never_reaches_the_answer(mode: str, cut: str) -> None:
    """Stream and body, whoever splits: the piece of the end marker a length cut leaves is dropped;
    the same text at a natural stop stays (it is text then)."""
    text = "the answer is 42 " + cut
    last = event(chunk(content="is 42 " + cut, finish="length"))
    parsed, _ = run([event(chunk(content="the answer ")), last], mode=mode)
    reasoning, content = texts(parsed)
    assert (reasoning + content).endswith("42 ") and cut not in reasoning + content
    stopped, _ = run([event(chunk(content=text, finish="stop"))], mode=mode, thinking=False)
    assert texts(stopped)[1] == text
    message = {"role": "assistant", "content": text}
    body = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
    }
    rewrite_body(body, ReasoningPolicy(mode=mode, thinking=True), ReasoningShown())
    message = body["choices"][0]["message"]
    assert cut not in (message.get("content") or "") + (message.get("reasoning") or "")


def test_what_passes_through_unsplit_is_counted_where_it_went() -> None:
    """``GATEWAY_REASONING_SPLIT=off``: the backend's own reasoning field is reasoning, the rest answer
    — telemetry counts what the client got."""
    rewriter = StreamRewriter(ReasoningPolicy(mode="off", thinking=True), ReasoningShown(), SEE_ALL)
    raws = (event(chunk(reasoning="thinking hard")), event(chunk(content="42", finish="length")))
    seen = [rewriter.step(raw, event_data(raw)).seen for raw in raws]
    assert [(s.reasoning_chars, s.content_chars) for s in seen if s] == [(13, 0), (0, 2)]
    body = {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "length",
            "message": {"role": "assistant", "reasoning": "abc", "content": None}}]}  # fmt: skip
    assert rewrite_body(body, ReasoningPolicy(mode="off", thinking=True), ReasoningShown())[:3] == (3, 0, 0)


def test_the_telemetry_object_rides_on_the_usage_chunk_whichever_way_the_stream_ends() -> None:
    """With the gateway's telemetry asked: the upstream's usage chunk waits for it and goes out with
    it before ``[DONE]``, or before the error event of a stream that broke after it; an empty-choices
    chunk without usage passes on and does not take the usage chunk's place."""
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    head = [event({**chunk(content="a"), "usage": usage}), event(chunk(finish="stop"))]
    closing = event({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage})
    metrics = event(
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "metrics": {"x": 1}}
    )
    done = b"data: [DONE]\n\n"
    for include_usage in (True, False):
        view = ClientView(include_usage=include_usage, include_metrics=True, telemetry=True)

        def rewriter(view: ClientView = view) -> StreamRewriter:
            return StreamRewriter(ReasoningPolicy("auto", False), ReasoningShown(), view)

        broken = rewriter()
        for raw in (*head, closing):
            step(broken, raw)
        [held] = broken.flush({"ttft_s": 0.1}).events
        assert json.loads(held[6:])["telemetry"] == {"ttft_s": 0.1}
        assert ("usage" in json.loads(held[6:])) is include_usage
        for stream in ([*head, metrics, closing], [*head, metrics]):  # the upstream's usage chunk, or none
            rewritten = rewriter()
            out = [e for raw in stream for e in step(rewritten, raw)]
            out += rewritten.step(done, event_data(done), telemetry={"ttft_s": 0.1}).events
            assert metrics in out and out[-1] == done
            last = json.loads(out[-2][6:])
            assert last["choices"] == [] and last["telemetry"] == {"ttft_s": 0.1}
            assert last.get("usage") == (usage if include_usage else None)
