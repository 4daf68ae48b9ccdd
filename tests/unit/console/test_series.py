"""Usage over time (:mod:`gateway.console.series`): windows, bucket sizes, and the ledger's rows laid
out as one array per series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.console import series

NOW = datetime(2026, 12, 6, 12, 0, 30, tzinfo=UTC)


def test_a_window_is_a_named_range_or_a_custom_one_in_the_browsers_time() -> None:
    day = series.window({}, NOW)
    assert (day.start, day.end, day.bucket_s, day.unit) == (NOW - timedelta(days=1), NOW, 900, "15 min")
    assert (series.window({"range": "hour"}, NOW).unit, series.window({"range": "week"}, NOW).unit) == (
        "1 min", "3 h",
    )  # fmt: skip
    # typed in a browser two hours east of UTC (getTimezoneOffset() = -120)
    custom = series.window(
        {"range": "custom", "from": "2026-12-01T10:00", "to": "2026-12-01T12:00", "tz": "-120"}, NOW
    )
    assert (custom.start, custom.end) == (
        datetime(2026, 12, 1, 8, tzinfo=UTC),
        datetime(2026, 12, 1, 10, tzinfo=UTC),
    )
    assert series.window({"range": "custom", "from": "2026-12-06T00:00Z"}, NOW).end == NOW  # no end: now
    # Paris in December (UTC+1, tz -60) asks for a July morning (UTC+2 then: its own offset, -120)
    summer = {"range": "custom", "from": "2026-07-15T09:00", "from_tz": "-120", "tz": "-60"}
    assert series.window(summer, NOW).start == datetime(2026, 7, 15, 7, tzinfo=UTC)
    for bad, says in (
        ({"range": "year"}, "range must be"),
        ({"range": "custom"}, "needs its from"),
        ({"range": "custom", "from": "yesterday"}, "from must be a time"),
        ({"range": "custom", "from": "2026-12-02T00:00", "to": "2026-12-01T00:00"}, "after its start"),
        ({"range": "custom", "from": "2026-12-02T00:00", "tz": "x"}, "minutes"),
        ({"range": "custom", "from": "1969-12-31T00:00", "to": "1970-01-02T00:00"}, "1970 or later"),
        ({"range": "custom", "from": "2020-01-01T00:00"}, "at most 400 days"),
        ({"range": "custom", "from": "0001-01-01T00:30+01:00"}, "outside the years"),
        ({"range": "custom", "from": "2026-01-01T00:00", "to": "9999-12-31T23:30", "tz": "60"}, "outside"),
    ):
        with pytest.raises(ValueError, match=says):
            series.window(bad, NOW)


def test_buckets_keep_a_chart_under_its_most_points() -> None:
    assert [series.bucket_for(s) for s in (60, 3600, 86_400, 604_800, 10 * 365 * 86_400)] == [
        60, 60, 900, 10_800, 604_800,
    ]  # fmt: skip


def test_rows_become_one_array_per_series_with_the_smallest_summed_as_other() -> None:
    span = series.Window(NOW - timedelta(minutes=3), NOW, 60, "custom")
    first = int((NOW - timedelta(minutes=3)).timestamp()) // 60 * 60
    rows = [
        {"bucket": first, "group": None, "requests": 2, "prompt_tokens": 10, "completion_tokens": 5},
        {
            "bucket": first + 120,
            "group": "search",
            "requests": 1,
            "prompt_tokens": 100,
            "completion_tokens": 1,
        },
        {"bucket": first + 60, "group": "ops", "requests": 1, "prompt_tokens": 1, "completion_tokens": 1},
        {"bucket": first - 600, "group": "ops", "requests": 9, "prompt_tokens": 9, "completion_tokens": 9},
    ]
    laid_out = series.layout(rows, "group", span, top=2)
    assert laid_out["buckets"] == [first, first + 60, first + 120, first + 180]
    named = {s["name"]: s for s in laid_out["series"]}
    assert list(named) == ["(no group)", "search", "other"]  # the top two by tokens, by name, then the rest
    assert named["(no group)"]["tokens"] == [15, 0, 0, 0] and named["search"]["requests"] == [0, 0, 1, 0]
    assert named["other"]["tokens"] == [0, 2, 0, 0]  # ops; its row outside the window is not drawn
    csv_rows = series.csv_rows(laid_out)
    assert [(r["name"], r["requests"], r["tokens"]) for r in csv_rows] == [
        ("(no group)", 2, 15), ("other", 1, 2), ("search", 1, 101),
    ]  # fmt: skip
    assert csv_rows[0]["bucket_start"] == datetime.fromtimestamp(first, UTC).isoformat()
