"""Running one generation: stream pipelines (events -> SSE frames -> optional cut) and the
non-stream path.

Each stage is a small async generator that closes the stage below it (``aclosing``), so a client
disconnect (``ClosingStreamingResponse`` cancels the task streaming it) or a simulated crash frees
the slot at once. Chat and text completion chunks are built inline (the benchmarks' hot path); the
Responses and Anthropic dialects, whose events depend on what was sent before, are a
:class:`Dialect` state machine driven by :func:`dialect_events`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from . import render
from .engine import SimEngine
from .errors import SimulatedCrash
from .sequence import Sequence, Step
from .text import Output

DONE = "[DONE]"

Events = AsyncGenerator[dict[str, Any] | str, None]
"""Stream objects in order: chunk dicts, then the literal ``[DONE]``."""
TypedEvents = AsyncGenerator[dict[str, Any], None]
"""Stream objects that each carry their SSE event name as ``type`` (Responses, Anthropic)."""
Frames = AsyncGenerator[bytes, None]
"""SSE-framed bytes, one event per item."""


@dataclass(frozen=True, slots=True)
class Generation:
    """One admitted-for-processing request: what to emit and how to report it."""

    envelope: render.Envelope
    seq: Sequence
    output: Output
    split_reasoning: bool
    """Chat only: split reasoning into its own field (the reasoning parser is on)."""
    include_usage: bool
    continuous_usage: bool
    include_metrics: bool
    k: int
    max_tokens: int
    """The effective output cap, tokens (what was asked, or what the context leaves)."""
    call_id: str | None = None
    """The id of the output's tool call, in every event and body that shows the call."""

    def usage(self, completion_tokens: int | None = None) -> dict[str, Any]:
        """Usage so far (default: all emitted tokens)."""
        done = self.seq.generated if completion_tokens is None else completion_tokens
        return render.usage(self.seq.prompt_tokens, done, self.seq.cached_tokens)

    def metrics(self) -> dict[str, Any] | None:
        """The per-request metrics object, or None when not asked for."""
        return render.request_metrics(self.seq, self.k) if self.include_metrics else None


class Dialect(Protocol):
    """Turns one generation's engine steps into a dialect's stream events (dicts with a ``type``)."""

    def opening(self) -> list[dict[str, Any]]:
        """Events sent before the engine runs."""
        ...

    def step(self, step: Step) -> list[dict[str, Any]]:
        """Events for one engine step."""
        ...

    def closing(self) -> list[dict[str, Any]]:
        """Events sent once the last token is out."""
        ...


async def dialect_events(engine: SimEngine, gen: Generation, dialect: Dialect) -> TypedEvents:
    """``dialect``'s events: its opening, its events for each engine step, its closing."""
    for event in dialect.opening():
        yield event
    async with aclosing(engine.run(gen.seq)) as steps:
        async for step in steps:
            for event in dialect.step(step):
                yield event
    for event in dialect.closing():
        yield event


async def chat_events(engine: SimEngine, gen: Generation, finish_reason: str) -> Events:
    """Chat stream objects: role chunk, one chunk per engine step, usage chunk, ``[DONE]``;
    ``finish_reason`` rides on the last step's chunk."""
    env, output = gen.envelope, gen.output
    async with aclosing(engine.run(gen.seq)) as steps:
        async for step in steps:
            if step.start == 0:
                yield render.chat_chunk(env, dict(render.ROLE_DELTA), None, _cont(gen, 0))
            finish = finish_reason if step.end == len(output) else None
            delta = render.chat_delta(output, step, split=gen.split_reasoning, call_id=gen.call_id)
            yield render.chat_chunk(env, delta, finish, _cont(gen, step.end))
    async for tail in _tail(gen, "chat.completion.chunk"):
        yield tail


async def completion_events(engine: SimEngine, gen: Generation) -> Events:
    """Text completion stream objects: one chunk per engine step, usage chunk, ``[DONE]``."""
    env, output = gen.envelope, gen.output
    async with aclosing(engine.run(gen.seq)) as steps:
        async for step in steps:
            finish = output.finish_reason if step.end == len(output) else None
            yield render.completion_chunk(env, output.raw(step.start, step.end), finish, _cont(gen, step.end))
    async for tail in _tail(gen, "text_completion"):
        yield tail


async def _tail(gen: Generation, object_: str) -> Events:
    """Usage chunk (if asked; carries ``metrics``) then ``[DONE]``. Metrics without usage ride on a
    usage-less final chunk with ``choices: []``."""
    metrics = gen.metrics()
    if gen.include_usage:
        yield render.usage_chunk(gen.envelope, object_, gen.usage(), metrics)
    elif metrics is not None:
        chunk = render.usage_chunk(gen.envelope, object_, gen.usage(), metrics)
        del chunk["usage"]
        yield chunk
    yield DONE


def _cont(gen: Generation, completion_tokens: int) -> dict[str, Any] | None:
    return gen.usage(completion_tokens) if gen.continuous_usage else None


async def sse_frames(events: Events) -> Frames:
    """Frame each object as one SSE event."""
    async with aclosing(events) as source:
        async for event in source:
            yield render.sse(event)


async def named_sse_frames(events: TypedEvents) -> Frames:
    """Frame each object as one SSE event named after its ``type``."""
    async with aclosing(events) as source:
        async for event in source:
            yield render.sse_event(event)


async def cut_after(frames: Frames, limit: int) -> Frames:
    """Pass ``limit`` frames, then raise ``SimulatedCrash`` (the server cuts the connection)."""
    async with aclosing(frames) as source:
        sent = 0
        async for frame in source:
            if sent >= limit:
                raise SimulatedCrash(f"#sim:die_after={limit}")
            yield frame
            sent += 1


async def run_to_end(engine: SimEngine, gen: Generation) -> None:
    """Non-stream: run every step (with real timing); the caller renders ``gen`` afterwards."""
    async with aclosing(engine.run(gen.seq)) as steps:
        async for _ in steps:
            pass
