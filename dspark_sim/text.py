"""Deterministic output scripts, the simulated tokenizer and prompt-token estimates (pure, no I/O).

A "token" is a word piece: a word with its leading space, or one punctuation mark; ``</think>`` is a
single token, as in DeepSeek-V4's tokenizer. A request's output is its *script* (reasoning, then
``</think>``, then the answer) cut to ``max_tokens``. The script depends only on the config seed, the
request's content and its ``seed`` field, so the same request always gets the same text.

If the last user message (or prompt) asks to "count from A to B" (or "count to B"), the answer is the
numbers ``A, A+1, ..., B``, handy for exact assertions; otherwise it is generic filler text. A scripted
tool call (``dspark_sim.tools``) replaces the answer with the call's arguments, and a conversation
ending with a tool's result is answered by quoting it; both keep a short fixed reasoning part.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass
from typing import NamedTuple

from .tools import ToolCall, result_answer

THINK_START = "<think>"
THINK_END = "</think>"
"""The end-of-reasoning marker, one token."""

MAX_COUNT = 100_000
"""Largest count span honoured by "count from A to B" (numbers)."""

_PIECE = re.compile(r"\s*[\w']+|\s*[^\w\s]|\s+\Z")
_COUNT_RANGE = re.compile(
    r"count(?:ing)?\s+(?:up\s+|down\s+)?from\s+(-?\d+)\s+(?:to|through|until)\s+(-?\d+)", re.I
)
_COUNT_TO = re.compile(r"count(?:ing)?\s+(?:up\s+)?to\s+(\d+)", re.I)
_FILLER_VOCABULARY = (
    "the model draft tokens accept verify batch slot queue cache prefill decode step sequence latency "
    "throughput request answer context window speculative target layer expert router attention block "
    "memory budget gateway stream chunk usage reasoning simple careful result check value first next "
    "again because therefore however also then so while each every both small large fast steady"
)
_WORDS = _FILLER_VOCABULARY.split()
_REASONING_OPENERS = ("Okay, let me think about this.", "Hmm, let me work through it.", "Let me see.")


def pieces(text: str) -> list[str]:
    """Split text into simulated tokens; ``"".join(pieces(t)) == t`` (trailing whitespace is a token)."""
    return _PIECE.findall(text)


def derive_seed(*parts: object) -> int:
    """A stable 64-bit seed from ``parts`` (sha256, unlike the per-process salted ``hash``)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big")


class Span(NamedTuple):
    """What output tokens ``[start, end)`` say once the reasoning and tool parsers have read them (a
    tuple: one is built per stream chunk, and a frozen dataclass costs twice as much to make)."""

    reasoning: str
    content: str
    arguments: str
    """The tool call's arguments text in the span (only when the output is a call)."""
    opens_call: bool
    """The span holds the call's first token, where the call's id and name are sent."""


@dataclass(frozen=True, slots=True)
class Output:
    """The tokens one request emits and why it ends.

    ``think_end`` is the index of the ``</think>`` token, or ``None`` when the output has no complete
    reasoning part (thinking off). If ``max_tokens`` cut the output inside the reasoning, the marker is
    absent but ``in_reasoning`` is True: everything emitted was reasoning. With ``call``, the answer
    tokens are that call's arguments (cut short with ``finish_reason`` "length" if ``max_tokens``
    fell inside them); ``call`` is None when no argument token was emitted.
    """

    tokens: tuple[str, ...]
    think_end: int | None
    in_reasoning: bool
    finish_reason: str
    call: ToolCall | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def answer_start(self) -> int:
        """Index of the first answer token (``len`` when everything is reasoning)."""
        if self.in_reasoning:
            return len(self.tokens)
        return 0 if self.think_end is None else self.think_end + 1

    def raw(self, start: int = 0, end: int | None = None) -> str:
        """Text of ``tokens[start:end]`` as the model wrote it (``</think>`` included)."""
        return "".join(self.tokens[start:end])

    def split(self, start: int = 0, end: int | None = None) -> tuple[str, str]:
        """``(reasoning, content)`` of ``tokens[start:end]`` as a reasoning parser splits it."""
        end = len(self.tokens) if end is None else end
        if self.in_reasoning:
            return self.raw(start, end), ""
        if self.think_end is None:
            return "", self.raw(start, end)
        boundary = self.think_end
        reasoning = self.raw(start, min(end, boundary)) if start < boundary else ""
        content = self.raw(max(start, boundary + 1), end) if end > boundary + 1 else ""
        return reasoning, content

    def span(self, start: int = 0, end: int | None = None, *, split: bool = True) -> Span:
        """Tokens ``[start, end)`` as reasoning, content and call arguments. Without ``split`` (no
        reasoning parser) the reasoning stays in the content, ``</think>`` included; a call is always
        told apart (the tool parser is on either way)."""
        end = len(self.tokens) if end is None else end
        text_end = end if self.call is None else min(end, self.answer_start)
        if start >= text_end:
            reasoning, content = "", ""
        elif split:
            reasoning, content = self.split(start, text_end)
        else:
            reasoning, content = "", self.raw(start, text_end)
        if self.call is None:
            return Span(reasoning, content, "", False)
        first = self.answer_start
        return Span(reasoning, content, self.raw(max(start, first), end), start <= first < end)


def build_output(
    *,
    seed: int,
    request_key: str,
    instruction: str,
    thinking: bool,
    max_tokens: int | None,
    ignore_eos: bool = False,
    reasoning_tokens: int = 48,
    content_tokens: int = 96,
    call: ToolCall | None = None,
    tool_result: str | None = None,
    end_marker: str = THINK_END,
) -> Output:
    """The output for one request: its script cut to ``max_tokens``.

    ``request_key`` is everything that identifies the request's content (it seeds the filler text);
    ``instruction`` is the last user message or the prompt (searched for "count from A to B").
    ``tool_result`` (the conversation ends with a tool's result) makes the answer quote it; else
    ``call`` makes the answer that call's arguments. Both come with a fixed one-sentence reasoning.
    ``end_marker`` is the one token between the reasoning and the answer.
    With ``ignore_eos`` and ``max_tokens``, filler continues until exactly ``max_tokens`` tokens, and
    the finish reason is ``length``, as vLLM's: with EOS ignored only the limit ends the sequence.

    Generation stops one token past the cut (filler goes by whole sentences: a few more), so a short
    ``max_tokens`` costs a sentence, not the whole ~150-token script, nor 200,000 tokens for "count
    to 100000". The answer and the reasoning have their own random streams, so the answer is the
    same with thinking on or off, and every output is a prefix of the same request's longer outputs.
    """
    answer_rng = random.Random(derive_seed(seed, "text", request_key))
    thought_rng = random.Random(derive_seed(seed, "thought", request_key))
    need = None if max_tokens is None else max_tokens + 1  # tokens worth generating
    counted = None if tool_result is not None or call is not None else _count_request(instruction)
    if tool_result is not None:
        call = None  # a tool's result is answered: the directive that called it is done
    thought: list[str] = []
    if thinking and tool_result is not None:
        thought = pieces("The tool returned its result. I will quote it for the user.")
    elif thinking and call is not None:
        thought = pieces(f"The user asked me to call {call.name}. I will call it with the arguments given.")
    elif thinking and counted is not None:
        thought = pieces(
            f"The user wants me to count from {counted[0]} to {counted[1]}. I will list the numbers, "
            "separated by commas."
        )
    elif thinking:
        count, opener = _vary(thought_rng, reasoning_tokens), thought_rng.choice(_REASONING_OPENERS)
        thought = _filler(thought_rng, count, opener=opener, stop=need)
    marker = 1 if thinking else 0  # the </think> token between the two parts
    left = None if need is None else need - len(thought) - marker
    if tool_result is not None:
        answer = pieces(result_answer(tool_result))
    elif call is not None:
        answer = pieces(call.arguments)
    elif counted is not None:
        answer = _count_pieces(*counted, stop=left)
    else:
        answer = _filler(answer_rng, _vary(answer_rng, content_tokens), opener=None, stop=left)
    script = ([*thought, end_marker] if thinking else []) + answer
    if ignore_eos and max_tokens is not None and len(script) < max_tokens:
        more = max_tokens - len(script)
        script += _filler(answer_rng, more, opener=None, lead=" ")[:more]
    think_end = len(thought) if thinking else None
    if max_tokens is None or len(script) < max_tokens or (len(script) == max_tokens and not ignore_eos):
        return Output(tuple(script), think_end, False, "stop", call)
    cut = tuple(script[:max_tokens])
    if think_end is not None and max_tokens <= think_end:
        return Output(cut, None, True, "length")
    started = call is not None and max_tokens > (0 if think_end is None else think_end + 1)
    return Output(cut, think_end, False, "length", call if started else None)


def estimate_prompt_tokens(texts: list[str], *, per_message: int = 4, fixed: int = 3) -> int:
    """Cheap deterministic prompt size, tokens: ceil(len/4) per text + per-message overhead + fixed."""
    return fixed + sum(per_message + math.ceil(len(text) / 4) for text in texts)


def _vary(rng: random.Random, typical: int) -> int:
    """``typical`` +-25%, at least 1."""
    return max(1, round(typical * rng.uniform(0.75, 1.25)))


def _count_request(text: str) -> tuple[int, int] | None:
    """``(first, last)`` if ``text`` asks to count, else None (spans beyond MAX_COUNT are clipped)."""
    if match := _COUNT_RANGE.search(text):
        first, last = int(match.group(1)), int(match.group(2))
    elif match := _COUNT_TO.search(text):
        first, last = 1, int(match.group(1))
    else:
        return None
    step = 1 if last >= first else -1
    if abs(last - first) >= MAX_COUNT:
        last = first + step * (MAX_COUNT - 1)
    return first, last


def _count_pieces(first: int, last: int, stop: int | None = None) -> list[str]:
    """Tokens of ``"first, first+1, ..., last"``: each number, then a comma token (with ``stop``, at
    most that many: the start of the whole)."""
    step = 1 if last >= first else -1
    out: list[str] = []
    for index, number in enumerate(range(first, last + step, step)):
        if stop is not None and len(out) >= stop:
            break
        if index:
            out.append(",")
        out.append(f" {number}" if index else str(number))
    return out


def _filler(
    rng: random.Random, count: int, *, opener: str | None, lead: str = "", stop: int | None = None
) -> list[str]:
    """About ``count`` tokens of sentence-shaped filler (whole sentences, so possibly a few more);
    with ``stop``, no sentence is begun once that many tokens are there (a prefix of the whole)."""
    out = pieces(opener) if opener else []
    until = count if stop is None else min(count, stop)
    while len(out) < until:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 12))]
        sentence = " ".join(words).capitalize() + "."
        out += pieces((" " if out or lead else "") + sentence)
    return out
