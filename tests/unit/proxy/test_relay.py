"""The stream relay (gateway/proxy/relay.py) over an in-memory upstream response and a scripted
translator: one item per upstream read, what the translator saw handed up with it in order, the
sequence's end before the last event is rewritten (which is handed the client's telemetry object),
and a broken stream ending with its error."""

from __future__ import annotations

from typing import Any

from gateway.dialects.base import Answer, Step
from gateway.errors import GatewayError
from gateway.proxy.relay import Relayed, RelayOutcome, relay_events
from gateway.reasoning.policy import ReasoningShown
from gateway.telemetry.observation import Observation
from tests.support.fake_upstream import Answer as Scripted
from tests.support.fake_upstream import FakeResponse

DONE = b"data: [DONE]\n\n"


class Numbered:
    """A translator that sends each event as it is and sees each ``data`` line as one output chunk;
    it learns the backend splits at ``data: split``; it remembers the telemetry its last step got."""

    def __init__(self) -> None:
        self.telemetry: dict[str, Any] | None = None

    def knowing(self, shown: ReasoningShown) -> None:
        return None

    def ends(self, event: bytes, data: bytes | None) -> bool:
        return data == b"[DONE]"

    def step(self, event: bytes, data: bytes | None, telemetry: dict[str, Any] | None = None) -> Step:
        if data == b"[DONE]":
            self.telemetry = telemetry
            return Step([event])
        learnt = ReasoningShown(splits_reasoning=True) if data == b"split" else None
        return Step([event], Observation(output=True, content_chars=len(data or b"")), learnt)

    def answer(self, body: bytes) -> Answer:
        return Answer(body, Observation())

    def error_event(self, error: GatewayError, telemetry: dict[str, Any] | None = None) -> Step:
        return Step([b"data: broken\n\n"])


async def relayed(
    *pieces: bytes | GatewayError, telemetry: dict[str, Any] | None = None
) -> tuple[list[Relayed], RelayOutcome, Numbered]:
    scripted = Scripted()
    for piece in pieces:
        scripted.fail(piece) if isinstance(piece, GatewayError) else scripted.send(piece)
    scripted.end()
    outcome, translator, items = RelayOutcome(), Numbered(), []
    async for item in relay_events(FakeResponse(scripted), translator, outcome):
        items.append(item)
        if item.sequence_end:
            outcome.telemetry = telemetry  # the reader's part: the client's object, as of the end
    return items, outcome, translator


async def test_one_item_per_read_with_what_was_seen_in_order() -> None:
    items, outcome, _ = await relayed(
        b"data: a\n\ndata: bb\n\n", b"data: split\n\n", b"data: c", b"cc\n\n" + DONE
    )
    assert [item.data for item in items if not item.sequence_end] == [
        b"data: a\n\ndata: bb\n\n",
        b"data: split\n\n",
        b"data: ccc\n\n" + DONE,
    ]
    seen = [[step.seen.content_chars for step in item.steps if step.seen] for item in items]
    assert seen == [[1, 2], [5], [3], []]  # the last read's steps went up with the sequence's end
    assert [step.learnt for item in items for step in item.steps if step.learnt] == [ReasoningShown(True)]
    assert outcome.done and outcome.error is None


async def test_the_sequences_end_comes_before_the_last_event_which_gets_the_telemetry() -> None:
    items, outcome, translator = await relayed(b"data: a\n\n" + DONE, telemetry={"ttft_s": 0.5})
    end = next(i for i, item in enumerate(items) if item.sequence_end)
    assert items[end].data == b"" and [s.seen.content_chars for s in items[end].steps] == [1]  # type: ignore[union-attr]
    assert items[end + 1].data == b"data: a\n\n" + DONE  # the events of that read, in one write
    assert translator.telemetry == {"ttft_s": 0.5}


async def test_a_broken_stream_keeps_what_arrived_and_ends_with_its_error() -> None:
    reset = GatewayError("upstream_stream_error", "reset")
    items, outcome, _ = await relayed(b"data: a\n\n", reset)
    assert [item.data for item in items] == [b"data: a\n\n"]
    assert outcome.error is reset and not outcome.done
    items, outcome, _ = await relayed(b"data: a\n\n")  # ended without its last event
    assert outcome.error is not None and outcome.error.code == "upstream_stream_error"
    items, outcome, _ = await relayed(DONE, reset)  # a break after the end is no error
    assert outcome.done and outcome.error is None


class Counted(Numbered):
    """Each ``data: N`` event's per-step usage counts N completion tokens (``data: total N``: the
    closing usage, a total, not a step)."""

    def step(self, event: bytes, data: bytes | None, telemetry: dict[str, Any] | None = None) -> Step:
        if data == b"[DONE]":
            return Step([event])
        final = (data or b"").startswith(b"total ")
        tokens = int((data or b"0").removeprefix(b"total "))
        usage = {"completion_tokens": tokens}
        return Step([event], Observation(output=not final, usage=usage, final=final))


async def test_a_sequence_past_its_cap_is_cut_after_the_event_that_passed_it() -> None:
    """The backend ignores the cap of 4: what came with the event that passed it in the same read is
    dropped, and the stream ends with ``upstream_overran_cap``; a closing total past it, once the
    sequence has ended, is no step and cuts nothing."""
    scripted = (
        Scripted().send(b"data: 2\n\ndata: 4\n\n", b"data: 6\n\ndata: 8\n\n", b"data: 10\n\n" + DONE).end()
    )
    outcome, items = RelayOutcome(), []
    async for item in relay_events(FakeResponse(scripted), Counted(), outcome, cap=4):
        items.append(item)
    assert b"".join(item.data for item in items) == b"data: 2\n\ndata: 4\n\ndata: 6\n\n"
    assert outcome.error is not None and outcome.error.code == "upstream_overran_cap"
    assert outcome.error.status == 502 and not outcome.done
    whole = Scripted().send(b"data: 4\n\ndata: total 9\n\n" + DONE).end()
    outcome = RelayOutcome()
    assert [item async for item in relay_events(FakeResponse(whole), Counted(), outcome, cap=4)]
    assert outcome.done and outcome.error is None
