"""A command's failure as one line (gateway/cli/failures.py): what the user reads, whatever raised."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from gateway.admin.durations import parse_duration
from gateway.cli.failures import CliError, checked, describe, first_line, validation_message


class Limits(BaseModel):
    rpm: int

    @field_validator("rpm")
    @classmethod
    def positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be positive")
        return value


def test_a_bad_flag_value_names_the_flag() -> None:
    assert checked("--grace", parse_duration, "2h").total_seconds() == 7200
    assert checked("--grace", parse_duration, None) is None
    with pytest.raises(CliError) as failed:
        checked("--grace", parse_duration, "soon")
    assert failed.value.message.startswith("--grace: invalid duration 'soon'") and failed.value.status == 1


def test_errors_read_on_one_line() -> None:
    assert first_line("\n  \n first \nsecond") == "first"
    assert describe(OSError("disk full\nmore detail")) == "OSError: disk full"
    assert describe(KeyError()) == "KeyError"
    with pytest.raises(ValidationError) as refused:
        Limits(rpm=0)
    assert validation_message(refused.value) == "rpm: must be positive"
