"""Running one generation: stream pipelines (events -> SSE frames -> optional cut) and the
non-stream path, plus the streaming response that always closes what it streams.

Each stage is a small async generator that closes the stage below it (``aclosing``), so a client
disconnect (``ClosingStreamingResponse`` cancels the task streaming it) or a simulated crash frees
the slot at once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from . import render
from .engine import Sequence, SimEngine
from .errors import SimulatedCrash
from .text import Output

DONE = "[DONE]"

Events = AsyncGenerator[dict[str, Any] | str, None]
"""Stream objects in order: chunk dicts, then the literal ``[DONE]``."""
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

    def usage(self, completion_tokens: int | None = None) -> dict[str, Any]:
        """Usage so far (default: all emitted tokens)."""
        done = self.seq.generated if completion_tokens is None else completion_tokens
        return render.usage(self.seq.prompt_tokens, done)

    def metrics(self) -> dict[str, Any] | None:
        """The per-request metrics object, or None when not asked for."""
        return render.request_metrics(self.seq, self.k) if self.include_metrics else None


async def chat_events(engine: SimEngine, gen: Generation) -> Events:
    """Chat stream objects: role chunk, one chunk per engine step, usage chunk, ``[DONE]``."""
    env, output = gen.envelope, gen.output
    async with aclosing(engine.run(gen.seq)) as steps:
        async for step in steps:
            if step.start == 0:
                yield render.chat_chunk(env, dict(render.ROLE_DELTA), None, _cont(gen, 0))
            finish = output.finish_reason if step.end == len(output) else None
            delta = render.chat_delta(output, step, split=gen.split_reasoning)
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
