"""A prompt's token ids from vLLM's ``/tokenize`` answer, as a typed array, parsed in pieces.

vLLM answers ``{"count": n, "max_model_len": m, "tokens": [id, ...], "token_strs": null}``
(``TokenizeResponse``, as compact JSON). A 1M-token prompt's answer is ~7 MB: parsed whole into
Python ints it would hold the event loop for tens of ms and keep ~40 bytes an id; here the
``tokens`` array is cut out of the answer (:func:`split_answer`: the rest is decoded with it emptied,
which proves it was the answer's own ``tokens``), and its text parsed by numpy a piece at a time
(:func:`parse_ids`) into ``uint32``: 4 bytes an id. What is not a list of ids — anything but
decimal numbers with a comma between each two, whitespace aside (a sign, a fraction, an exponent, an
empty or trailing item), an id of 2**32 or more, another count than the answer's — gives no ids, as
a list of anything else did.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dspark_common import json_codec
from dspark_common.turns import Work

#: Where the answer's ``tokens`` array starts (its ``[`` ends the match).
_TOKENS = re.compile(rb'"tokens"\s*:\s*\[')
#: Bytes of ids text parsed per piece (~37,000 ids: ~1 ms).
PIECE_BYTES = 256 * 1024
#: JSON's whitespace, taken out of the ids' text before it is parsed.
_WHITESPACE = b" \t\r\n"
_SPACES = tuple(bytes([space]) for space in _WHITESPACE)


def split_answer(body: bytes) -> tuple[Any, slice | None]:
    """``body`` decoded, its ``tokens`` array left empty, and where that array's text is in ``body``
    (between its brackets); the whole of ``body`` decoded and None where ``tokens`` is no flat array
    of it. Raises ``ValueError`` if ``body`` is not JSON."""
    found = _TOKENS.search(body)
    if found is not None:
        end = body.find(b"]", found.end())
        if end >= 0:
            try:
                answer = json_codec.loads(body[: found.end()] + body[end:])
            except ValueError:
                answer = None  # the first "]" closed something else: an array in the array
            if isinstance(answer, dict) and answer.get("tokens") == []:
                return answer, slice(found.end(), end)
    return json_codec.loads(body), None


def parse_ids(body: bytes, span: slice, count: int) -> Work[NDArray[np.uint32] | None]:
    """The ``count`` ids written in ``body[span]`` (comma-separated decimal, as in JSON), a piece of
    :data:`PIECE_BYTES` at a time; None if it holds anything else."""
    start, stop = span.start, span.stop
    if not body[start:stop].strip():
        return np.zeros(0, dtype=np.uint32) if count == 0 else None
    pieces: list[NDArray[np.uint32]] = []
    while True:
        end = body.find(b",", min(start + PIECE_BYTES, stop), stop)
        end = stop if end < 0 else end
        piece = body[start:end]
        if any(space in piece for space in _SPACES):  # not vLLM's compact JSON: rare
            piece = piece.translate(None, _WHITESPACE)
        if not _is_list(piece):
            return None  # a trailing comma leaves an empty last piece
        try:
            numbers = np.fromstring(piece, dtype=np.int64, sep=",")
        except ValueError:
            return None  # two numbers with no comma between
        if int(numbers.max()) >= 2**32:
            return None
        pieces.append(numbers.astype(np.uint32))
        if end == stop:
            break
        start = end + 1
        yield
    ids = np.concatenate(pieces)
    return ids if len(ids) == count else None


def _is_list(text: bytes) -> bool:
    """Whether ``text`` (no whitespace) may be numbers with a comma between each two: no sign, and not
    ended by a comma, which numpy reads past; it raises for the rest (an empty item, a fraction)."""
    return text[-1:] not in (b"", b",") and b"-" not in text and b"+" not in text
