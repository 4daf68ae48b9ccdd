"""Sequence trace: one JSON line per sequence leaving the engine (``SimConfig.trace_file``, off by default).

For benchmarks that must see what happened *at the slot*, e.g. how long a slot stays idle between one
sequence finishing and the next one arriving. Each line::

    {"request_id":"chatcmpl-<x-request-id>-<8 hex>","arrival":1234.5,"scheduled":1234.5,
     "first_token":1234.5,"finish":1234.6,"prompt_tokens":20,"output_tokens":4,"preemptions":0,
     "priority":0,"reason":"length"}

Times are ``time.monotonic()`` seconds of the simulator process, i.e. Linux ``CLOCK_MONOTONIC``, which
every process on the machine shares (comparable with another process's ``time.monotonic()``):

- ``arrival``: the request was parsed and validated and its sequence built (before it waits for a slot);
- ``scheduled``: it first took a slot (``preemptions``: times it lost it again); ``first_token``: the
  engine emitted its first token (None when it never got one);
- ``finish``: it left the engine, its slot already given back (after its last token, or on abort).

``output_tokens`` is what was emitted; ``priority`` the request's (vLLM's field, 0 by default);
``reason`` is "stop", "length" or "abort" (client gone).
A sequence cancelled while stalled (``#sim:stall``) never reached the engine and has no line.

Cost: a dict and an orjson encoding per sequence into a list; the lines are written to the file (opened
for appending) in one write at most ``flush_interval_s`` after the first unwritten one, and at shutdown.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import IO

from dspark_common import json_codec

from .engine import EngineObserver
from .sequence import Sequence, Step


class SequenceTrace:
    """Appends a line per finished sequence to ``path`` (an ``EngineObserver``; see the module doc)."""

    def __init__(self, path: str | Path, flush_interval_s: float = 1.0) -> None:
        self.path = Path(path)
        self.flush_interval_s = flush_interval_s
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._pending: list[str] = []
        self._timer: asyncio.TimerHandle | None = None

    def on_prefill(self, seq: Sequence) -> None:
        """Nothing: only the end of a sequence is traced."""

    def on_step(self, seq: Sequence, step: Step) -> None:
        """Nothing: only the end of a sequence is traced."""

    def on_preempt(self, seq: Sequence) -> None:
        """Nothing: the sequence's line counts its preemptions."""

    def on_finish(self, seq: Sequence, reason: str) -> None:
        """Buffer the line of ``seq``; schedule a flush (or flush now when no event loop runs)."""
        if self._file is None:
            return
        line = {
            "request_id": seq.request_id,
            "arrival": seq.arrival,
            "scheduled": seq.scheduled,
            "first_token": seq.first_token,
            "finish": time.monotonic(),
            "prompt_tokens": seq.prompt_tokens,
            "output_tokens": seq.generated,
            "preemptions": seq.preemptions,
            "priority": seq.priority,
            "reason": reason,
        }
        self._pending.append(json_codec.dumps_text(line) + "\n")
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._timer = loop.call_later(self.flush_interval_s, self.flush)

    def flush(self) -> None:
        """Write the buffered lines now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending and self._file is not None:
            self._file.write("".join(self._pending))
            self._file.flush()
            self._pending.clear()

    def close(self) -> None:
        """Flush and close the file (idempotent); later sequences are no longer written."""
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


class Observers:
    """Several ``EngineObserver``s as one, called in order."""

    def __init__(self, *observers: EngineObserver) -> None:
        self._observers = observers

    def on_prefill(self, seq: Sequence) -> None:
        for observer in self._observers:
            observer.on_prefill(seq)

    def on_step(self, seq: Sequence, step: Step) -> None:
        for observer in self._observers:
            observer.on_step(seq, step)

    def on_preempt(self, seq: Sequence) -> None:
        for observer in self._observers:
            observer.on_preempt(seq)

    def on_finish(self, seq: Sequence, reason: str) -> None:
        for observer in self._observers:
            observer.on_finish(seq, reason)
