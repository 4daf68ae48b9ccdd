"""ReasoningSplitter: an incremental state machine over DeepSeek-V4 output text.

``feed(text) -> SplitDelta`` as text arrives in any pieces, ``finish() -> SplitDelta`` at the end.
Whatever the chunking — one piece, or cut at every character, or a speculative chunk carrying the end
of reasoning, the marker and the start of the answer — the concatenated output is the same: text is
released as soon as it cannot be part of a marker, and only a suffix that is still a prefix of some
marker is held back (never longer than the longest marker, and flushed by ``finish``).

States and transitions follow vLLM's DeepSeek-V4 parser (``vllm/parser/deepseek_v4.py``):

=========  ==========================  ==========================================
state      marker                      then
=========  ==========================  ==========================================
reasoning  ``<think>``                 absorbed (duplicate start marker)
reasoning  ``</think>``                content
reasoning  DSML ``tool_calls`` open    tools (reasoning ends)
content    ``<think>``                 reasoning (only when thinking is on)
content    ``</think>``                absorbed (only when thinking is on)
content    DSML ``tool_calls`` open    tools
content    DSML ``invoke`` open        invoke
tools      DSML ``invoke`` open        invoke; other text between calls is dropped
invoke     DSML ``invoke``/block end   one :class:`ToolCall` emitted, back to tools
=========  ==========================  ==========================================

With thinking on the prompt already ends in ``<think>``, so the output starts in ``reasoning`` and
often has no start marker; output cut before ``</think>`` (``finish_reason: length``) is all reasoning.
With thinking off the text is content, and ``<think>``/``</think>`` are left untouched. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

from gateway.reasoning import dsml
from gateway.reasoning.dsml import ToolCall

THINK_START = "<think>"
THINK_END = "</think>"


class State(Enum):
    REASONING = "reasoning"
    CONTENT = "content"
    TOOLS = "tools"
    INVOKE = "invoke"


@dataclass(slots=True)
class SplitDelta:
    """What one ``feed``/``finish`` released: reasoning text, answer text, completed tool calls, and how
    many completed tool calls were dropped instead (the request declared no tools)."""

    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_calls_dropped: int = 0

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)


_TOOL_MARKERS = {**dict.fromkeys(dsml.TOOL_START, "tools"), **dict.fromkeys(dsml.INVOKE_START, "invoke")}
_MARKERS: dict[tuple[State, bool], dict[str, str]] = {
    (State.REASONING, True): {
        THINK_START: "absorb",
        THINK_END: "content",
        **dict.fromkeys(dsml.TOOL_START, "tools"),
    },
    (State.CONTENT, True): {THINK_START: "reasoning", THINK_END: "absorb", **_TOOL_MARKERS},
    (State.CONTENT, False): dict(_TOOL_MARKERS),
    (State.TOOLS, True): {
        **dict.fromkeys(dsml.INVOKE_START, "invoke"),
        **dict.fromkeys(dsml.TOOL_END, "absorb"),
    },
    (State.INVOKE, True): {**dict.fromkeys(dsml.INVOKE_END, "call"), **dict.fromkeys(dsml.TOOL_END, "call")},
}
_MARKERS[(State.TOOLS, False)] = _MARKERS[(State.TOOLS, True)]
_MARKERS[(State.INVOKE, False)] = _MARKERS[(State.INVOKE, True)]


def _earliest(text: str, markers: dict[str, str]) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for marker in markers:
        index = text.find(marker)
        if index >= 0 and (
            best is None or index < best[0] or (index == best[0] and len(marker) > len(best[1]))
        ):
            best = (index, marker)
    return best


_ALL_MARKERS = {marker for markers in _MARKERS.values() for marker in markers}
_FIRST_CHARACTERS = "".join({marker[0] for marker in _ALL_MARKERS})
#: Where a marker may start: any marker's first character.
_MAY_START = re.compile("[" + re.escape(_FIRST_CHARACTERS) + "]")
_LONGEST_MARKER = max(map(len, _ALL_MARKERS))


def _held_suffix(text: str, markers: dict[str, str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a marker."""
    tail = text[-_LONGEST_MARKER + 1 :]
    if not _MAY_START.search(tail):
        return 0  # most text: no marker can start in the tail
    longest = 0
    for marker in markers:
        # such a suffix starts at an occurrence of the marker's first character within the last
        # len(marker) - 1 characters; the leftmost that matches is the longest (str.find scans in C)
        position = text.find(marker[0], max(0, len(text) - len(marker) + 1))
        while position != -1 and len(text) - position > longest:
            if marker.startswith(text[position:]):
                longest = len(text) - position
                break
            position = text.find(marker[0], position + 1)
    return longest


class ReasoningSplitter:
    """Splits one choice's output into reasoning, content and DSML tool calls, incrementally.

    Args:
        thinking: True when the request had thinking on (start in reasoning, recognise think markers).
    """

    def __init__(self, thinking: bool) -> None:
        self._thinking = thinking
        self.state = State.REASONING if thinking else State.CONTENT
        self._held = ""
        self._invoke = ""
        self.tool_calls_seen = 0
        self.incomplete_tool_call = False

    def feed(self, text: str, out: SplitDelta | None = None) -> SplitDelta:
        """Consume the next piece of output text; return what can be released now, appended to ``out``
        if given (the caller's delta: one object per chunk, not one per stage)."""
        if out is None:
            out = SplitDelta()
        if not self._held and not _MAY_START.search(text):  # most pieces: no marker can start in them
            self._emit(text, out)
            return out
        buffer = self._held + text
        while True:
            markers = _MARKERS[(self.state, self._thinking)]
            found = _earliest(buffer, markers)
            if found is None:
                break
            index, marker = found
            self._emit(buffer[:index], out)
            buffer = buffer[index + len(marker) :]
            self._transition(markers[marker], out)
        keep = _held_suffix(buffer, _MARKERS[(self.state, self._thinking)])
        self._emit(buffer[: len(buffer) - keep], out)
        self._held = buffer[len(buffer) - keep :]
        return out

    def passes_through(self, text: str) -> bool:
        """True when :meth:`feed` would release all of ``text`` as answer text and change nothing else:
        in the answer, nothing held back, and no marker can start in ``text``."""
        return self.state is State.CONTENT and not self._held and not _MAY_START.search(text)

    def finish(self) -> SplitDelta:
        """Release what is held back (a would-be marker that never completed). Call once, at the end.

        An ``invoke`` block cut off before its end marker is dropped and flagged in
        ``incomplete_tool_call`` (a partial call is not a call a client could run).
        """
        out = SplitDelta()
        self._emit(self._held, out)
        self._held = ""
        if self.state is State.INVOKE:
            self.incomplete_tool_call = True
            self._invoke = ""
        return out

    def _emit(self, text: str, out: SplitDelta) -> None:
        if not text:
            return
        if self.state is State.REASONING:
            out.reasoning += text
        elif self.state is State.CONTENT:
            out.content += text
        elif self.state is State.INVOKE:
            self._invoke += text

    def _transition(self, action: str, out: SplitDelta) -> None:
        if action == "absorb":
            return
        if action == "call":
            call = dsml.parse_invoke(self._invoke)
            self._invoke = ""
            if call is not None:
                out.tool_calls.append(call)
                self.tool_calls_seen += 1
            self.state = State.TOOLS
            return
        self.state = State(action)
