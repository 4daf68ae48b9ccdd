"""Token ids of a prompt as the simulated tokenizer makes them: what the prefix cache keys its blocks
by (:mod:`dspark_sim.prefix_cache`) and ``/tokenize`` answers.

Deterministic and prefix-stable, as a real tokenizer over a chat template is: a text is cut into
pieces of 4 characters from its start, each piece one id (CRC-32 of its UTF-8, folded into the
vocabulary above the special ids), so a prompt that repeats another's messages and adds more repeats
its ids. A chat prompt is ``<bos>``, then per message 4 markers (its role and the template's
separators) and its text's ids, then 2 ids opening the assistant's turn: as many ids as
:func:`~dspark_sim.text.estimate_prompt_tokens` counts (``fixed`` 3, ``per_message`` 4). A raw prompt
is ``<bos>`` and its text's ids (``fixed`` 1, ``per_message`` 0).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

#: DeepSeek-V4's vocabulary size; ids below :data:`SPECIAL` are markers.
VOCAB = 129_280
SPECIAL = 1_000
BOS = 0
#: The two ids that open the assistant's turn at the end of a chat prompt.
ASSISTANT_OPEN = (1, 2)
#: Characters per id.
PIECE_CHARS = 4


def text_ids(text: str) -> list[int]:
    """``text``'s ids: one per :data:`PIECE_CHARS` characters (the last piece may be shorter)."""
    span = VOCAB - SPECIAL
    return [
        SPECIAL + zlib.crc32(text[i : i + PIECE_CHARS].encode()) % span
        for i in range(0, len(text), PIECE_CHARS)
    ]


def _role_markers(role: str) -> list[int]:
    """The 4 markers of a message of ``role``: its role's id, then the template's separators."""
    return [3 + zlib.crc32(role.encode()) % (SPECIAL - 10), SPECIAL - 3, SPECIAL - 2, SPECIAL - 1]


def chat_ids(messages: Iterable[tuple[str, str]]) -> list[int]:
    """The ids of a chat prompt of ``(role, text)`` pairs, in the order the template renders them."""
    ids = [BOS]
    for role, text in messages:
        ids += _role_markers(role)
        ids += text_ids(text)
    ids += ASSISTANT_OPEN
    return ids


def raw_ids(text: str) -> list[int]:
    """The ids of a raw (text completion) prompt."""
    return [BOS, *text_ids(text)]
