"""Parsing of ``#sim:`` fault directives."""

from __future__ import annotations

import pytest

from dspark_sim.errors import SimError
from dspark_sim.faults import Faults, parse_faults


def test_no_directive():
    assert parse_faults("count from 1 to 3") == Faults()


def test_all_directives_combined():
    faults = parse_faults("hi #sim:status=503 and #sim:die_after=4 #sim:stall=0.25 #sim:ignore_max_tokens=1")
    assert faults == Faults(status=503, die_after=4, stall_s=0.25, ignore_max_tokens=True)


@pytest.mark.parametrize(
    "text",
    [
        "#sim:status=200",
        "#sim:status=abc",
        "#sim:die_after=-1",
        "#sim:stall=x",
        "#sim:explode=1",
        "#sim:ignore_max_tokens=yes",
    ],
)
def test_bad_directive_is_400(text):
    with pytest.raises(SimError) as info:
        parse_faults(text)
    assert info.value.status == 400
