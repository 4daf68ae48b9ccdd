"""Token ids of a prompt as the simulated tokenizer makes them: what the prefix cache keys its blocks
by (:mod:`dspark_sim.prefix_cache`) and ``/tokenize`` answers.

Deterministic and prefix-stable, as a real tokenizer over a chat template is: a text is cut into
pieces of 4 characters from its start, each piece one id (a 64-bit multiply-xorshift hash of its code
points, folded into the vocabulary above the special ids), so a prompt that repeats another's
messages and adds more repeats its ids. The pieces are hashed together by numpy: a 1M-token prompt
takes tens of ms, not the seconds a Python loop per piece would, so the simulator keeps up with
prompts of ``max_model_len``. A chat prompt is ``<bos>``, then per message 4 markers (its role and
the template's separators) and its text's ids, then 2 ids opening the assistant's turn: as many ids
as :func:`~dspark_sim.text.estimate_prompt_tokens` counts (``fixed`` 3, ``per_message`` 4). A raw
prompt is ``<bos>`` and its text's ids (``fixed`` 1, ``per_message`` 0). Ids are ``uint32`` arrays.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

#: DeepSeek-V4's vocabulary size; ids below :data:`SPECIAL` are markers.
VOCAB = 129_280
SPECIAL = 1_000
BOS = 0
#: The two ids that open the assistant's turn at the end of a chat prompt.
ASSISTANT_OPEN = (1, 2)
#: Characters per id.
PIECE_CHARS = 4
#: What pads a text's last piece: no code point (they end at 0x10FFFF), so "ab" is not "ab\0\0".
_PAD = np.uint32(0xFFFFFFFF)
#: Odd 64-bit multipliers of a piece's two halves (two code points each), and the finaliser's
#: (SplitMix64's constants).
_FIRST, _SECOND = np.uint64(0x9E3779B97F4A7C15), np.uint64(0x94D049BB133111EB)
_MIX = np.uint64(0xBF58476D1CE4E5B9)

Ids = NDArray[np.uint32]
#: A prompt's ids as the prefix caches take them: the tokenizer's array, or a list (tests).
PromptIds = Sequence[int] | Ids


def text_ids(text: str) -> Ids:
    """``text``'s ids: one per :data:`PIECE_CHARS` characters (the last piece may be shorter)."""
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    pad = -len(points) % PIECE_CHARS
    if pad:
        points = np.concatenate([points, np.full(pad, _PAD, dtype=np.uint32)])
    # a piece's 4 code points read as two uint64 (a view, no copy); uint64 arithmetic wraps: mod 2**64
    halves = points.view(np.uint64).reshape(-1, 2)
    mixed = halves[:, 0] * _FIRST + halves[:, 1] * _SECOND
    mixed ^= mixed >> np.uint64(31)
    mixed *= _MIX
    mixed ^= mixed >> np.uint64(29)
    return (SPECIAL + mixed % np.uint64(VOCAB - SPECIAL)).astype(np.uint32)


def _role_markers(role: str) -> list[int]:
    """The 4 markers of a message of ``role``: its role's id, then the template's separators."""
    return [3 + zlib.crc32(role.encode()) % (SPECIAL - 10), SPECIAL - 3, SPECIAL - 2, SPECIAL - 1]


def chat_ids(messages: Iterable[tuple[str, str]]) -> Ids:
    """The ids of a chat prompt of ``(role, text)`` pairs, in the order the template renders them."""
    parts: list[Ids] = [np.array([BOS], dtype=np.uint32)]
    for role, text in messages:
        parts += [np.array(_role_markers(role), dtype=np.uint32), text_ids(text)]
    parts.append(np.array(ASSISTANT_OPEN, dtype=np.uint32))
    return np.concatenate(parts)


def raw_ids(text: str) -> Ids:
    """The ids of a raw (text completion) prompt."""
    return np.concatenate([np.array([BOS], dtype=np.uint32), text_ids(text)])
