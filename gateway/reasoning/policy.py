"""Per-request reasoning policy and per-choice splitting, independent of the wire format.

:class:`ChoiceSplit` decides, for one choice, where upstream text goes: it keeps an upstream's own
split (``reasoning``/``reasoning_content`` fields, vLLM with a reasoning parser) and splits raw text
itself otherwise (no parser, or ``/v1/completions``), always taking DSML tool-call markup out of the
answer. ``GATEWAY_REASONING_SPLIT``:

- ``auto``: split raw text until the upstream shows it splits (a reasoning field on this choice, or
  earlier on any response: :class:`ReasoningShown`); then keep the upstream's split.
- ``gateway``: always split the text (upstream reasoning fields are kept as reasoning too).
- ``upstream``: never split think markers; only DSML markup is taken out of the answer.
- ``off``: pass reasoning through untouched (no split, no renaming, no DSML parsing).

Raw text is reasoning only where its markers show it (:mod:`gateway.reasoning.splitter`): with
thinking on, a choice's text waits (state ``pending``) until a marker decides, unless the gateway
knows more — a raw prompt that ends with the start marker (``opened``: the output starts inside
reasoning), or what this upstream's earlier answers showed (:attr:`ReasoningShown.reasoning_markers`:
once one showed a marker, thinking output starts inside reasoning as DeepSeek-V4's template has it;
once one finished with none, its text is the answer until a marker says otherwise). An answer
held to a format (``structured``: ``response_format`` JSON) has no reasoning before it unless a
marker shows one, whatever earlier answers did.

DSML markup becomes ``tool_calls`` only for the functions the request declared and may be called
(``tools``); any other call it spells is dropped — out of the answer as ever, and not handed to a
client that never asked to run it (a model echoing injected text could otherwise make it run one) —
and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from gateway.reasoning.splitter import THINK, Markers, ReasoningSplitter, SplitDelta, State


@dataclass(frozen=True, slots=True)
class ReasoningShown:
    """What a backend's answers showed of its reasoning output (None: not seen yet):
    ``splits_reasoning``, it sends reasoning fields (vLLM ``--reasoning-parser``);
    ``reasoning_markers``, its raw text with thinking on shows reasoning markers (True: one did;
    False: a whole answer had none). A value: a split reads what was known when its answer began
    and returns what it learnt (:attr:`ChoiceSplit.shown`); the backend's owner keeps it
    (:meth:`~gateway.backends.pool.Backend.learn`)."""

    splits_reasoning: bool | None = None
    reasoning_markers: bool | None = None

    def merged(self, other: ReasoningShown) -> ReasoningShown:
        """Both: a backend that split once splits; a marker seen once outweighs an answer without."""
        splits = True if True in (self.splits_reasoning, other.splits_reasoning) else self.splits_reasoning
        markers = self.reasoning_markers
        if other.reasoning_markers is not None and markers is not True:
            markers = other.reasoning_markers
        if (splits, markers) == (self.splits_reasoning, self.reasoning_markers):
            return self
        return ReasoningShown(splits, markers)


SplitMode = Literal["auto", "gateway", "upstream", "off"]
UPSTREAM_REASONING_FIELDS = ("reasoning", "reasoning_content")


@dataclass(frozen=True, slots=True)
class ReasoningPolicy:
    """How one request's reasoning is split and shown.

    ``fields``: client-facing names the reasoning is written under (e.g. ``reasoning_content``,
    ``reasoning``); ``include_reasoning`` False drops it from what the client sees; ``tools``: the
    function names DSML tool-call markup may call (None: any, for a caller that checks none);
    ``markers``: the reasoning markers of the raw text; ``opened``: the prompt ends with the start
    marker (the output starts inside reasoning); ``structured``: the answer is held to a format
    (``response_format`` JSON).
    """

    mode: SplitMode
    thinking: bool
    fields: tuple[str, ...] = ("reasoning_content", "reasoning")
    include_reasoning: bool = True
    tools: frozenset[str] | None = None
    markers: Markers = THINK
    opened: bool = False
    structured: bool = False

    @property
    def passthrough(self) -> bool:
        return self.mode == "off"


class ChoiceSplit:
    """Reasoning/content/tool-call split of one choice, fed piece by piece (stream) or once (non-stream).

    ``known``: what the backend's earlier answers showed. :attr:`shown` is that, plus what this
    choice showed so far (a new object only when it learnt something)."""

    def __init__(self, policy: ReasoningPolicy, known: ReasoningShown) -> None:
        self._policy = policy
        self.shown = known
        upstream_splits = policy.mode == "upstream" or (
            policy.mode == "auto" and known.splits_reasoning is True
        )
        self._splitter = ReasoningSplitter(
            policy.thinking and not upstream_splits, policy.markers, self._start()
        )
        self._upstream_splits = upstream_splits
        self.tool_calls_seen = 0

    def _start(self) -> State:
        """Where thinking output starts (see the module doc)."""
        if self._policy.opened:
            return State.REASONING
        shown = self.shown.reasoning_markers
        if shown is None or (shown and self._policy.structured):
            return State.PENDING
        return State.REASONING if shown else State.CONTENT

    def take(self, upstream_reasoning: str | None, text: str | None) -> SplitDelta:
        """Route one upstream piece: its reasoning field (if any) and its text (content or ``text``)."""
        out = SplitDelta()
        if upstream_reasoning is not None and not self._upstream_splits and self._policy.mode == "auto":
            self._switch_to_upstream_split(out)
        if upstream_reasoning:
            out.reasoning += upstream_reasoning
        if text:
            self._splitter.feed(text, out)
        return self._released(out)

    def passes_through(self, upstream_reasoning: bool, text: str | None) -> bool:
        """True when :meth:`take` of a piece with (``upstream_reasoning``: any) reasoning field and
        ``text`` would return that reasoning as reasoning and the text as answer text, unchanged, and
        change nothing here: no switch to the upstream's split, no text the splitter would hold back
        or route elsewhere."""
        if upstream_reasoning and not self._upstream_splits and self._policy.mode == "auto":
            return False
        return not text or self._splitter.passes_through(text)

    def close(self, finish_reason: str | None = None) -> SplitDelta:
        """Flush what the splitter holds back; call when the choice finishes (with its
        ``finish_reason``). A whole answer (``stop``) that no marker showed to hold reasoning teaches
        that this upstream's answers show none."""
        out = SplitDelta()
        pending = self._splitter.pending
        self._merge(out, self._splitter.finish())
        learnt = self.shown.reasoning_markers is not None
        if pending and finish_reason == "stop" and not self._policy.structured and not learnt:
            self.shown = replace(self.shown, reasoning_markers=False)
        return self._released(out)

    def _switch_to_upstream_split(self, out: SplitDelta) -> None:
        self.shown = replace(self.shown, splits_reasoning=True)
        self._upstream_splits = True
        self._merge(out, self._splitter.finish())
        self._splitter = ReasoningSplitter(thinking=False)

    def _merge(self, out: SplitDelta, part: SplitDelta) -> None:
        out.reasoning += part.reasoning
        out.content += part.content
        out.tool_calls.extend(part.tool_calls)

    def _released(self, out: SplitDelta) -> SplitDelta:
        """``out`` as the client gets it: the tool calls of functions it may call, the others dropped."""
        if self._splitter.saw_reasoning_marker and self.shown.reasoning_markers is not True:
            self.shown = replace(self.shown, reasoning_markers=True)
        allowed = self._policy.tools
        if allowed is not None and out.tool_calls:
            kept = [call for call in out.tool_calls if call.name in allowed]
            out.tool_calls_dropped += len(out.tool_calls) - len(kept)
            out.tool_calls[:] = kept
        self.tool_calls_seen += len(out.tool_calls)
        return out
