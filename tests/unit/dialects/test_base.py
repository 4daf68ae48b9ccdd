"""The dialect seam (gateway/dialects/base.py): what goes down to a dialect is data, what comes up
from a translator is a value."""

from __future__ import annotations

import collections.abc
import dataclasses
import typing

import pytest

from gateway.dialects.base import Answer, Context, Step


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
