"""ReasoningSplitter: an incremental state machine over DeepSeek-V4 output text.

``feed(text) -> SplitDelta`` as text arrives in any pieces, ``finish() -> SplitDelta`` at the end.
Whatever the chunking — one piece, or cut at every character, or a speculative chunk carrying the end
of reasoning, the marker and the start of the answer — the concatenated output is the same: text is
released as soon as it cannot be part of a marker, and only a suffix that is still a prefix of some
marker is held back (never longer than the longest marker, and flushed by ``finish``). The reasoning
markers are :class:`Markers` (``<think>`` / ``</think>`` by default; any non-empty strings, e.g. the
`` thinking`` / `` response`` of a ``--reasoning-config``); the DSML markers are DeepSeek's.

States and transitions follow vLLM's DeepSeek-V4 parser (``vllm/parser/deepseek_v4.py``), with one
state of its own, ``pending``:

=========  ==========================  ==========================================
state      marker                      then
=========  ==========================  ==========================================
pending    start                       reasoning; the text before it is answer
pending    end                         content; the text before it was reasoning
pending    DSML ``tool_calls``/invoke  tools / invoke; the text before it is answer
reasoning  start                       absorbed (duplicate start marker)
reasoning  end                         content
reasoning  DSML ``tool_calls`` open    tools (reasoning ends)
content    start                       reasoning (only when thinking is on)
content    end                         absorbed (only when thinking is on)
content    DSML ``tool_calls`` open    tools
content    DSML ``invoke`` open        invoke
tools      DSML ``invoke`` open        invoke; other text between calls is dropped
invoke     DSML ``invoke``/block end   one :class:`ToolCall` emitted, back to tools
=========  ==========================  ==========================================

With thinking on, DeepSeek-V4's template ends the prompt with the start marker, so its reasoning
usually comes with no start marker — but an upstream that ignores the template's ``thinking`` (another
model, another template) answers with no marker at all, and its answer is no reasoning. So the text is
reasoning only once a marker shows it: it starts ``pending`` (held back), and an end marker makes what
was held reasoning, while an output that ends with no marker was all answer — and so is one that
has gone :data:`PENDING_MAX_CHARS` with none (what is held stays bounded). A caller that knows the
output starts inside reasoning (a raw prompt that ends with the start marker) starts in
``reasoning`` instead: output cut before the end marker (``finish_reason: length``) is then all
reasoning. With thinking off the text is content, and the reasoning markers are left untouched.
Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from enum import Enum

from gateway.reasoning import dsml
from gateway.reasoning.dsml import ToolCall

THINK_START = "<think>"
THINK_END = "</think>"
#: Most characters held back while no marker has shown whether they are reasoning (~64k tokens);
#: past it they are the answer.
PENDING_MAX_CHARS = 256 * 1024


@dataclass(frozen=True, slots=True)
class Markers:
    """The strings that open and close reasoning in the model's raw output (non-empty, different)."""

    start: str = THINK_START
    end: str = THINK_END

    def __post_init__(self) -> None:
        if not self.start or not self.end or self.start == self.end:
            raise ValueError("reasoning markers must be two different non-empty strings")

    def cut(self, text: str) -> str:
        """``text`` without a trailing piece of a marker: what an output stopped by ``max_tokens``
        while writing a marker (``…</thi``) ends with. Only for cut output: at a natural end such a
        suffix is text."""
        for marker in (self.end, self.start):
            for length in range(min(len(marker) - 1, len(text)), 0, -1):
                if text.endswith(marker[:length]):
                    return text[:-length]
        return text


THINK = Markers()


class State(Enum):
    PENDING = "pending"
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


@dataclass(frozen=True, slots=True)
class _Table:
    """The markers of one state: marker -> action, where one may start (any marker's first
    character), and the longest one's length."""

    actions: dict[str, str]
    may_start: re.Pattern[str]
    longest: int

    @classmethod
    def of(cls, actions: dict[str, str]) -> _Table:
        first = "".join(sorted({marker[0] for marker in actions}))
        return cls(actions, re.compile("[" + re.escape(first) + "]"), max(map(len, actions)))


_TOOL_MARKERS = {**dict.fromkeys(dsml.TOOL_START, "tools"), **dict.fromkeys(dsml.INVOKE_START, "invoke")}
_TOOLS = _Table.of({**dict.fromkeys(dsml.INVOKE_START, "invoke"), **dict.fromkeys(dsml.TOOL_END, "absorb")})
_INVOKE = _Table.of({**dict.fromkeys(dsml.INVOKE_END, "call"), **dict.fromkeys(dsml.TOOL_END, "call")})
_ANSWER = _Table.of(dict(_TOOL_MARKERS))  # content with thinking off


@functools.cache
def _tables(markers: Markers, thinking: bool) -> dict[State, _Table]:
    """The marker table of each state for ``markers``, with thinking on or off (built once each)."""
    if not thinking:  # the reasoning markers are text
        return {State.CONTENT: _ANSWER, State.TOOLS: _TOOLS, State.INVOKE: _INVOKE}
    start, end = markers.start, markers.end
    return {
        State.PENDING: _Table.of({**_TOOL_MARKERS, start: "reasoning", end: "content"}),
        State.REASONING: _Table.of(
            {**dict.fromkeys(dsml.TOOL_START, "tools"), start: "absorb", end: "content"}
        ),
        State.CONTENT: _Table.of({**_TOOL_MARKERS, start: "reasoning", end: "absorb"}),
        State.TOOLS: _TOOLS,
        State.INVOKE: _INVOKE,
    }


def _earliest(text: str, markers: dict[str, str]) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for marker in markers:
        index = text.find(marker)
        if index >= 0 and (
            best is None or index < best[0] or (index == best[0] and len(marker) > len(best[1]))
        ):
            best = (index, marker)
    return best


def _held_suffix(text: str, table: _Table) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``table``'s markers."""
    tail = text[-table.longest + 1 :]
    if not table.may_start.search(tail):
        return 0  # most text: no marker can start in the tail
    longest = 0
    for marker in table.actions:
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
        thinking: True when the request had thinking on (recognise the reasoning markers).
        markers: the reasoning markers.
        start: with thinking on, the state the output starts in: ``PENDING`` (not known: held back
            until a marker shows), ``REASONING`` (the prompt ended with the start marker) or
            ``CONTENT`` (the upstream's answers show no markers unless they reason).
    """

    def __init__(self, thinking: bool, markers: Markers = THINK, start: State = State.PENDING) -> None:
        self._tables = _tables(markers, thinking)  # by state: looked up once per state change
        self._reasoning_markers = (markers.start, markers.end)
        self._answer_may_start = self._tables[State.CONTENT].may_start
        self._enter(start if thinking else State.CONTENT)
        self._held = ""
        self._pending: list[str] = []  # text of the pending state, not yet known to be reasoning or not
        self._pending_chars = 0
        self._invoke = ""
        self.tool_calls_seen = 0
        self.incomplete_tool_call = False
        #: a reasoning marker (start or end) has shown in the text
        self.saw_reasoning_marker = False

    def feed(self, text: str, out: SplitDelta | None = None) -> SplitDelta:
        """Consume the next piece of output text; return what can be released now, appended to ``out``
        if given (the caller's delta: one object per chunk, not one per stage)."""
        if out is None:
            out = SplitDelta()
        table = self._table
        if not self._held and not table.may_start.search(text):  # most pieces: no marker can start in them
            self._emit(text, out)
            if self._pending_chars > PENDING_MAX_CHARS:
                self._give_up_pending(out)
            return out
        buffer = self._held + text
        while True:
            found = _earliest(buffer, table.actions)
            if found is None:
                break
            index, marker = found
            self._emit(buffer[:index], out)
            buffer = buffer[index + len(marker) :]
            if marker in self._reasoning_markers:
                self.saw_reasoning_marker = True
            self._transition(table.actions[marker], out)
            table = self._table
        keep = _held_suffix(buffer, table)
        self._emit(buffer[: len(buffer) - keep], out)
        self._held = buffer[len(buffer) - keep :]
        if self._pending_chars > PENDING_MAX_CHARS:
            self._give_up_pending(out)
        return out

    def passes_through(self, text: str) -> bool:
        """True when :meth:`feed` would release all of ``text`` as answer text and change nothing else:
        in the answer, nothing held back, and no marker can start in ``text``."""
        return self.state is State.CONTENT and not self._held and not self._answer_may_start.search(text)

    @property
    def pending(self) -> bool:
        """True while text is held back not knowing whether it is reasoning (state ``pending``, with
        text in it)."""
        return self.state is State.PENDING and bool(self._pending or self._held)

    def finish(self) -> SplitDelta:
        """Release what is held back (a would-be marker that never completed; pending text, which no
        marker showed to be reasoning, as answer). Call once, at the end.

        An ``invoke`` block cut off before its end marker is dropped and flagged in
        ``incomplete_tool_call`` (a partial call is not a call a client could run).
        """
        out = SplitDelta()
        self._emit(self._held, out)
        self._held = ""
        if self.state is State.PENDING:
            self._give_up_pending(out)
        if self.state is State.INVOKE:
            self.incomplete_tool_call = True
            self._invoke = ""
        return out

    def _emit(self, text: str, out: SplitDelta) -> None:
        if not text:
            return
        state = self.state
        if state is State.REASONING:
            out.reasoning += text
        elif state is State.CONTENT:
            out.content += text
        elif state is State.PENDING:
            self._pending.append(text)
            self._pending_chars += len(text)
        elif state is State.INVOKE:
            self._invoke += text

    def _give_up_pending(self, out: SplitDelta) -> None:
        """No marker showed the pending text to be reasoning (the output ended, or went on for
        :data:`PENDING_MAX_CHARS`): it is the answer, and so is what follows."""
        self._settle(out, reasoning=False)
        self._enter(State.CONTENT)

    def _settle(self, out: SplitDelta, reasoning: bool) -> None:
        """Release the pending text as reasoning or as answer."""
        text = "".join(self._pending)
        self._pending.clear()
        self._pending_chars = 0
        if reasoning:
            out.reasoning += text
        else:
            out.content += text

    def _transition(self, action: str, out: SplitDelta) -> None:
        if action == "absorb":
            return
        if self.state is State.PENDING:  # only an end marker shows that the text before it was reasoning
            self._settle(out, reasoning=action == "content")
        if action == "call":
            call = dsml.parse_invoke(self._invoke)
            self._invoke = ""
            if call is not None:
                out.tool_calls.append(call)
                self.tool_calls_seen += 1
            self._enter(State.TOOLS)
            return
        self._enter(State(action))

    def _enter(self, state: State) -> None:
        self.state = state
        self._table = self._tables[state]
