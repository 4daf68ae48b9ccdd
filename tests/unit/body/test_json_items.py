"""The items of a body's array taken as the body arrives (gateway/body/json_items.py): the same items
however the body is cut, one at a time, each refused as soon as it passes a request body's shape
bounds, and so is the rest of the body; what is not JSON is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.body.json_items import ItemStream
from gateway.body.json_limits import JsonLimits
from gateway.errors import GatewayError

TOO_COMPLEX = "request_too_complex"
SMALL = JsonLimits(max_values=50, max_strings=20, max_containers=10, max_depth=4)


def taken(raw: bytes, cuts: list[int], limits: JsonLimits = SMALL) -> tuple[list[Any], ItemStream]:
    stream, items, start = ItemStream("requests", limits), [], 0
    for cut in [*cuts, len(raw)]:
        items += stream.feed(raw[start:cut])
        start = cut
    return items + stream.close(), stream


def test_the_items_are_the_same_however_the_body_is_cut() -> None:
    body = {
        "before": [{"requests": [1]}],  # an array of that name deeper down is not it
        "requests": [{"custom_id": "a", "params": {"x": [1.5, None, True], "é": "\\"}}, 7, "s", [], {}],
        "after": {"k": "v"},
    }
    raw = json.dumps(body, ensure_ascii=False).encode()
    for cut in range(len(raw) + 1):
        items, stream = taken(raw, [cut])
        assert items == body["requests"] and (stream.arrays, stream.items) == (1, 5)
    assert taken(raw, list(range(0, len(raw), 3)))[0] == body["requests"]
    assert taken(b'{"requests": {"a": []}}', [])[1].arrays == 0  # not a list: the caller says so
    assert taken(b"[1, 2]", [])[1].arrays == 0


@pytest.mark.parametrize(
    ("raw", "code", "message"),
    [
        (b'{"requests": [{"a": [[[[1]]]]}]}', "invalid_request", "requests.0 is nested more than 4 levels"),
        (b'{"requests": [1, [' + b"[]," * 10 + b"[]]]}", TOO_COMPLEX, "requests.1 holds more than 10 obj"),
        (b'{"requests": [["s"' + b',"s"' * 20 + b"]]}", TOO_COMPLEX, "requests.0 holds more than 20 strings"),
        (b'{"requests": [[1' + b",1" * 50 + b"]]}", TOO_COMPLEX, "requests.0 holds more than 50 values"),
        (b'{"junk": [' + b"[]," * 10 + b'[]], "requests": []}', TOO_COMPLEX, "The body holds more than 10"),
        (b'{"requests": [1,]}', "invalid_request", "not valid JSON"),
        (b'{"requests": [1]} {}', "invalid_request", "not valid JSON"),
        (b'{"requests": [1', "invalid_request", "not valid JSON"),
    ],
)  # fmt: skip
def test_a_body_past_a_bound_or_not_json_is_refused(raw: bytes, code: str, message: str) -> None:
    with pytest.raises(GatewayError, match=message) as refused:
        taken(raw, [len(raw) // 2])
    assert refused.value.code == code


def test_an_item_is_refused_as_soon_as_it_passes_a_bound() -> None:
    stream = ItemStream("requests", SMALL)
    assert stream.feed(b'{"requests": [{"ok": 1}, ') == [{"ok": 1}]
    assert stream.feed(b"") == []  # an empty piece is not the end
    with pytest.raises(GatewayError, match="requests.1 holds more than 10 objects"):
        stream.feed(b"[" + b"[]," * 1_000)  # refused before its end arrives
