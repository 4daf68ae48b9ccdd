"""Bounded JSON bodies (gateway/body/json_limits.py): the shape measured piece by piece is the shape of the
whole, however the body is cut; bodies past a bound are refused after little of them was read;
orjson refuses what is not JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.body.json_limits import JsonLimits, ShapeScanner, deeper_than, param_at, parse_object
from gateway.errors import GatewayError

LOOSE = JsonLimits(max_values=10**9, max_strings=10**9, max_containers=10**9, max_depth=10**6)

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab"\\,[]{}:é\n', max_size=6),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4)
    ),
    max_leaves=30,
)


def shape(raw: bytes, cuts: list[int]) -> tuple[int, int, int, int]:
    scanner = ShapeScanner(LOOSE)
    start = 0
    for cut in sorted({c % (len(raw) + 1) for c in cuts}):
        scanner.feed(raw[start:cut])
        start = cut
    scanner.feed(raw[start:])
    return scanner.values, scanner.strings, scanner.containers, scanner.depth


def expected(value: object) -> tuple[int, int, int]:
    """(values as commas + 1, strings with keys, containers) of ``value``'s JSON text, counted on the
    parsed tree."""
    commas = strings = containers = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            strings += 1
        elif isinstance(node, dict | list):
            containers += 1
            items = list(node.values()) if isinstance(node, dict) else node
            strings += len(node) if isinstance(node, dict) else 0
            commas += max(0, len(items) - 1)
            stack.extend(items)
    return commas + 1, strings, containers


@settings(max_examples=300, deadline=None)
@given(value=_JSON, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_the_shape_of_a_body_does_not_depend_on_how_it_arrives(value: object, cuts: list[int]) -> None:
    """Escapes, quotes, commas and brackets inside strings, and cuts anywhere — between a backslash and
    what it escapes too — give the shape the parsed tree has."""
    raw = json.dumps(value, ensure_ascii=False).encode()
    values, strings, containers, depth = shape(raw, cuts)
    assert (values, strings, containers) == expected(value)
    assert depth == 0  # every container closed


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"a":[' + b"[]," * 60_000 + b"[]]}", "request_too_complex"),  # containers
        (b'{"a":[' + b"0," * 1_200_000 + b"0]}", "request_too_complex"),  # values
        (b'{"a":[' + b'"",' * 60_000 + b'""]}', "request_too_complex"),  # strings
        (b"{" + b",".join(b'"k%d":0' % i for i in range(60_000)) + b"}", "request_too_complex"),  # keys
        (b'{"a":' + b"[" * 65 + b"]" * 65 + b"}", "invalid_request"),  # depth
    ],
)
def test_a_body_past_a_bound_is_refused_before_much_of_it_is_read(body: bytes, code: str) -> None:
    scanner, read = ShapeScanner(JsonLimits()), 0
    with pytest.raises(GatewayError) as refused:
        for start in range(0, len(body), 65536):
            piece = body[start : start + 65536]
            scanner.feed(piece)
            read += len(piece)
    assert refused.value.code == code
    assert read < 4 * 2**20  # refused at the piece that passed the bound, not at the end


def test_a_long_prompt_full_of_brackets_and_commas_is_within_bounds() -> None:
    code = 'if (a[i]) { b[j] = {x, y}; } s = "q";\n' * 200_000  # 7 MB of code: brackets in a string
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": code}]}).encode()
    assert parse_object(raw, JsonLimits())["messages"][0]["content"] == code


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b'{"temperature": NaN}', "temperature"),
        (b'{"top_p": Infinity}', "top_p"),
        (b'{"max_tokens": 1e400}', "max_tokens"),
        (b'{"m": {"x": "a\\ud800"}}', "x"),  # a lone surrogate: not UTF-8 text
        (b'{"a": 1} x', None),
        (b"[1, 2]", None),
    ],
)
def test_what_is_not_json_is_a_400_naming_the_key_before_it(raw: bytes, param: str | None) -> None:
    with pytest.raises(GatewayError) as refused:
        parse_object(raw, JsonLimits())
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, "invalid_request", param)


def test_depth_of_a_parsed_value() -> None:
    deep: object = 1
    for _ in range(10):
        deep = [deep]
    assert not deeper_than(deep, 10) and deeper_than(deep, 9) and not deeper_than("x", 0)
    assert param_at(b'{"a": {"b": 12', 14) == "b"
