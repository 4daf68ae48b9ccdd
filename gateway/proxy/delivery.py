"""How much of a stream's output reached the client: output events and their characters, as sent.

The relay reads the upstream into the stream's buffer as fast as the backend produces
(:mod:`gateway.proxy.respond`), so what the translator saw runs ahead of what the client was sent. A
stream whose usage never came (a Responses or Messages stream the client left, or that was cut, before
its closing event) is charged by its output (:meth:`~gateway.telemetry.recorder.RequestRecorder.delivered`):
what was sent, not what was read. Each put into the buffer is marked with the output seen up to it
(its events are in that put or an earlier one); the writer takes whole puts, so once ``n`` bytes have
been sent, the last mark at or below ``n`` is what the client was sent. Pure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.dialects.base import Step


@dataclass(slots=True)
class Delivery:
    """The output a stream's client was sent: ``events`` (each carried output: at least one token) and
    ``chars`` (reasoning and answer text in them)."""

    events: int = 0
    chars: int = 0
    _seen: tuple[int, int] = (0, 0)
    _put: int = 0
    _sent: int = 0
    _marks: deque[tuple[int, int, int]] = field(default_factory=deque)

    def saw(self, steps: Sequence[Step]) -> None:
        """The translator's steps of what was read (in order; their events go in this put or the next)."""
        events, chars = self._seen
        for step in steps:
            seen = step.seen
            if seen is not None and seen.output:
                events, chars = events + 1, chars + seen.reasoning_chars + seen.content_chars
        self._seen = (events, chars)

    def put(self, size: int) -> None:
        """``size`` bytes went into the buffer, holding every event seen so far that was not in an
        earlier put."""
        self._put += size
        self._marks.append((self._put, *self._seen))

    def sent(self, size: int) -> None:
        """``size`` bytes (whole puts) were sent to the client."""
        self._sent += size
        marks = self._marks
        while marks and marks[0][0] <= self._sent:
            _, self.events, self.chars = marks.popleft()
