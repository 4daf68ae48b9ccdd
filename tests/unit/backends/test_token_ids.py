"""/tokenize's ids as a typed array (gateway/backends/token_ids.py): vLLM's answer, however it is
spaced, gives its ids; anything that is not a flat list of the count's ids gives none."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from dspark_common.turns import run_now
from gateway.backends.token_ids import PIECE_BYTES, parse_ids, split_answer


def ids_of(body: bytes) -> np.ndarray | None:
    answer, span = split_answer(body)
    return None if span is None else run_now(parse_ids(body, span, answer["count"]))


def parsed(text: bytes, count: int) -> np.ndarray | None:
    return run_now(parse_ids(text, slice(0, len(text)), count))


def test_vllms_answer_gives_its_ids_over_many_pieces() -> None:
    ids = [(i * 2_654_435_761) % 2**32 for i in range(3 * PIECE_BYTES // 10)]  # ids of up to 10 digits
    answer = {"count": len(ids), "max_model_len": 1_048_576, "tokens": ids, "token_strs": None}
    body = orjson.dumps(answer)
    assert len(body) > 2 * PIECE_BYTES
    decoded, span = split_answer(body)
    assert decoded == {**answer, "tokens": []} and body[span.start - 1 : span.stop + 1].startswith(b"[")
    got = run_now(parse_ids(body, span, len(ids)))
    assert got is not None and got.dtype == np.uint32 and got.tolist() == ids


def test_spaced_json_and_an_empty_prompt() -> None:
    spaced = json.dumps({"count": 3, "tokens": [5, 0, 4294967295]}, indent=2).encode()
    assert ids_of(spaced).tolist() == [5, 0, 4294967295]
    assert ids_of(b'{"count": 0, "tokens": [ ]}').tolist() == []


@pytest.mark.parametrize(
    "text",
    [b"1,2,", b",1,2", b"1,,2", b"1, ,2", b"1,\n,2", b"1 2", b"1,-2", b"1,2.0", b"1,2e3", b"1,true",
     b'1,"2"', b"4294967296,1", b"99999999999999999999,1", b"1,2,3", b"1", b" "],
)  # fmt: skip
def test_anything_but_two_ids_gives_none(text: bytes) -> None:
    assert parsed(text, 2) is None


def test_a_trailing_comma_where_a_piece_ends_gives_none() -> None:
    text = b",".join([b"7"] * PIECE_BYTES)
    assert parsed(text, PIECE_BYTES).tolist() == [7] * PIECE_BYTES
    assert parsed(text + b",", PIECE_BYTES) is None
    # the span's end bounds every piece: what follows it is not read
    assert run_now(parse_ids(b"[1,2]", slice(1, 4), 2)).tolist() == [1, 2]


def test_an_array_that_is_not_the_answers_own_flat_tokens_is_decoded_whole() -> None:
    nested = b'{"count": 2, "tokens": [[1], [2]]}'
    assert split_answer(nested) == ({"count": 2, "tokens": [[1], [2]]}, None)
    # an escaped quote makes a key that ends in "tokens": its array is not the ids
    decoy = b'{"count": 2, "x\\"tokens": [9], "tokens": [1, 2]}'
    assert split_answer(decoy) == ({"count": 2, 'x"tokens': [9], "tokens": [1, 2]}, None)
    assert split_answer(b'{"count": 2}') == ({"count": 2}, None)
    with pytest.raises(ValueError):
        split_answer(b'{"count": 2, "tokens": [1, 2]')
