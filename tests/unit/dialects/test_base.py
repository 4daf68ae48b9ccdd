"""The dialect seam (gateway/dialects/base.py): what goes down to a dialect is data, what comes up
from a translator is a value."""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import typing
from typing import cast

import pytest

from gateway.dialects.base import Answer, Context, Prepared, Step, Translator


def callable_fields(cls: type) -> list[str]:
    """The fields of dataclass ``cls`` whose type is, or may be, a callable."""
    hints = typing.get_type_hints(cls)
    found = []
    for field in dataclasses.fields(cls):
        kinds = typing.get_args(hints[field.name]) or (hints[field.name],)
        if any(
            typing.get_origin(k) is collections.abc.Callable or k is collections.abc.Callable for k in kinds
        ):
            found.append(field.name)
    return found


@pytest.mark.parametrize("cls", [Context, Step, Answer])
def test_what_crosses_the_seam_holds_no_callables(cls: type) -> None:
    """A dialect is told data (the caller, the settings, whether the client asked for telemetry) and
    returns values: nothing it holds calls back into the exchange or the recorder."""
    assert callable_fields(cls) == []


def test_the_check_sees_a_callable_field() -> None:
    @dataclasses.dataclass
    class Leaky:
        observe: collections.abc.Callable[[int], None] | None = None

    assert callable_fields(Leaky) == ["observe"]


@pytest.mark.parametrize(
    ("body", "param", "sent"),
    [
        (b'{"model":"m","max_tokens":5000}', "max_tokens", {"model": "m", "max_tokens": 40}),
        (b'{"input":"hi"}', "max_output_tokens", {"input": "hi", "max_output_tokens": 40}),
        (b"{}", "max_tokens", {"max_tokens": 40}),
    ],
)
def test_a_capped_request_sends_its_cap_last_where_it_wins(body: bytes, param: str, sent: dict) -> None:
    """The cap is spliced last: the value ``json.loads`` (vLLM's request parsing) keeps of a repeated
    key, so it holds over one the client sent."""
    budget = 5000 if b"max_tokens" in body else None
    prepared = Prepared(body, False, budget, param, 1, cast(Translator, None))
    prepared.capped(40)
    assert json.loads(prepared.body) == sent and prepared.output_budget == 40
