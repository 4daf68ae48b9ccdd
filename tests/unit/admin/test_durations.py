"""Human durations and ``since`` filters (gateway/admin/durations.py), for the CLI and the admin API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.admin.durations import expires_after, parse_duration, parse_since


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30d", timedelta(days=30)), ("12h", timedelta(hours=12)), (" 1.5 M ", timedelta(minutes=1.5)),
     ("2w", timedelta(weeks=2)), ("90s", timedelta(seconds=90))],
)  # fmt: skip
def test_a_number_and_a_unit(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "d", "-1d", "0h", "3y", "1e9w"])
def test_anything_else_is_refused_with_the_rule(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_since_is_a_duration_ago_or_an_instant_in_utc() -> None:
    before = datetime.now(UTC)
    ago = parse_since("7d")
    assert ago is not None and before - timedelta(days=7, seconds=1) < ago <= datetime.now(UTC) - timedelta(
        days=7
    )
    assert parse_since("2026-12-01T10:00:00") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert parse_since("2026-12-01T10:00:00+02:00") == datetime(2026, 12, 1, 8, tzinfo=UTC)
    assert parse_since(None) is None
    with pytest.raises(ValueError, match="^must be"):
        parse_since("yesterday")
    with pytest.raises(ValueError, match="9999"):
        expires_after(timedelta(days=3_000_000))
